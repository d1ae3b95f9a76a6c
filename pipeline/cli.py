"""The `cryptowire` command. Each command module is imported here, but imports its heavy code lazily,
so that `cryptowire serve` never loads torch or dagster."""

from __future__ import annotations

import json

import typer

from pipeline.commands import core, export, keys, plot, sentiment, serve, sql, tag, workers

app = typer.Typer(
    name="cryptowire",
    help="Crypto news pipeline (Dagster + DuckDB) and the API that serves it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help, not Typer's rich panels: those (typer 0.29) show every flag with a value type
    # (`--json <bool>`, though it takes none) and keep each line break of a docstring, so help wrapped in the
    # source stayed broken mid-sentence. Click rewraps paragraphs to the terminal. The sub-apps (keys, plot,
    # sentiment) set the same.
    rich_markup_mode=None,
)

# Each command module exposes register(app) and imports its heavy code inside the commands.
for _module in (core, serve, sentiment, tag, keys, export, sql, plot, workers):
    _module.register(app)


def _setting(field: str, value: object) -> str:
    """``CRYPTOWIRE_PORT='abc'``: the variable the user set, not pydantic's field name."""
    name = f"CRYPTOWIRE_{field.upper()}"
    return name if value is None else f"{name}={value!r}"


def _fix(field: str) -> str:
    from warehouse.config import Settings

    info = Settings.model_fields.get(field)
    default = info.default if info and isinstance(info.default, int | float | str) else None
    tail = f" for the default ({default})" if default is not None else ""
    return f"fix it in the environment or .env, or unset it{tail}"


def settings_errors(exc: ValueError) -> list[str]:
    """One line per bad ``CRYPTOWIRE_*`` setting: the variable and its value, what is wrong, what to do."""
    import re

    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        lines = []
        for err in exc.errors():
            field = str(err["loc"][0])
            msg = err["msg"].removeprefix("Value error, ")  # our own validators' messages are sentences already
            msg = msg[:1].lower() + msg[1:]
            lines.append(f"{_setting(field, err.get('input'))}: {msg}; {_fix(field)}")
        return lines
    # pydantic-settings' SettingsError: a list setting (CRYPTOWIRE_PDF_ALLOW_HOSTS) that is not JSON
    found = re.search(r'field "(\w+)"', str(exc))
    if found is None:
        return [f"{exc}; fix the CRYPTOWIRE_* variable in the environment or .env"]
    from warehouse.config import raw_setting

    value = raw_setting(f"CRYPTOWIRE_{found[1].upper()}")  # from the environment or .env, as the settings read it
    example = """'["example.com"]'"""
    return [f"{_setting(found[1], value)}: not a JSON list ({exc.__cause__}); write it as {example} or unset it"]


@app.callback()
def _configure() -> None:
    """Crypto news pipeline (Dagster + DuckDB) and the API that serves it."""
    import logging
    import sys

    from pipeline.commands import output

    output.reset_json_mode()  # set again by this command's --json option, if it has one
    if "--help" in sys.argv[1:]:  # a command's help needs no settings: show it even when one is bad
        return

    from warehouse.config import get_settings
    from warehouse.logs import configure_logging

    # Every command reads the settings first: a bad CRYPTOWIRE_* value is a one-line error, not a traceback.
    problems: list[str] = []
    try:
        settings = get_settings()
    except ValueError as exc:  # pydantic's ValidationError, pydantic-settings' SettingsError
        problems = settings_errors(exc)
    if problems:
        if "--json" in sys.argv[1:]:  # the command's own --json is not parsed yet: a script still gets JSON
            typer.echo(json.dumps({"error": "; ".join(problems), "exitCode": 2}))
        for line in problems:
            typer.secho(f"error: {line}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2)
    # Warnings and errors only: a command's own output is what the user asked for (httpx logs every request
    # at INFO). `cryptowire serve` configures uvicorn's logging itself.
    configure_logging(settings.log_format, level=logging.WARNING)


def main() -> None:
    """Run the CLI as click's standalone mode would, except that a usage error (a missing or invalid option) under
    ``--json`` is also one JSON document on stdout, as every other error there is: a script reading stdout always
    gets JSON."""
    import sys

    from typer._click.exceptions import ClickException, UsageError  # typer vendors click

    try:
        code = app(standalone_mode=False)
    except ClickException as exc:
        if isinstance(exc, UsageError) and "--json" in sys.argv[1:]:
            typer.echo(json.dumps({"error": exc.format_message(), "exitCode": exc.exit_code}))
        exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
