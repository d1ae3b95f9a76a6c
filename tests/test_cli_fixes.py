"""CLI fixes from the 2026-11-23 audit: `sql` table view, `serve --port`, bad CRYPTOWIRE_* settings, `keys set-plan`,
`keys revoke` / `keys list` output, and `status` per-asset outcomes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from accounts import build_access
from accounts.access import KEY_CACHE_SECONDS
from api.errors import ApiError
from pipeline.cli import app
from tests.support.metered import write_plans
from warehouse.config import PROJECT_ROOT, Settings, get_settings

runner = CliRunner()
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


def _json(*args: str) -> object:
    code, out = _cli(*args, "--json")
    assert code == 0, out
    return json.loads(out)


# --- sql ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def warehouse_183(data_home: Path) -> Path:
    """A real warehouse file with a 183-row table (more than DuckDB's own 20-row display)."""
    data_home.mkdir(parents=True)
    con = duckdb.connect(str(data_home / "warehouse.duckdb"))
    con.execute("CREATE TABLE t AS SELECT range AS id FROM range(183)")
    con.close()
    return data_home


def _shown_ids(out: str) -> list[int]:
    return [int(m) for m in re.findall(r"^│\s*(\d+)\s*│$", out, flags=re.M)]


def test_sql_table_view_gives_the_true_count_and_max_rows_rows(warehouse_183: Path) -> None:
    code, out = _cli("sql", "SELECT id FROM t ORDER BY id")
    assert code == 0, out
    assert _shown_ids(out) == list(range(50))  # the default --max-rows, the first rows
    assert out.rstrip().endswith("183 rows (50 shown)")

    code, out = _cli("sql", "SELECT id FROM t ORDER BY id", "--max-rows", "500")
    assert code == 0, out
    assert _shown_ids(out) == list(range(183))
    assert out.rstrip().endswith("183 rows")

    code, out = _cli("sql", "SELECT id FROM t ORDER BY id", "--max-rows", "7")
    assert _shown_ids(out) == list(range(7)) and out.rstrip().endswith("183 rows (7 shown)")
    code, out = _cli("sql", "SELECT id FROM t WHERE id < 3 ORDER BY id")
    assert _shown_ids(out) == [0, 1, 2] and out.rstrip().endswith("3 rows")
    assert len(_json("sql", "SELECT id FROM t")) == 183  # type: ignore[arg-type]


# --- serve --port and CRYPTOWIRE_* settings ----------------------------------------------------------------------
def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real `cryptowire` in its own process (a regression would start a server: the timeout stops it)."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=PROJECT_ROOT,
        env={**os.environ, **env}, timeout=60,
    )


@pytest.mark.parametrize("port", ["99999", "0"])
def test_serve_refuses_a_port_outside_1_65535(data_home: Path, port: str) -> None:
    out = _run(["serve", "--port", port], {"CRYPTOWIRE_HOME": str(data_home)})
    assert out.returncode == 2, out.stderr
    assert "Invalid value for '--port'" in out.stderr


def test_a_bad_setting_is_one_error_line_for_every_command(data_home: Path) -> None:
    out = _run(["status"], {"CRYPTOWIRE_HOME": str(data_home), "CRYPTOWIRE_PORT": "abc"})
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: CRYPTOWIRE_PORT='abc': input should be a valid integer, unable to parse string as an integer; "
        "fix it in the environment or .env, or unset it for the default (8000)"
    ]
    out = _run(["status", "--json"], {"CRYPTOWIRE_HOME": str(data_home), "CRYPTOWIRE_PORT": "abc"})
    assert out.returncode == 2 and json.loads(out.stdout)["exitCode"] == 2, out.stdout
    assert "CRYPTOWIRE_PORT='abc'" in json.loads(out.stdout)["error"]


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("CRYPTOWIRE_SCHEDULE_CRON", "notcron", "a cron expression has 5 fields"),  # was Dagster's traceback
    ("CRYPTOWIRE_SCHEDULE_CRON", "0 0 30 2 *", "there is no February 30"),
    ("CRYPTOWIRE_SCHEDULE_CRON", "61 * * * *", "'61' is not a minute (0-59)"),
    ("CRYPTOWIRE_PDF_CONCURRENCY", "-3", "greater than or equal to 0"),  # was a traceback at serve's start
    ("CRYPTOWIRE_SNAPSHOTS_KEEP", "0", "greater than or equal to 1"),  # failed the run's last step
    ("CRYPTOWIRE_FETCH_CONCURRENCY", "0", "greater than or equal to 1"),
])
def test_a_setting_out_of_range_is_refused_before_any_work(data_home: Path, variable: str, value: str, says: str) -> None:
    out = _run(["status"], {"CRYPTOWIRE_HOME": str(data_home), variable: value})
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"error: {variable}={value!r}: ") and says in out.stderr, out.stderr


