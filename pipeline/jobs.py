"""Running materializations from the CLI: in-process, recorded in the Dagster instance under the data home."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from warehouse.config import PROJECT_ROOT, Settings

DAGSTER_YAML = PROJECT_ROOT / "dagster.yaml"


def prepare_dagster_home(settings: Settings) -> Path:
    """Create the Dagster home under the data home with the project's dagster.yaml; point DAGSTER_HOME at it."""
    home = settings.dagster_home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if not target.exists() or target.read_bytes() != DAGSTER_YAML.read_bytes():
        shutil.copyfile(DAGSTER_YAML, target)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


@dataclass
class AssetOutcome:
    asset: str
    ok: bool
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class RunSummary:
    run_id: str
    ok: bool
    assets: list[AssetOutcome]
    checks: list[dict[str, Any]]


def _plain(value: Any) -> Any:
    raw = getattr(value, "value", value)
    if isinstance(raw, int | float | str | bool | type(None) | list | dict):
        return raw
    return str(raw)


def _root_cause(err: Any) -> str:
    """The exception our code raised, without Dagster's wrappers: ``AllFeedsFailed: all 1 feeds failed ...``."""
    if err is None:
        return "failed"
    while err.cause is not None:
        err = err.cause
    name, _, text = err.message.strip().partition(": ")
    return f"{name.rsplit('.', 1)[-1]}: {text}" if text else name


def materialize(settings: Settings, select: list[str] | None = None) -> RunSummary:
    """Materialize the selected assets (all by default) with the in-process executor, so it starts fast."""
    from pipeline.definitions import ALL_ASSETS, ALL_CHECKS, resources

    prepare_dagster_home(settings)
    settings.ensure_dirs()
    instance = dg.DagsterInstance.get()
    names = {a.key.to_user_string() for a in ALL_ASSETS}
    selection: Any = None
    if select:
        unknown = sorted(set(select) - names)
        if unknown:
            raise ValueError(f"unknown asset(s) {', '.join(unknown)}: choose from {', '.join(sorted(names))}")
        selection = dg.AssetSelection.assets(*select)
    result = dg.materialize(
        [*ALL_ASSETS, *ALL_CHECKS],
        selection=selection,
        resources=resources(settings),
        instance=instance,
        raise_on_error=False,
        # Dagster's own console lines (per-event DEBUG, a stack trace per failed step) drown the summary, which
        # gives each failure in one line; the full traces stay in the run's event log (the Dagster UI). Our own
        # warnings (a feed that failed) are Python logging and still show.
        run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
    )
    outcomes: dict[str, AssetOutcome] = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_MATERIALIZATION":
            mat = event.event_specific_data.materialization  # type: ignore[union-attr]
            key = mat.asset_key.to_user_string()
            outcomes[key] = AssetOutcome(key, True, {k: _plain(v) for k, v in mat.metadata.items()})
        elif event.event_type_value == "STEP_FAILURE":
            step = event.step_key or "?"
            err = event.event_specific_data.error  # type: ignore[union-attr]
            outcomes[step] = AssetOutcome(step, False, error=_root_cause(err))
    checks = []
    for ev in result.get_asset_check_evaluations():
        checks.append(
            {
                "asset": ev.asset_key.to_user_string(),
                "check": ev.check_name,
                "passed": ev.passed,
                "severity": ev.severity.value,
                "metadata": {k: _plain(v) for k, v in ev.metadata.items()},
            }
        )
    return RunSummary(run_id=result.run_id, ok=result.success, assets=list(outcomes.values()), checks=checks)
