"""Dagster run history is kept to a retention (an operator's review: 0.6 MB a run, never removed; 2.6 GB a month at a
ten-minute schedule), by the daemon's maintenance job and by `cryptowire materialize` once a day."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from pipeline.history import housekeep_if_due, prune_runs
from warehouse.config import Settings
from warehouse.db import connect


@dg.asset
def counted() -> int:
    return 1


@dg.asset
def other() -> int:
    return 2


def test_old_finished_runs_go_with_their_event_files_but_each_assets_latest_stays(tmp_path: Path) -> None:
    (tmp_path / "dagster").mkdir()
    with dg.DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:
        runs = [dg.materialize([counted], instance=instance).run_id for _ in range(4)]
        last_other = dg.materialize([other], instance=instance).run_id
        shards = tmp_path / "dagster" / "history" / "runs"
        assert all((shards / f"{r}.db").exists() for r in runs)
        assert prune_runs(instance, days=7) == 0  # nothing old yet
        deleted = prune_runs(instance, days=7, now=datetime.now(UTC) + timedelta(days=8))
        assert deleted == 3  # the runs of `counted` but its latest; `other`'s only run holds its latest
        left = {r.run_id for r in instance.get_runs()}
        assert left == {runs[-1], last_other}
        assert not any((shards / f"{r}.db").exists() for r in runs[:-1])  # Dagster left these files behind
        latest = instance.get_latest_materialization_event(dg.AssetKey("counted"))
        assert latest is not None and latest.run_id == runs[-1]


def test_materialize_does_the_housekeeping_once_a_day(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    settings.ensure_dirs()
    con = connect(settings.warehouse_path)
    for days in (40, 1):
        con.execute("INSERT INTO feed_fetches (run_id, feed_name, feed_url, started_at, duration_ms, items_seen, "
                    "items_new, items_updated, not_modified) VALUES ('r', 'A', 'https://a.example/rss', "
                    f"now()::TIMESTAMP - INTERVAL {days} DAY, 1, 0, 0, 0, false)")
    con.close()
    with dg.DagsterInstance.local_temp(str(settings.dagster_home)) as instance:
        done = housekeep_if_due(settings, instance)
        assert any("feed_fetches" in line and "deleted 1 " in line for line in done), done
        assert json.loads((settings.dagster_home / "housekeeping.json").read_text())["at"] > 0
        assert housekeep_if_due(settings, instance) == []  # not again within the day
    con = connect(settings.warehouse_path, read_only=True)
    assert con.execute("SELECT count(*) FROM feed_fetches").fetchone()[0] == 1
    con.close()
