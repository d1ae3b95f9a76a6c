"""The `cryptowire` command. Each command module is imported here, but imports its heavy code lazily,
so that `cryptowire serve` never loads torch or dagster."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="cryptowire",
    help="Crypto news pipeline (Dagster + DuckDB) and the API that serves it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules; each exposes register(app). A module that is missing (work in progress) is skipped.
COMMAND_MODULES = ("core", "serve", "sentiment", "tag", "keys", "export", "sql")

for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"pipeline.commands.{_name}")
    except ModuleNotFoundError as exc:  # only a missing command module is tolerated, not a missing dependency
        if exc.name != f"pipeline.commands.{_name}":
            raise
        continue
    _module.register(app)


@app.callback()
def _configure() -> None:
    """Crypto news pipeline (Dagster + DuckDB) and the API that serves it."""
    import logging
    import os

    from warehouse.logs import configure_logging

    # Warnings and errors only: a command's own output is what the user asked for (httpx logs every request
    # at INFO). `cryptowire serve` configures uvicorn's logging itself.
    configure_logging(os.environ.get("CRYPTOWIRE_LOG_FORMAT", "text"), level=logging.WARNING)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
