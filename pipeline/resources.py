"""Dagster resources: the warehouse (one DuckDB file) and the feed sources."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb

from warehouse import db


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse. Opened read-write per asset (DuckDB allows one writer process at a time)."""

    path: str

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = db.connect(Path(self.path))
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
