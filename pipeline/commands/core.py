"""`cryptowire materialize`, `status`, `up` and `dev`: running the pipeline and seeing what landed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from pipeline.commands.output import emit_json, fail

JSON = typer.Option(False, "--json", help="Print the result as JSON (for scripts).")


def _settings(feeds: Path | None = None) -> Any:
    from warehouse.config import get_settings

    if feeds is not None:
        if not feeds.exists():
            fail(f"feeds file {feeds} does not exist: pass a YAML file with a top-level `feeds:` list")
        os.environ["CRYPTOWIRE_FEEDS_FILE"] = str(feeds.resolve())
        get_settings.cache_clear()
    return get_settings()


def _print_summary(summary: Any) -> None:
    typer.echo(f"run {summary.run_id}: {'succeeded' if summary.ok else 'FAILED'}")
    for a in summary.assets:
        if a.ok:
            shown = {k: v for k, v in a.metadata.items() if not isinstance(v, list | dict)}
            typer.echo(f"  {a.asset:<20} ok      " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        else:
            typer.echo(f"  {a.asset:<20} FAILED  {a.error}")
    failed = [c for c in summary.checks if not c["passed"]]
    typer.echo(f"  checks: {len(summary.checks) - len(failed)} passed, {len(failed)} failed")
    for c in failed:
        typer.echo(f"    {c['asset']}.{c['check']} failed: {c['metadata'].get('violations')} violation(s)")


def run_materialize(feeds: Path | None, select: str | None, as_json: bool) -> Any:
    from dataclasses import asdict

    from pipeline.jobs import materialize as do_materialize

    settings = _settings(feeds)
    chosen = [s.strip() for s in select.split(",") if s.strip()] if select else None
    if chosen is None or "raw_articles" in chosen:
        from pipeline.ingest import load_feeds
        from pipeline.ingest.feeds import FeedsFileError

        try:  # a broken feeds file is a one-line error before the run, not a failed step in it
            load_feeds(settings.feeds_file)
        except FeedsFileError as exc:
            fail(str(exc))
    try:
        summary = do_materialize(settings, chosen)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        emit_json(asdict(summary))
    else:
        _print_summary(summary)
    return summary


def register(app: typer.Typer) -> None:
    @app.command()
    def materialize(
        feeds: Path | None = typer.Option(None, "--feeds", help="Feeds YAML to ingest (default: the bundled sample)."),
        select: str | None = typer.Option(
            None, "--select", help="Comma-separated assets to materialize (default: all), e.g. raw_articles,articles."
        ),
        as_json: bool = JSON,
    ) -> None:
        """Materialize the pipeline's assets in-process (recorded in the Dagster instance under the data home)."""
        summary = run_materialize(feeds, select, as_json)
        if not summary.ok:
            raise typer.Exit(1)

    @app.command()
    def status(as_json: bool = JSON) -> None:
        """Show the data home, row counts, the newest article, the last run per asset and per-feed health."""
        from pipeline.status import collect

        report = collect(_settings())
        if as_json:
            emit_json(report)
            return
        from pipeline.status import render

        typer.echo(render(report))

    @app.command()
    def up(
        feeds: Path | None = typer.Option(None, "--feeds", help="Feeds YAML to ingest (default: the bundled sample)."),
        serve: bool = typer.Option(True, "--serve/--no-serve", help="Serve the API after materializing."),
        as_json: bool = JSON,
    ) -> None:
        """Materialize every asset (on the bundled sample by default), print what landed, then serve the API."""
        summary = run_materialize(feeds, None, as_json)
        if not summary.ok:
            fail("the pipeline failed (see above); nothing to serve")
        from pipeline.status import collect, render

        report = collect(_settings())
        if not as_json:
            typer.echo(render(report))
        if serve:
            from pipeline.up import serve_after_up

            serve_after_up(_settings())

    @app.command()
    def dev() -> None:
        """Open the Dagster UI (`dagster dev`) on this code location, with DAGSTER_HOME under the data home."""
        import os
        import subprocess
        import sys

        from pipeline.jobs import prepare_dagster_home

        settings = _settings()
        home = prepare_dagster_home(settings)
        typer.echo(f"DAGSTER_HOME={home}")
        dagster = Path(sys.executable).parent / "dagster"
        # Run from the Dagster home: started in the project folder, Dagster warns that the dagster.yaml it finds
        # there "will not be used" (its copy in DAGSTER_HOME is). The settings travel as absolute values.
        quiet = "ignore:Function `dev_command` is superseded"  # `dagster dev` is what we mean
        warnings = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), quiet]))
        env = {**os.environ, **settings.as_env(), "DAGSTER_HOME": str(home), "PYTHONWARNINGS": warnings}
        raise typer.Exit(subprocess.call([str(dagster), "dev", "-m", "pipeline.definitions"], cwd=home, env=env))
