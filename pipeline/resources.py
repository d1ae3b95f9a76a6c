"""Dagster resources: the warehouse (one DuckDB file) and the feed sources."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb

from warehouse import db

log = logging.getLogger(__name__)


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse. Opened read-write per asset (DuckDB allows one writer process at a time)."""

    path: str

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Ties the run to its process for crash recovery (``pipeline.recovery.claim_run``); never fails a run."""
        run = context.run
        if context.instance is None or run is None:
            return
        from pipeline.recovery import claim_run

        try:
            claim_run(context.instance, run.run_id)
        except Exception:  # noqa: BLE001 - without the tag the run is judged by its events, as before
            log.warning("could not tag run %s with its process", run.run_id, exc_info=True)

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        try:
            con = db.connect(Path(self.path))
        except (db.WarehouseLocked, db.WarehouseLogCorrupt, db.WarehouseTooNew) as exc:
            # the UI shows a Failure's text as the step's error, not "Error occurred while executing op"
            raise dg.Failure(description=str(exc)) from exc
        try:
            yield con
        finally:
            con.close()


class FeedsResource(dg.ConfigurableResource):
    """Where the feeds list comes from (a YAML file; see feeds.yaml)."""

    feeds_file: str


class SnapshotsResource(dg.ConfigurableResource):
    """Where serving snapshots are published, and how many are kept."""

    directory: str
    keep: int = 3
