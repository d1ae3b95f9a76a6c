"""A run killed with SIGKILL at any point leaves a data home the next run recovers by itself.

Each case runs the real `cryptowire materialize` on the bundled sample in its own data home, kills it (at a named
crash point, ``CRYPTOWIRE_CRASH_AT``, or after a delay), runs it again, and compares the result with an
uninterrupted run: the same articles and events (no duplicate, none lost), every check passing, the API serving
the newest snapshot, and nothing left for `cryptowire doctor` to repair.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import httpx
import pytest

from warehouse.crashpoints import POINTS
from warehouse.publish import PARTIAL, current_snapshot, list_snapshots

pytestmark = pytest.mark.slow

CLI = str(Path(sys.executable).parent / "cryptowire")
# Points after which the events are committed: their created_at must survive the rerun unchanged.
EVENTS_COMMITTED = {"events:committed", "snapshot:writing", "snapshot:written", "snapshot:published"}
NEWS = "query($after: String) { cryptoNews(after: $after, first: 100) { pageInfo { hasNextPage endCursor } edges { node { newsUrl } } } }"
EVENTS = "query($after: String) { predictionEvents(after: $after, first: 100) { pageInfo { hasNextPage endCursor } edges { node { id } } } }"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {**env, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false", **extra}


def _materialize(home: Path, **extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    out = subprocess.run(
        [CLI, "materialize", "--json"], env=_env(home, **extra), capture_output=True, text=True, timeout=600
    )
    return out, time.monotonic() - started


def _state(home: Path) -> dict:
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        one = lambda sql: con.execute(sql).fetchall()  # noqa: E731
        return {
            "raw": one("SELECT count(*), count(DISTINCT id) FROM raw_articles")[0],
            "articles": sorted(r[0] for r in one("SELECT id FROM articles")),
            "articles_rows": one("SELECT count(*) FROM articles")[0][0],
            "unscored": one("SELECT count(*) FROM articles WHERE sentiment IS NULL OR tickers IS NULL")[0][0],
            "events": dict(one("SELECT id, created_at FROM prediction_events")),
            "events_rows": one("SELECT count(*) FROM prediction_events")[0][0],
            "events_order": [r[0] for r in one("SELECT id FROM prediction_events ORDER BY created_at")],
        }
    finally:
        con.close()


@dataclass
class Reference:
    state: dict
    seconds: float
    models: Path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """An uninterrupted run, timed with the model's int8 graph already built (as every case has it)."""
    first = tmp_path_factory.mktemp("build") / "home"
    out, _ = _materialize(first)
    assert out.returncode == 0, out.stderr
    home = tmp_path_factory.mktemp("reference") / "home"
    shutil.copytree(first / "models", home / "models")
    out, seconds = _materialize(home)
    assert out.returncode == 0, out.stderr
    return Reference(_state(home), seconds, first / "models")


@pytest.fixture
def home(tmp_path: Path, reference: Reference) -> Iterator[Path]:
    home = tmp_path / "home"
    shutil.copytree(reference.models, home / "models")
    yield home


def _kill_after(home: Path, seconds: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([CLI, "materialize"], env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _api_pages(home: Path, key: str, query: str, field: str, path: str) -> list[str]:
    from api.app import create_app
    from tests.support.apiserver import ApiServer
    from warehouse.config import Settings

    got: list[str] = []
    with ApiServer(create_app(Settings(home=home))) as api:
        after = None
        while True:
            r = httpx.post(api.url(f"{path}/{key}"), json={"query": query, "variables": {"after": after}}, timeout=30)
            assert r.status_code == 200 and "errors" not in r.json(), r.text
            page = r.json()["data"][field]
            got += [next(iter(e["node"].values())) for e in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                return got
            after = page["pageInfo"]["endCursor"]


@pytest.mark.parametrize("where", [*POINTS, "after:4s", "after:9s"])
def test_a_killed_run_is_recovered_by_the_next(where: str, home: Path, reference: Reference) -> None:
    if where.startswith("after:"):
        killed = _kill_after(home, float(where.removeprefix("after:").removesuffix("s")))
    else:
        killed, _ = _materialize(home, CRYPTOWIRE_CRASH_AT=where)
        assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-2000:])
    before = _state(home) if where in EVENTS_COMMITTED else None

    again, seconds = _materialize(home)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    assert summary["ok"] and all(c["passed"] for c in summary["checks"]), summary
    if not where.startswith("after:"):  # the dead run was found and marked failed before this one started
        assert any("failed: its process" in line for line in summary["repairs"]), summary["repairs"]
    # a hang guard, not a benchmark: a recovered run takes a normal run's time (the figures: docs/benchmarks.md)
    assert seconds < reference.seconds + 30, (seconds, reference.seconds)

    state = _state(home)
    ref = reference.state
    assert state["raw"][0] == state["raw"][1] == ref["raw"][0]
    assert state["articles"] == ref["articles"] and state["articles_rows"] == len(ref["articles"])
    assert state["unscored"] == 0
    assert set(state["events"]) == set(ref["events"]) and state["events_rows"] == len(ref["events"])
    assert len(set(state["events"].values())) == len(state["events"])  # created_at is unique (the cursor)
    assert state["events_order"] == ref["events_order"]
    if before is not None:
        assert state["events"] == before["events"], "the rerun changed created_at of events the killed run committed"

    snapshots = home / "snapshots"
    assert current_snapshot(snapshots) == list_snapshots(snapshots)[-1]
    assert not list(snapshots.glob(f"*{PARTIAL}*")) and not list(snapshots.glob(".CURRENT.*"))

    key = subprocess.run(
        [CLI, "keys", "create", "--plan", "pro", "--name", "crash", "--json"],
        env=_env(home), capture_output=True, text=True, check=True,
    )
    secret = json.loads(key.stdout)["key"]
    urls = _api_pages(home, secret, NEWS, "cryptoNews", "/crypto-news")
    assert len(urls) == len(set(urls)) == len(ref["articles"])
    assert set(_api_pages(home, secret, EVENTS, "predictionEvents", "/prediction-events")) == set(ref["events"])

    doctor = subprocess.run([CLI, "doctor", "--check"], env=_env(home), capture_output=True, text=True)
    assert doctor.returncode == 0 and "nothing to repair" in doctor.stdout, doctor.stdout + doctor.stderr
