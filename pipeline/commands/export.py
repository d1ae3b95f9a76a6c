"""`cryptowire export`: write a warehouse table to Parquet or CSV for other tools."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.commands.output import emit_json, fail, json_option, require_out_dir, unwritable

# The warehouse tables README.md's analyst section names, in its order. Only these names ever reach the SQL.
TABLES = (
    "articles",
    "article_tickers",
    "asset_sentiment",
    "crypto_assets",
    "stories",
    "story_articles",
    "story_merges",
    "article_embeddings",
    "prediction_events",
    "prediction_event_sources",
    "raw_articles",
    "feed_fetches",
)
FORMATS = {".parquet": "parquet", ".csv": "csv"}  # --out's suffix -> the format it names


def export_table(warehouse: Path, table: str, fmt: str, out: Path) -> int:
    """Copy one table to ``out``; returns the row count. Opens the warehouse read-only. RuntimeError (its message
    says what to do) when the warehouse is held by a run or ``out`` cannot be written."""
    if table not in TABLES or fmt not in FORMATS.values():
        raise ValueError(f"cannot export table {table!r} as {fmt!r}")
    import duckdb

    from warehouse import db

    try:
        con = db.connect(warehouse, read_only=True)
    except db.WarehouseLocked as exc:
        raise RuntimeError(str(exc)) from exc
    try:
        options = "(FORMAT parquet, COMPRESSION zstd)" if fmt == "parquet" else "(FORMAT csv, HEADER true)"
        # CSV has no list type: lists are written as JSON arrays so that other tools can read them back.
        select = "*"
        if fmt == "csv":
            cols = con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position",
                [table],
            ).fetchall()
            select = ", ".join(
                f"to_json({name}) AS {name}" if dtype.endswith("[]") else name for name, dtype in cols
            )
        literal = str(out).replace("'", "''")
        try:
            con.execute(f"COPY (SELECT {select} FROM {table}) TO '{literal}' {options}")
        except duckdb.IOException as exc:
            raise RuntimeError(unwritable(out, exc)) from None
        return con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    finally:
        con.close()


def register(app: typer.Typer) -> None:
    @app.command()
    def export(
        table: str = typer.Option(..., "--table", help=f"One of: {', '.join(TABLES)}."),
        fmt: str | None = typer.Option(
            None, "--format", help="parquet or csv (default: the one --out's suffix names, else parquet)."
        ),
        out: Path = typer.Option(..., "--out", help="File to write, in a directory that exists."),
        as_json: bool = json_option(help="Print the result as JSON."),
    ) -> None:
        """Write a warehouse table to Parquet or CSV."""
        from warehouse.config import get_settings

        if table not in TABLES:
            fail(f"unknown table {table!r}: choose one of {', '.join(TABLES)}")
        named = FORMATS.get(out.suffix.lower())  # a.csv is CSV; a.txt or a says nothing
        fmt = fmt or named or "parquet"
        if fmt not in FORMATS.values():
            fail(f"unknown format {fmt!r}: choose parquet or csv")
        if named and named != fmt:
            fail(f"--format {fmt} but --out {out} names a {named} file: name it {out.with_suffix('.' + fmt).name}, "
                 "or leave out --format (the suffix chooses)")
        require_out_dir(out, f"{table}.{fmt}")
        warehouse = get_settings().warehouse_path
        if not warehouse.exists():
            fail(f"no warehouse at {warehouse}: run `cryptowire materialize` first")
        try:
            rows = export_table(warehouse, table, fmt, out)
        except RuntimeError as exc:
            fail(str(exc))
        if as_json:
            emit_json({"table": table, "format": fmt, "out": str(out), "rows": rows})
        else:
            typer.echo(f"wrote {rows} rows of {table} to {out}")
