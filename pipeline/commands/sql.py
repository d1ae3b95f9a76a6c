"""`cryptowire sql`: a read-only SQL prompt on the warehouse or the published snapshot, for analysts
(the duckdb CLI on PyPI lags the DuckDB 2.x storage format, so this uses the project's own DuckDB)."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.commands.output import emit_json, fail


def _target(snapshot: bool) -> Path:
    from warehouse.config import get_settings

    settings = get_settings()
    if snapshot:
        from warehouse.publish import current_snapshot

        path = current_snapshot(settings.snapshots_dir)
        if path is None:
            fail(f"no published snapshot under {settings.snapshots_dir}: run `cryptowire materialize` first")
        return path
    if not settings.warehouse_path.exists():
        fail(f"no warehouse at {settings.warehouse_path}: run `cryptowire materialize` first")
    return settings.warehouse_path


def register(app: typer.Typer) -> None:
    @app.command()
    def sql(
        query: str = typer.Argument(..., help="The SQL to run (read-only)."),
        snapshot: bool = typer.Option(
            False, "--snapshot", help="Query the latest serving snapshot (tables news, events) instead of the "
            "warehouse; works while a materialization holds the warehouse."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print rows as a JSON list of objects."),
        max_rows: int = typer.Option(50, "--max-rows", help="Rows shown in the table view."),
    ) -> None:
        """Run a read-only SQL query against the warehouse (or the latest snapshot) and print the result."""
        import duckdb

        from warehouse import db

        try:
            con = db.connect(_target(snapshot), read_only=True)
        except duckdb.IOException as exc:
            fail(f"the warehouse is locked by a running materialization ({exc}); retry later or pass --snapshot")
        try:
            rel = con.sql(query)
            if rel is None:
                fail("the statement returned no rows (this prompt is read-only: use SELECT, DESCRIBE, SUMMARIZE ...)")
            if as_json:
                cols = rel.columns
                emit_json([dict(zip(cols, row, strict=True)) for row in rel.fetchall()])
            else:
                typer.echo(str(rel.limit(max_rows)))
        except duckdb.Error as exc:
            fail(f"{exc}".strip())
        finally:
            con.close()