def test_every_cron_dagster_takes_passes_the_settings_check_and_no_other() -> None:
    """The settings' cron check and Dagster's agree: on listed forms and on 2,000 expressions drawn from pieces of
    every kind (ranges, steps, names, ?, L, n-th weekdays, out-of-range values, February's missing days)."""
    import random

    from dagster._utils.schedules import is_valid_cron_string

    from warehouse.cron import cron_problem

    listed = ["*/10 * * * *", "@daily", "@hourly", "0 0 * * mon-fri", "0 0 1 jan *", "0 0 * * 7", "0 0 L * *",
              "0 0 * * 1#2", "0 9 * * mon#1", "0 0 ? * mon", "0-59/15 * * * *", "1,2,3 9-17 * * 1-5", "0 0 30 2 *",
              "0 0 30 2/12 *", "*/0 * * * *", "60 * * * *", "0 0 * * 5L", "*/10 * * * * *", "notcron", "0 24 * * *",
              "0 0 0 * *", "0 0 * 13 *", "0 0 * * 8", "1-2-3 * * * *", "a b c d e"]
    pieces = [["*", "0", "59", "60", "*/15", "5/10", "1-5", "5-1", "*/0", "1,2", "?", "l"],
              ["*", "0", "23", "24", "*/2", "9-17", "?"],
              ["*", "1", "30", "31", "0", "?", "l", "1-31/2", "30/1", "15-30"],
              ["*", "2", "feb", "2/12", "jan-mar", "13", "0", "1,2", "feb/12", "12"],
              ["*", "0", "7", "8", "mon", "mon-fri", "1#2", "mon#1", "5l", "?", "fri#5", "6#6"]]
    rng = random.Random(7)
    drawn = [" ".join(rng.choice(p) for p in pieces) for _ in range(2000)]
    differ = [e for e in listed + drawn if (cron_problem(e) is None) != is_valid_cron_string(e)]
    assert differ == []


