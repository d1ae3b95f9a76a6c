"""`cryptowire sql`: a read-only SQL prompt on the warehouse or the published snapshot, for analysts
(the duckdb CLI on PyPI lags the DuckDB 2.x storage format, so this uses the project's own DuckDB)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pipeline.commands.output import emit_json, fail, latest_snapshot

if TYPE_CHECKING:
    from duckdb import DuckDBPyRelation


def _target(snapshot: bool) -> Path:
    from warehouse.config import get_settings

    settings = get_settings()
    if snapshot:
        return latest_snapshot(settings.snapshots_dir)
    if not settings.warehouse_path.exists():
        fail(f"no warehouse at {settings.warehouse_path}: run `cryptowire materialize` first")
    return settings.warehouse_path


def render_table(rel: DuckDBPyRelation, max_rows: int) -> str:
    """The first ``max_rows`` rows drawn as DuckDB draws a table, under the true row count."""
    held = rel.materialize()  # run once: the count and the rows shown come from the same result
    total = held.count("*").fetchall()[0][0]
    shown = min(total, max_rows)
    # preview() draws every row it is given; its own footer is capped at 9,999 rows, so it is replaced.
    box = held.limit(max_rows).preview(max_rows).split("\n")
    closing = max(i for i, line in enumerate(box) if line.startswith("└"))
    footer = f"{total:,} row{'s' if total != 1 else ''}" + (f" ({shown:,} shown)" if shown < total else "")
    return "\n".join([*box[: closing + 1], footer])


def register(app: typer.Typer) -> None:
    @app.command()
    def sql(
        query: str = typer.Argument(
            ..., help="One SQL statement to run. The database is opened read-only; COPY ... TO can still write files."
        ),
        snapshot: bool = typer.Option(
            False, "--snapshot", help="Query the latest serving snapshot instead of the warehouse; works while a "
            "materialization holds the warehouse. Its tables: news (the served articles, with story_id), events, "
            "stories, sentiment (a copy of asset_sentiment), filter_values and snapshot_info."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print rows as a JSON list of objects."),
        max_rows: int = typer.Option(50, "--max-rows", min=1, help="Rows shown in the table view (the first ones)."),
    ) -> None:
        """Run one read-only SQL statement against the warehouse (or the latest snapshot) and print the result."""
        import duckdb

        from warehouse import db

        try:
            statements = len(duckdb.extract_statements(query))
        except duckdb.Error as exc:
            fail(f"{exc}".strip())
        if statements == 0:
            example = '--snapshot "SELECT count(*) FROM news"' if snapshot else '"SELECT count(*) FROM articles"'
            fail(f"the statement is empty: pass one SQL statement, e.g. cryptowire sql {example}")
        if statements > 1:
            fail(f"{statements} SQL statements given: run them one at a time (`cryptowire sql` runs one statement "
                 "and prints its result)")
        try:
            if snapshot:  # a single file or a set of parts (warehouse.parts)
                from warehouse.parts import connect_snapshot

                con = connect_snapshot(_target(snapshot))
            else:
                con = db.connect(_target(snapshot), read_only=True)
        except db.WarehouseLocked as exc:  # its message names the holder and says to pass --snapshot
            fail(str(exc))
        except duckdb.IOException as exc:
            fail(f"cannot open {_target(snapshot)}: {exc}")
        try:
            rel = con.sql(query)
            if rel is None:
                fail("the statement returned no rows (this prompt is read-only: use SELECT, DESCRIBE, SUMMARIZE ...)")
            if as_json:
                cols = rel.columns
                emit_json([dict(zip(cols, row, strict=True)) for row in rel.fetchall()])
            else:
                typer.echo(render_table(rel, max_rows))
        except duckdb.Error as exc:
            fail(f"{exc}".strip())
        finally:
            con.close()
