"""`cryptowire sql`: a read-only SQL prompt on the warehouse or the published snapshot, for analysts
(the duckdb CLI on PyPI lags the DuckDB 2.x storage format, so this uses the project's own DuckDB)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pipeline.commands.output import (
    emit_json,
    fail,
    file_damage,
    json_option,
    open_latest_snapshot,
    unreadable_snapshot,
)

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection, DuckDBPyRelation

# Statement types that only read. SELECT covers WITH ... SELECT, FROM ..., VALUES, TABLE, DESCRIBE, SHOW, SUMMARIZE.
READS = ("SELECT", "EXPLAIN")
NAMES = {"LOAD": "LOAD or INSTALL"}  # DuckDB types INSTALL as LOAD
INSTEAD = {
    "PRAGMA": "call it as a table function in a SELECT, e.g. SELECT * FROM pragma_table_info('news')",
    "CALL": "call it as a table function in a SELECT, e.g. SELECT * FROM pragma_version()",
}


def read_only_refusal(what: str, kind: str = "") -> str:
    instead = INSTEAD.get(kind, "use one that reads (SELECT, WITH ... SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), "
                                "or `cryptowire export` to write a table to a file")
    return f"cryptowire sql is read-only and does not run {what}: {instead}"


def refusal(query: str) -> str | None:
    """Why the one statement in ``query`` may not run (it writes, or may), or None when it only reads. The same in
    both modes: a snapshot's connection is an in-memory database that could be written to, and ATTACH or COPY
    would write files next to a read-only warehouse as well."""
    import duckdb

    statement = duckdb.extract_statements(query)[0]
    try:
        kind = statement.type.name
    except ValueError:  # a statement type this DuckDB's Python API has no name for (UPDATE EXTENSIONS): not a read
        return read_only_refusal("statements of this kind")
    if kind == "EXPLAIN":  # EXPLAIN ANALYZE runs the statement it explains: that one must read too
        explained = re.sub(r"(?is)^EXPLAIN\s*(\([^)]*\))?\s*(ANALY[SZ]E\b)?", "", statement.query)
        try:
            inner = [s.type.name for s in duckdb.extract_statements(explained)]
        except duckdb.Error:  # not told apart: refused rather than run
            inner = []
        if inner != ["SELECT"]:
            return read_only_refusal("EXPLAIN of anything but a SELECT")
    return None if kind in READS else read_only_refusal(f"{NAMES.get(kind, kind)} statements", kind)


def _open(snapshot: bool) -> tuple[DuckDBPyConnection, Path]:
    """A read-only connection to the warehouse, or to the latest snapshot; its path."""
    import duckdb

    from warehouse import db
    from warehouse.config import get_settings

    settings = get_settings()
    if snapshot:  # a single file or a set of parts (warehouse.parts); a damaged one is one error line
        return open_latest_snapshot(settings.snapshots_dir)
    path = settings.warehouse_path
    if not path.exists():
        fail(f"no warehouse at {path}: run `cryptowire materialize` first")
    try:
        return db.connect(path, read_only=True), path
    except db.WarehouseLocked as exc:  # its message names the holder and says to pass --snapshot
        fail(str(exc))
    except duckdb.IOException as exc:
        fail(f"cannot open {path}: {exc}")


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
            ..., help="One SQL statement that reads: SELECT (WITH, FROM, VALUES, TABLE), DESCRIBE, SHOW, SUMMARIZE or "
            "EXPLAIN. Others (CREATE, DELETE, COPY, ATTACH, SET, ...) are refused, in both modes."
        ),
        snapshot: bool = typer.Option(
            False, "--snapshot", help="Query the latest serving snapshot instead of the warehouse; works while a "
            "materialization holds the warehouse. Its tables: news (the served articles, with story_id), events, "
            "stories, sentiment (a copy of asset_sentiment), filter_values, snapshot_info and assets (a copy of "
            "crypto_assets: symbols, names, renames)."
        ),
        as_json: bool = json_option(help="Print rows as a JSON list of objects: DECIMAL as a number, INTERVAL as seconds, "
            "BLOB as base64, dates, times, timestamps (ISO 8601) and UUIDs as strings, NaN and infinities as null."
        ),
        max_rows: int = typer.Option(50, "--max-rows", min=1, help="Rows shown in the table view (the first ones)."),
    ) -> None:
        """Run one read-only SQL statement against the warehouse (or the latest snapshot) and print the result."""
        import duckdb

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
        refused = refusal(query)
        if refused:
            fail(refused)
        con, path = _open(snapshot)
        try:
            # Also refuses what a reading statement type can still write: WITH d AS (DELETE ... RETURNING *) SELECT
            con.execute("BEGIN TRANSACTION READ ONLY")
            rel = con.sql(query)
            if rel is None:
                fail("the statement returned no rows (this prompt is read-only: use SELECT, DESCRIBE, SUMMARIZE ...)")
            if as_json:
                cols = rel.columns
                emit_json([dict(zip(cols, row, strict=True)) for row in rel.fetchall()])
            else:
                typer.echo(render_table(rel, max_rows))
        except duckdb.Error as exc:
            if snapshot and file_damage(exc):  # a part that opened but whose blocks do not read back
                fail(unreadable_snapshot(path, exc))
            if "read-only mode" in str(exc):  # the warehouse's refusal, or the read-only transaction's
                fail(read_only_refusal("statements that write"))
            fail(f"{exc}".strip())
        finally:
            con.close()
