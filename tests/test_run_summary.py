"""The materialize summary against real Dagster runs: a check that raises is a failed check, assets after a
failure are listed as not run."""

from __future__ import annotations

import dagster as dg


@dg.asset
def source() -> int:
    raise OSError("the feed host is down")


@dg.asset(deps=[source])
def derived() -> int:
    return 1


@dg.asset
def snapshot() -> int:
    return 1


@dg.asset_check(asset=snapshot)
def matches() -> dg.AssetCheckResult:
    raise OSError("the snapshot file cannot be read")


@dg.asset_check(asset=snapshot)
def fine() -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=True)


def test_a_raising_check_fails_and_assets_after_a_failure_are_not_run() -> None:
    from pipeline.jobs import summarize

    assets, checks = [source, derived, snapshot], [matches, fine]
    result = dg.materialize([*assets, *checks], raise_on_error=False, instance=dg.DagsterInstance.ephemeral())
    outcomes, evaluated = summarize(result, assets, checks)
    by_name = {o.asset: o for o in outcomes}
    assert set(by_name) == {"source", "derived", "snapshot"}  # the check's step is not an asset
    assert not by_name["source"].ok and "feed host is down" in (by_name["source"].error or "")
    assert by_name["derived"].skipped and by_name["snapshot"].ok
    state = {c["check"]: c["passed"] for c in evaluated}
    assert state == {"matches": False, "fine": True}
    (failed,) = [c for c in evaluated if not c["passed"]]
    assert "cannot be read" in failed["metadata"]["error"]


def test_every_shipped_check_is_known_by_the_step_dagster_runs_it_in() -> None:
    from dagster._core.execution.api import create_execution_plan

    from pipeline.definitions import ALL_CHECKS, defs
    from pipeline.jobs import check_steps

    steps = {s.key for s in create_execution_plan(defs.resolve_implicit_global_asset_job_def()).steps}
    named = check_steps(ALL_CHECKS)
    assert len(named) >= 10 and set(named) <= steps, set(named) - steps
