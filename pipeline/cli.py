"""The `cryptowire` command. Each command module is imported here, but imports its heavy code lazily,
so that `cryptowire serve` never loads torch or dagster."""

from __future__ import annotations

import typer

from pipeline.commands import core, export, keys, sentiment, serve, sql, tag

app = typer.Typer(
    name="cryptowire",
    help="Crypto news pipeline (Dagster + DuckDB) and the API that serves it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each command module exposes register(app) and imports its heavy code inside the commands.
for _module in (core, serve, sentiment, tag, keys, export, sql):
    _module.register(app)


@app.callback()
def _configure() -> None:
    """Crypto news pipeline (Dagster + DuckDB) and the API that serves it."""
    import logging

    from warehouse.config import get_settings
    from warehouse.logs import configure_logging

    # Warnings and errors only: a command's own output is what the user asked for (httpx logs every request
    # at INFO). `cryptowire serve` configures uvicorn's logging itself.
    configure_logging(get_settings().log_format, level=logging.WARNING)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