def test_settings_travel_to_a_child_started_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cryptowire dev` starts Dagster in the Dagster home: relative paths and .env values must still hold there."""
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text("CRYPTOWIRE_PORT=8123\n")
    monkeypatch.chdir(project)
    monkeypatch.delenv("CRYPTOWIRE_PORT", raising=False)  # the .env value must be the one that travels
    monkeypatch.setenv("CRYPTOWIRE_HOME", "data")
    monkeypatch.setenv("CRYPTOWIRE_PDF_ALLOW_HOSTS", '["example.com"]')
    here = Settings()
    env = here.as_env()
    assert env["CRYPTOWIRE_HOME"] == str(project / "data") and env["CRYPTOWIRE_PORT"] == "8123"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    there = Settings()
    assert there.home == project / "data" and there.port == 8123 and there.pdf_allow_hosts == ["example.com"]
    assert there.as_env() == env


def test_help_works_even_with_a_bad_setting(data_home: Path) -> None:
    out = _run(["keys", "create", "--help"], {"CRYPTOWIRE_HOME": str(data_home), "CRYPTOWIRE_PORT": "abc"})
    assert out.returncode == 0, out.stderr
    assert "--plan" in out.stdout and "CRYPTOWIRE_PORT" not in out.stderr


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("CRYPTOWIRE_PORT", "abc", "valid integer"),
        ("CRYPTOWIRE_PORT", "99999", "less than or equal to 65535"),
        ("CRYPTOWIRE_LOG_FORMAT", "yaml", "should be 'text' or 'json'"),
        ("CRYPTOWIRE_PDF_PREWARM", "maybe", "valid boolean"),
        ("CRYPTOWIRE_PDF_ALLOW_HOSTS", "example.com", "not a JSON list"),
    ],
)
@pytest.mark.parametrize("command", [["status"], ["keys", "list"], ["sql", "SELECT 1"]])
def test_bad_settings_name_the_variable(
    data_home: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str, command: list[str]
) -> None:
    monkeypatch.setenv(variable, value)
    res = runner.invoke(app, command)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {variable}={value!r}: ") and says in lines[0], lines


def test_a_bad_setting_in_dotenv_is_named_with_its_value(
    data_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("CRYPTOWIRE_PDF_ALLOW_HOSTS=example.com\n")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["status"])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: CRYPTOWIRE_PDF_ALLOW_HOSTS='example.com': not a JSON list"), res.stderr


def test_an_empty_setting_means_its_default(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRYPTOWIRE_PLANS_FILE", "")  # was read as "." (a directory): a traceback
    monkeypatch.setenv("CRYPTOWIRE_PORT", "")
    code, out = _cli("keys", "list")
    assert code == 0 and "no keys yet" in out, out


def test_a_plans_file_that_is_a_directory_is_a_clear_error(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRYPTOWIRE_PLANS_FILE", str(data_home.parent))
    res = runner.invoke(app, ["keys", "list"])
    assert res.exit_code != 0
    assert "cannot be read (Is a directory): point CRYPTOWIRE_PLANS_FILE at a YAML file" in res.stderr, res.output


# --- keys --------------------------------------------------------------------------------------------------------
def test_keys_set_plan_moves_a_key_off_a_plan_no_longer_offered(
    data_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _json("keys", "create", "--plan", "pro", "--name", "moved")
    assert isinstance(made, dict)
    gone = _json("keys", "create", "--plan", "free", "--name", "gone")
    assert isinstance(gone, dict)
    _cli("keys", "revoke", gone["id"])

    # The operator replaces the plans: `pro` is no longer offered.
    monkeypatch.setenv("CRYPTOWIRE_PLANS_FILE", str(write_plans(data_home / "plans.yaml", {"tiny": (500, 5)})))
    get_settings.cache_clear()
    access = build_access(get_settings())  # a running server's metering, with its 1 s key cache

    async def check() -> str:
        return (await access.check(made["key"], "news")).plan

    with pytest.raises(ApiError) as refused:
        asyncio.run(check())
    assert refused.value.status == 403
    assert "one of: tiny (`cryptowire keys set-plan ID PLAN`)" in refused.value.message
    assert "restart the server if the plan was added" in refused.value.message

    code, out = _cli("keys", "set-plan", made["id"], "pro")
    assert code == 2 and "unknown plan 'pro'" in out and "tiny" in out and "Usage:" in out
    code, out = _cli("keys", "set-plan", "key_nope", "tiny")
    assert code != 0 and "no active key with id 'key_nope'" in out
    code, out = _cli("keys", "set-plan", gone["id"], "tiny")
    assert code != 0 and "revoked keys cannot be moved" in out

    moved = _json("keys", "set-plan", made["id"], "tiny")
    assert moved == {"id": made["id"], "plan": "tiny", "previousPlan": "pro"}
    time.sleep(KEY_CACHE_SECONDS + 0.2)  # what the command's help promises a running server
    assert asyncio.run(check()) == "tiny"
    asyncio.run(access.close())
    listed = {k["id"]: k for k in _json("keys", "list")}  # type: ignore[union-attr]
    assert listed[made["id"]]["plan"] == "tiny" and listed[made["id"]]["status"] == "active"
    code, out = _cli("keys", "set-plan", made["id"], "tiny")
    assert code == 0 and "already on plan tiny" in out


def test_keys_revoke_twice_and_list_headers(data_home: Path) -> None:
    made = _json("keys", "create", "--plan", "free", "--name", "twice")
    kept = _json("keys", "create", "--plan", "basic", "--name", "kept")
    assert isinstance(made, dict) and isinstance(kept, dict)

    first = _json("keys", "revoke", made["id"])
    assert isinstance(first, dict) and first["alreadyRevoked"] is False and ISO_UTC.match(first["revokedAt"])
    code, out = _cli("keys", "revoke", made["id"])
    assert code == 0 and "already revoked" in out
    again = _json("keys", "revoke", made["id"])
    assert again == {**first, "alreadyRevoked": True}  # the first revocation time is kept
    code, out = _cli("keys", "revoke", "key_nope", "--json")
    assert code != 0 and "no key with id 'key_nope'" in out

    code, out = _cli("keys", "list")
    assert code == 0, out
    header, *rows = out.splitlines()
    assert header.split() == ["id", "status", "plan", "apis", "live", "secrets", "name"]
    by_id = {row.split()[0]: row for row in rows}
    assert by_id[made["id"]].split()[1:5] == ["revoked", "free", "news,events,pdf", "-"]
    assert made["key"][-4:] not in out  # a revoked key shows no secret
    assert f"cw_live_…{kept['key'][-4:]}" in by_id[kept["id"]]
    # the columns line up under the header
    assert {row.index("free" if row is by_id[made["id"]] else "basic") for row in rows} == {header.index("plan")}
    listed = {k["id"]: k for k in _json("keys", "list")}  # type: ignore[union-attr]
    assert listed[made["id"]]["secrets"] == [] and len(listed[kept["id"]]["secrets"]) == 1


# --- status ------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_status_reports_each_assets_own_outcome_in_a_failed_run(
    data_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run where every feed fails: crypto_assets is materialized, raw_articles fails, the rest never start."""
    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))  # restored after the test
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text("feeds:\n  - name: Gone\n    url: gone.xml\n")
    # `--feeds` sets CRYPTOWIRE_FEEDS_FILE in this process: monkeypatch removes it afterwards
    monkeypatch.setenv("CRYPTOWIRE_FEEDS_FILE", str(feeds.resolve()))
    code, out = _cli("materialize", "--feeds", str(feeds))
    assert code == 1, out

    report = _json("status")
    assert isinstance(report, dict)
    by_asset = {a["asset"]: a for a in report["assets"]}
    outcomes = {name: a["last_run"]["outcome"] for name, a in by_asset.items()}
    assert outcomes == {
        "crypto_assets": "materialized", "raw_articles": "failed", "articles": "skipped",
        "asset_reference_prices": "materialized", "prediction_events": "skipped", "asset_sentiment": "skipped",
        "stories": "skipped", "serving_snapshot": "skipped",
    }
    assert {a["last_run"]["status"] for a in by_asset.values()} == {"FAILURE"}  # the whole run's status
    assert ISO_UTC.match(by_asset["crypto_assets"]["last_materialized"])
    assert by_asset["articles"]["last_materialized"] is None
    assert all(ISO_UTC.match(f["at"]) for f in report["feeds"])
    # only checks that were evaluated count: those of the one asset materialized
    assert report["checks"] and {c["asset"] for c in report["checks"]} == {"crypto_assets"}
    assert report["serving"] == {"current": None, "complete": False,
                                 "problem": "nothing published yet: run `cryptowire materialize` to publish a snapshot"}

    code, out = _cli("status")
    assert code == 0, out
    lines = out.splitlines()
    at = lines.index("assets:")
    assert lines[at + 1].split() == ["asset", "last", "materialized", "in", "its", "last", "run", "whole", "run"]
    row = next(line for line in lines[at:] if line.strip().startswith("crypto_assets"))
    assert "materialized" in row and row.endswith("FAILURE") and " UTC " in row
    assert "serving snapshot: none: NOT SERVABLE, nothing published yet" in out
    feeds_header = lines[lines.index("feeds (last fetch):") + 1]
    assert feeds_header.split() == ["feed", "fetched", "at", "http", "seen", "new", "upd", "result"]
    assert any(line.strip().startswith("Gone") and "ERROR no such file" in line for line in lines)


# --- materialize failures ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_materialize_failures_are_one_line_each(tmp_path: Path) -> None:
    """As a user sees it in a terminal (a real process): a broken feeds file fails before any run, and a failed
    step is one line naming the root cause, not Dagster's stack trace."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "CRYPTOWIRE_HOME": str(tmp_path / "home")}
    env.pop("CRYPTOWIRE_FEEDS_FILE", None)
    env.pop("DAGSTER_HOME", None)
    cli = [sys.executable, "-m", "pipeline.cli", "materialize", "--feeds"]

    broken = tmp_path / "broken.yaml"
    broken.write_text("feeds:\n  - name: NoUrl\n")
    res = subprocess.run([*cli, str(broken)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert res.stdout == "" and res.stderr.strip().splitlines() == [
        f"error: feeds file {broken}, entry 1 ('NoUrl'): `url` is missing or not a non-empty string"
    ]

    gone = tmp_path / "gone.yaml"
    gone.write_text("feeds:\n  - name: Gone\n    url: gone.xml\n")
    res = subprocess.run([*cli, str(gone)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    output = res.stdout + res.stderr
    assert re.search(r"raw_articles +FAILED  AllFeedsFailed: all 1 feeds failed", output), output
    # the assets that could not run are listed as such, not left out
    assert re.search(r"articles +skipped not run: an asset it depends on failed", output), output
    assert "Traceback" not in output and "STEP_FAILURE" not in output and len(output.splitlines()) < 20, output


def test_status_marks_a_check_result_older_than_its_asset() -> None:
    """A check the asset's later runs did not evaluate keeps its old result: status says it predates the data."""
    from pipeline.status import render

    report = {"home": "h", "warehouse": "w", "snapshots": "s", "feeds_file": "f", "exists": True, "counts": {},
              "newest_article": None, "feeds": [], "runs_in_progress": [], "assets": [],
              "serving": {"current": "news-x.duckdb", "complete": True, "problem": None},
              "checks": [{"asset": "articles", "check": "scored", "passed": False, "stale": True,
                          "evaluated_at": "2026-11-20T10:00:00Z"},
                         {"asset": "articles", "check": "dated", "passed": True, "stale": False,
                          "evaluated_at": "2026-11-26T10:00:00Z"}]}
    out = render(report)
    assert "FAILED articles.scored (evaluated 2026-11-20 10:00:00 UTC, before the asset's last materialization: stale)" in out
    assert "1 of these results predate" in out and "serving snapshot: news-x.duckdb (complete)" in out


def test_status_finds_a_check_result_older_than_its_asset(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real runs: crypto_assets with its checks, then again without them (as a UI launch may do): status marks
    every check of it stale, and no other."""
    import dagster as dg

    from pipeline.definitions import ALL_ASSETS, ALL_CHECKS, resources
    from pipeline.jobs import materialize
    from pipeline.status import collect

    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))  # restored after the test
    settings = get_settings()
    first = materialize(settings, ["crypto_assets"], say=lambda _line: None)
    assert first.ok and first.checks
    report = collect(settings)
    assert report["checks"] and not any(c["stale"] for c in report["checks"])
    time.sleep(1.1)  # status compares times to the second
    dg.materialize([*ALL_ASSETS, *ALL_CHECKS], selection=dg.AssetSelection.assets("crypto_assets").without_checks(),
                   resources=resources(settings), instance=dg.DagsterInstance.get())
    report = collect(settings)
    stale = {c["check"] for c in report["checks"] if c["stale"]}
    assert stale == {c["check"] for c in first.checks if c["asset"] == "crypto_assets"}, report["checks"]
