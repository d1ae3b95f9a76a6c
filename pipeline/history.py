"""Housekeeping of what runs leave behind: Dagster's run history (about 0.6 MB a run on SQLite, every run, even one
that finds nothing new: 2.6 GB a month at a ten-minute schedule) and old feed_fetches rows.

The daemon's daily ``maintenance`` job does it; ``cryptowire materialize`` does it too after a run when a day has
passed since it was last done, so that a home run by cron alone does not grow without bound either.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from warehouse.config import Settings

FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
EVERY = timedelta(days=1)  # how often `cryptowire materialize` does the housekeeping


def prune_runs(instance: Any, days: int, now: datetime | None = None) -> int:
    """Delete the finished runs created more than ``days`` ago, with their events, except the runs that hold an
    asset's latest materialization (the UI and the automation conditions read it). On SQLite each run's own
    event file goes too (Dagster empties it but leaves the file). Returns how many runs were deleted."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    keys = [record.asset_entry.asset_key for record in instance.get_asset_records()]
    latest = instance.get_latest_materialization_events(keys) if keys else {}
    keep = {entry.run_id for entry in latest.values() if entry is not None}
    storage = instance.event_log_storage
    deleted = 0
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=FINISHED, created_before=cutoff)):
        run_id = record.dagster_run.run_id
        if run_id in keep:
            continue
        instance.delete_run(run_id)
        shard = getattr(storage, "path_for_shard", None)
        if shard is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(shard(run_id) + suffix).unlink(missing_ok=True)
        deleted += 1
    return deleted


def delete_old_fetches(con: Any, days: int) -> int:
    """Delete feed_fetches rows older than ``days``; returns how many."""
    return con.execute(
        f"DELETE FROM feed_fetches WHERE started_at < now()::TIMESTAMP - INTERVAL {int(days)} DAY").fetchall()[0][0]


def prune_fetch_log(settings: Settings, lock_wait: float | None = None) -> int:
    """``delete_old_fetches`` on the warehouse, older than ``fetch_log_days``."""
    from warehouse.db import connect

    con = connect(settings.warehouse_path, lock_wait=lock_wait)
    try:
        return delete_old_fetches(con, settings.fetch_log_days)
    finally:
        con.close()


def _marker(settings: Settings) -> Path:
    return settings.dagster_home / "housekeeping.json"


def housekeep_if_due(settings: Settings, instance: Any) -> list[str]:
    """After a ``cryptowire materialize`` run: the housekeeping, when a day has passed since it was last done
    (here or by the daemon's ``maintenance`` job, which records the same marker). What it removed, as lines
    (none when there was nothing to remove)."""
    marker = _marker(settings)
    try:
        last = json.loads(marker.read_text())["at"]
    except (OSError, ValueError, KeyError, TypeError):
        last = 0.0
    if time.time() - last < EVERY.total_seconds():
        return []
    from warehouse.db import WarehouseLocked

    done, complete = [], True
    try:
        runs = prune_runs(instance, settings.run_history_days)
        if runs:
            done.append(f"deleted {runs} Dagster runs older than {settings.run_history_days} days")
    except Exception as exc:  # a busy run store ("database is locked"): the run itself succeeded, say so and go on
        complete = False
        done.append(f"Dagster runs not pruned ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); the next run "
                    "will try again")
    try:
        rows = prune_fetch_log(settings, lock_wait=5)
        if rows:
            done.append(f"deleted {rows} feed_fetches rows older than {settings.fetch_log_days} days")
    except WarehouseLocked:  # another process writes the warehouse: the next run prunes them
        complete = False
        done.append("feed_fetches not pruned: another process holds the warehouse (the next run will)")
    if complete:
        mark_done(settings)
    return done


def mark_done(settings: Settings) -> None:
    marker = _marker(settings)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"at": time.time()}))
    tmp.replace(marker)
