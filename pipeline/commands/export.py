"""`cryptowire export`: write a warehouse table to Parquet or CSV for other tools."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
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
    "asset_prices",
)
FORMATS = {".parquet": "parquet", ".csv": "csv"}  # --out's suffix -> the format it names
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd"}  # a CSV --out's suffix -> the compression DuckDB gives it


def directory_tail(text: str) -> str | None:
    """What makes ``text`` name a directory whatever is on disk: a trailing separator, or a last part ``.``
    (``Path`` drops both, so that ``Path("newdir/")`` would name a file ``newdir``); None when it names none."""
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    if text.endswith(seps):
        return text[-1]
    if text.endswith(tuple(s + "." for s in seps)):
        return text[-2:]
    return None


def partial_path(out: Path) -> Path:
    """Where an export to ``out`` is written before it is renamed: beside it (a rename within one file system is
    atomic), and named after it, so that the next export to ``out`` finds what a killed one left."""
    return out.with_name(f".{out.name}.partial")


def write_whole(out: Path, write: Callable[[Path], None]) -> None:
    """Have ``write`` fill the temporary file, then fsync it and rename it to ``out``: ``out`` only ever holds a
    complete file. A temporary left by a killed export to ``out`` is taken over (an flock tells it from one a
    running export is writing, which is refused); one left by a failed write is removed."""
    import fcntl

    partial = partial_path(out)
    try:
        fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise RuntimeError(unwritable(out, exc)) from None
    busy = (f"--out {out}: another export to it is running (it writes {partial.name} beside it): wait for it to "
            "finish, or write elsewhere")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the kernel when the holder dies
        except BlockingIOError:
            raise RuntimeError(busy) from None
        try:
            ours = os.stat(partial).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            ours = False
        if not ours:  # renamed away by an export that finished between our open and our lock
            raise RuntimeError(busy)
        done = False
        try:
            write(partial)
            os.fsync(fd)  # the data is on disk before the name points at it
            os.replace(partial, out)
            done = True
        finally:
            if not done:
                partial.unlink(missing_ok=True)
        directory = os.open(out.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # ... and so is the rename
        except OSError:  # a file system that cannot sync a directory: the file is whole under its name all the same
            pass
        finally:
            os.close(directory)
    finally:
        os.close(fd)


def export_table(warehouse: Path, table: str, fmt: str, out: Path) -> int:
    """Copy one table to ``out`` (``write_whole``); returns the row count. Opens the warehouse read-only.
    RuntimeError (its message says what to do) when the warehouse is held by a run or ``out`` cannot be written."""
    if table not in TABLES or fmt not in FORMATS.values():
        raise ValueError(f"cannot export table {table!r} as {fmt!r}")
    import duckdb

    from warehouse import db
    from warehouse.integrity import DAMAGE_HINT, is_damage

    try:
        con = db.connect(warehouse, read_only=True)
    except (db.WarehouseLocked, db.WarehouseLogCorrupt) as exc:
        raise RuntimeError(str(exc)) from exc
    except duckdb.Error as exc:
        if not is_damage(str(exc)):
            raise
        raise RuntimeError(f"cannot open the warehouse {warehouse} ({str(exc).splitlines()[0]}): {DAMAGE_HINT}") from None
    try:
        present = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]
        ).fetchall()[0][0]
        if not present:  # a documented table that a migration this warehouse lacks creates (made by an older cryptowire)
            raise RuntimeError(
                f"the table {table} does not exist in this warehouse ({warehouse}) yet: it was made by an older "
                "cryptowire; run `cryptowire materialize`, which brings it to the current schema and fills the table"
            )
        if fmt == "parquet":
            options = "FORMAT parquet, COMPRESSION zstd"
        else:  # the temporary's name hides --out's suffix, from which DuckDB would pick a compression
            options = f"FORMAT csv, HEADER true, COMPRESSION {COMPRESSIONS.get(out.suffix.lower(), 'none')}"
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

        def copy(partial: Path) -> None:
            literal = str(partial).replace("'", "''")
            try:
                # USE_TMP_FILE false: the temporary exists (write_whole holds it); DuckDB would write a tmp_ beside it
                con.execute(f"COPY (SELECT {select} FROM {table}) TO '{literal}' ({options}, USE_TMP_FILE false)")
            except duckdb.Error as exc:
                if is_damage(str(exc)):  # the warehouse's block, not --out
                    raise RuntimeError(f"cannot read {table} from the warehouse {warehouse} "
                                       f"({str(exc).splitlines()[0]}): {DAMAGE_HINT}") from None
                if isinstance(exc, duckdb.IOException):
                    raise RuntimeError(unwritable(out, exc)) from None
                raise

        write_whole(out, copy)
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
        out_text: str = typer.Option(
            ..., "--out", metavar="<path>", help="File to write, in a directory that exists (written as .NAME.partial "
            "beside it, renamed to NAME when complete)."
        ),
        as_json: bool = json_option(help="Print the result as JSON."),
    ) -> None:
        """Write a warehouse table to Parquet or CSV."""
        from warehouse.config import get_settings

        if table not in TABLES:  # a mistake in the command line: exit 2 with the usage, as click's own
            raise typer.BadParameter(f"unknown table {table!r}: choose one of {', '.join(TABLES)}", param_hint="--table")
        out = Path(out_text)  # drops a trailing "/": read from out_text whether --out names a directory
        named = FORMATS.get(out.suffix.lower())  # a.csv is CSV; a.txt or a says nothing
        fmt = fmt or named or "parquet"
        if fmt not in FORMATS.values():
            raise typer.BadParameter(f"unknown format {fmt!r}: choose parquet or csv", param_hint="--format")
        tail = directory_tail(out_text)
        if tail:  # "newdir/" would otherwise be written as a file named newdir
            example = out / f"{table}.{fmt}"
            if out.is_dir():  # as require_out_dir says it
                fail(f"--out {out_text} is a directory: name the file to write, e.g. --out {example}")
            if out.exists():
                fail(f"--out {out_text} names a directory (it ends in {tail}), but {out} is not one: name the file "
                     f"to write without the {tail}, e.g. --out {out}")
            fail(f"--out {out_text} names a directory (it ends in {tail}), and {out} does not exist: name the file "
                 f"to write, e.g. --out {example}, in a directory that exists (mkdir -p {shlex.quote(str(out))} "
                 "first)")
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
