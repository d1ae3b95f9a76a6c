"""`cryptowire materialize`, `status`, `up` and `dev`: running the pipeline and seeing what landed."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, NoReturn

import typer

from pipeline.commands.output import emit_json, fail, json_option, user_errors

JSON = json_option(help="Print the result as JSON (for scripts).")


def _settings(feeds: Path | None = None) -> Any:
    from warehouse.config import get_settings

    if feeds is not None:
        if not feeds.exists():
            fail(f"feeds file {feeds} does not exist: pass a YAML file with a top-level `feeds:` list")
        # The environment, not an argument: the run's step processes and the assets read settings from it.
        os.environ["CRYPTOWIRE_FEEDS_FILE"] = str(feeds.resolve())
        get_settings.cache_clear()
    return get_settings()


def _print_summary(summary: Any) -> None:
    typer.echo(f"run {summary.run_id}: {'succeeded' if summary.ok else 'stopped' if summary.stopped else 'FAILED'}")
    width = max([20, *(len(a.asset) for a in summary.assets)])
    for a in summary.assets:
        if a.ok:
            shown = {k: v for k, v in a.metadata.items() if not isinstance(v, list | dict)}
            typer.echo(f"  {a.asset:<{width}} ok      " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        else:
            label = "stopped" if a.stopped else "skipped" if a.skipped else "FAILED"
            typer.echo(f"  {a.asset:<{width}} {label:<7} {a.error}")
    failed = [c for c in summary.checks if not c["passed"]]
    typer.echo(f"  checks: {len(summary.checks) - len(failed)} passed, {len(failed)} failed")
    for c in failed:
        if "error" in c["metadata"]:
            typer.echo(f"    {c['asset']}.{c['check']} could not run: {c['metadata']['error']}")
        else:
            sample = c["metadata"].get("sample") or []  # a few of the offending rows, as the check selected them
            examples = "; e.g. " + "; ".join(", ".join(map(str, row)) for row in sample) if sample else ""
            level = c.get("severity", "ERROR")  # WARN: reported, not stopping the run
            typer.echo(f"    {level:<5} {c['asset']}.{c['check']} failed: {c['metadata'].get('violations')} "
                       f"violation(s){examples}")


WAIT_TIMEOUT = typer.Option(
    None, "--wait-timeout", min=0, help="Seconds to wait for a run that holds the warehouse (default: no limit)."
)


def _say(line: str) -> None:
    typer.echo(line, err=True)  # stderr: --json output stays one document


def stop_on_sigterm() -> None:
    """SIGTERM stops a waiting or running materialization as Ctrl-C does (Dagster marks the run canceled or
    failed and frees its slot); the default would kill it without that. Both also set ``runlock.stop_requested``,
    which the wait loops check: a KeyboardInterrupt can be lost in a finalizer, the flag cannot."""
    import signal

    from pipeline.runlock import note_stop, running, stop_requested

    def stop(signum: int, frame: Any) -> None:
        again = stop_requested.is_set()
        note_stop(signum)
        # A repeated stop (one redelivered to a run that has just ended, or a second Ctrl-C) is noted only: raised
        # while the summary prints, it would cut it short. The wait loops look at the flag.
        if not again or running.is_set():
            signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def summary_document(summary: Any) -> dict[str, Any]:
    """The run's summary as `--json` prints it; a failed run also has the keys every --json error has."""
    import signal
    from dataclasses import asdict

    from pipeline import runlock

    doc = asdict(summary)
    if summary.stopped:  # the exit code a stopped process has (_stopped)
        doc["error"] = "the run was stopped; what it committed stays"
        doc["exitCode"] = 128 + (runlock.stop_signal or signal.SIGINT)
    elif not summary.ok:
        failed = [a.asset for a in summary.assets if not a.ok and not a.skipped]
        checks = [f"{c['asset']}.{c['check']}" for c in summary.checks if c.get("stopped_run")]
        if failed or not checks:
            doc["error"] = f"the run failed: {', '.join(failed) or 'see assets'}; each asset's error is under `assets`"
        else:  # every asset that ran succeeded: a blocking check stopped what follows it
            doc["error"] = (f"the run failed: a blocking check failed ({', '.join(checks)}), so the assets after it "
                            "were not run; its violations are under `checks`: fix those rows, then run again")
        doc["exitCode"] = 1
    return doc


FULL = {errno.ENOSPC, errno.EDQUOT}  # no space left, over quota
# SQLite's words for the same (Dagster's run and event storage under the data home): SQLITE_FULL, SQLITE_IOERR
SQLITE_FULL = ("database or disk is full", "disk I/O error")
READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
SQLITE_READ_ONLY = ("attempt to write a readonly database", "unable to open database file", "Read-only file system")


def disk_full(settings: Any, exc: BaseException) -> str | None:
    """One line for an error that a full disk raises (an OSError, SQLite's or DuckDB's words for it) anywhere in
    ``exc``'s chain, naming the data home and what to do; None for any other error."""
    import shutil

    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in seen and len(seen) < 10:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    said = next((e for e in seen if isinstance(e, OSError) and e.errno in FULL), None)
    text = next((w for e in seen for w in (*SQLITE_FULL, "No space left on device") if w in str(e)), None)
    home = settings.home.resolve()
    if said is None and text is None:
        denied = next((e for e in seen if isinstance(e, OSError) and e.errno in READ_ONLY), None)
        words = next((w for e in seen for w in SQLITE_READ_ONLY if w in str(e)), None)
        if denied is None and words is None:
            return None
        return (f"cannot write to the data home {home} ({denied.strerror if denied is not None else words}"
                f"{f': {denied.filename}' if denied is not None and denied.filename else ''}): its file system is "
                "read-only or the files are not this user's to write; make them writable (or set CRYPTOWIRE_HOME to "
                "a data home you can write) and run again: that run repairs what this one left")
    reason = said.strerror if said is not None else text
    try:
        free = f"{shutil.disk_usage(home).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    return (f"cannot write to the data home {home} ({reason}; {free} there): its disk is full or failing; free "
            "space on it (or set CRYPTOWIRE_HOME to a disk with room) and run again: that run repairs what this "
            "one left")


def _damage(settings: Any) -> list[str]:
    """What doctor cannot repair: the warehouse or the SQLite keys database damaged on disk."""
    from accounts.sqlite import platform_damage
    from warehouse import db
    from warehouse.integrity import warehouse_damage

    found = []
    try:
        found.append(warehouse_damage(settings.warehouse_path))
    except (db.WarehouseLocked, db.WarehouseLogCorrupt):
        pass  # a run took the file since (checked next time), or a log `doctor` moves aside (said above)
    if not settings.database_url:
        found.append(platform_damage(settings.platform_db))
    return [line for line in found if line]


def run_materialize(feeds: Path | None, select: str | None, as_json: bool, wait_timeout: float | None = None,
                    emit: bool = True, rederive: bool = False) -> Any:
    """Run the selected assets and print the summary (JSON with ``as_json``; nothing when not ``emit``, unless the
    run failed or was stopped: then the JSON summary is the one document `--json` prints)."""
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
    stop_on_sigterm()
    try:
        summary = do_materialize(settings, chosen, wait_timeout=wait_timeout, say=_say, rederive=rederive)
    except user_errors() as exc:  # an instance that cannot open for want of room or rights: said as such
        fail(disk_full(settings, exc) or str(exc))
    except KeyboardInterrupt:
        _stopped()
    except Exception as exc:  # a full disk under Dagster's SQLite storage raises out of the run itself
        full = disk_full(settings, exc)
        if full is None:
            raise
        fail(full)
    if as_json and (emit or summary.stopped or not summary.ok):  # a run that went wrong always reports
        emit_json(summary_document(summary))
    elif emit:
        _print_summary(summary)
    if summary.stopped:
        _stopped(reported=True)
    return summary


def _stopped(reported: bool = False) -> NoReturn:
    """Exit as a stopped process does (128 + the signal), saying that nothing committed is lost. ``reported``:
    the summary (with ``stopped: true``) is already out, so --json gets no second document."""
    import signal

    from pipeline import runlock

    signum = runlock.stop_signal or signal.SIGINT
    message = (f"stopped by {signal.Signals(signum).name}: what the run committed stays; the next run carries on "
               "from there")
    if not reported:
        fail(message, code=128 + signum)
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(128 + signum)


def register(app: typer.Typer) -> None:
    @app.command()
    def materialize(
        feeds: Path | None = typer.Option(None, "--feeds", help="Feeds YAML to ingest (default: the bundled sample)."),
        select: str | None = typer.Option(
            None, "--select", help="Comma-separated assets to materialize (default: all), e.g. raw_articles,articles."
        ),
        wait_timeout: float | None = WAIT_TIMEOUT,
        rederive: bool = typer.Option(False, "--rederive", help="Derive events from every article again, not "
                                      "only from the changed ones (as the rederive_events job)."),
        as_json: bool = JSON,
    ) -> None:
        """Materialize the pipeline's assets in-process (recorded in the Dagster instance under the data home).

        First it repairs what a crashed run left (and prints each repair), and waits for a live run that holds
        the warehouse, saying which."""
        if rederive and select and "prediction_events" not in {s.strip() for s in select.split(",")}:
            raise typer.BadParameter("derives events: add prediction_events to --select, or leave --select out",
                                     param_hint="--rederive")
        summary = run_materialize(feeds, select, as_json, wait_timeout, rederive=rederive)
        if not summary.ok:
            raise typer.Exit(1)

    @app.command()
    def status(as_json: bool = JSON) -> None:
        """Show the data home, row counts, the newest dated article, the last run per asset and per-feed health."""
        from pipeline.status import collect

        report = collect(_settings())
        if as_json:
            if report.get("runs_error"):  # the keys every --json error has, beside what could be shown
                emit_json({**report, "error": report["runs_error"], "exitCode": 1})
            else:
                emit_json(report)
        else:  # (not "error": the text report reads that key as the warehouse's, and would hide its tables)
            from pipeline.status import render

            typer.echo(render(report))
        if report.get("runs_error"):  # the report says why; scripts see the exit code
            raise typer.Exit(1)

    @app.command()
    def doctor(
        check: bool = typer.Option(False, "--check", help="Only report what needs repair (exit 1 if anything does)."),
        as_json: bool = JSON,
    ) -> None:
        """Check and repair what a crash can leave in the data home: runs whose process is gone (marked failed)
        and the pool slots they hold, unfinished snapshot files, snapshot parts no set references, a missing or
        dangling snapshots/CURRENT (a part damaged on disk makes its set incomplete), a warehouse log never
        checkpointed (replayed) or damaged (moved aside, kept), a killed model build's temp directory.
        `cryptowire materialize` does the same before every run. Then it reads the warehouse and the keys database
        whole: damage no crash causes (a disk's bad blocks, a file cut short) cannot be repaired, and is said, with
        what to do (exit 1). The read takes about a second per GB of warehouse; a run starting meanwhile waits
        for it (up to 30 s)."""
        from pipeline.jobs import InstanceError
        from pipeline.jobs import doctor as run_doctor
        from warehouse.db import WarehouseTooNew
        from warehouse.parts import NewerFormat

        settings = _settings()
        try:
            repairs, skipped = run_doctor(settings, fix=not check)
        except (InstanceError, NewerFormat, WarehouseTooNew) as exc:  # a newer cryptowire's files: not damage
            fail(disk_full(settings, exc) or str(exc))
        except Exception as exc:  # as in run_materialize
            full = disk_full(settings, exc)
            if full is None:
                raise
            fail(full)
        damaged = [] if skipped else _damage(settings)
        if as_json:
            emit_json({"repairs": repairs, "fixed": not check, "skipped": skipped, "damaged": damaged})
        else:
            for line in repairs:
                typer.echo(("needs repair: " if check else "repaired: ") + line)
            if skipped:
                typer.echo(skipped)
            for line in damaged:
                typer.echo(f"cannot repair: {line}")
            if not repairs and not damaged:
                typer.echo("nothing to repair")
        if (check and repairs) or damaged:
            raise typer.Exit(1)

    @app.command()
    def up(
        feeds: Path | None = typer.Option(None, "--feeds", help="Feeds YAML to ingest (default: the bundled sample)."),
        serve: bool = typer.Option(True, "--serve/--no-serve", help="Serve the API after materializing."),
        wait_timeout: float | None = WAIT_TIMEOUT,
        as_json: bool = JSON,
    ) -> None:
        """Materialize every asset (on the bundled sample by default), print what landed, then serve the API."""
        if serve:
            from pipeline.commands.serve import preflight
            from pipeline.up import port_in_use

            # what `serve` checks, before the run: a bad setting must not fail `up` after it revoked the last key
            preflight(_settings())
            problem = port_in_use(_settings())
            if problem:
                fail(problem)
        # Under --json stdout gets one document: the run's summary, and what is served when serving.
        summary = run_materialize(feeds, None, as_json, wait_timeout, emit=not (as_json and serve))
        if not summary.ok:
            if as_json:  # the summary above carries the error; a second document would break the JSON
                typer.secho("error: the pipeline failed (see the summary); nothing to serve", err=True,
                            fg=typer.colors.RED)
                raise typer.Exit(1)
            fail("the pipeline failed (see above); nothing to serve")
        from pipeline.status import collect, render

        report = collect(_settings())
        if feeds is not None:  # _settings put it in the environment: it is not what later runs read
            report["feeds_file_note"] = "this run's --feeds; runs without --feeds read the configured file"
        if not as_json:
            typer.echo(render(report))
        if serve:
            from pipeline.up import port_in_use, serve_after_up

            problem = port_in_use(_settings())  # again: the port may have been taken while materializing
            if problem:
                fail(problem)
            serve_after_up(_settings(), summary_document(summary) if as_json else None)

    @app.command()
    def dev(
        host: str = typer.Option("127.0.0.1", help="Address the Dagster UI binds."),
        port: int = typer.Option(3000, help="Port the Dagster UI binds (refused when taken)."),
    ) -> None:
        """Open the Dagster UI (`dagster dev`: the UI and a daemon) on this code location, with DAGSTER_HOME under
        the data home."""
        # Asked first: `dagster dev` on a taken port keeps its daemon running beside the first one's, two daemons
        # on one instance, and does not exit.
        _port_free(host, port, "another `cryptowire dev` or `webserver`")
        # `dev_command` is what we mean on one machine; Dagster's notice that it is superseded is noise here.
        run_dagster(["dagster", "dev", "-h", host, "-p", str(port)], quiet="ignore:Function `dev_command` is superseded")

    @app.command()
    def webserver(
        host: str = typer.Option("127.0.0.1", help="Address the Dagster UI binds."),
        port: int = typer.Option(3000, help="Port the Dagster UI binds."),
    ) -> None:
        """The Dagster UI alone (`dagster-webserver`), for a deployment whose daemon runs elsewhere: with
        CRYPTOWIRE_DATABASE_URL set, every machine's webserver and daemon share one instance (deploy/)."""
        _port_free(host, port, "another `cryptowire webserver` or `dev`")
        run_dagster(["dagster-webserver", "-h", host, "-p", str(port)])

    @app.command()
    def daemon() -> None:
        """The Dagster daemon alone (`dagster-daemon run`): schedules, sensors, run queue and run monitoring."""
        run_dagster(["dagster-daemon", "run"])


def _port_free(host: str, port: int, who: str) -> None:
    from pipeline.up import cannot_listen

    why = cannot_listen(host, port)
    if why is not None:
        fail(f"cannot listen on {host}:{port} ({why}): is {who} running there? Use its UI, stop it, or pass "
             "--port with a free port")


def run_dagster(argv: list[str], quiet: str | None = None) -> NoReturn:
    """Become a Dagster program on this code location with DAGSTER_HOME under the data home (its dagster.yaml
    written from the settings, Postgres storage included) and these settings in its environment. Exec, not a
    child: a supervisor's SIGTERM reaches Dagster itself, and nothing is left running when it stops."""
    import sys

    from pipeline.jobs import InstanceError, prepare_dagster_home, probe_instance

    settings = _settings()
    try:
        home = prepare_dagster_home(settings)
        probe_instance(home)  # an unreachable Postgres: one line now, not Dagster's retries and tracebacks
    except InstanceError as exc:
        fail(str(exc))
    typer.echo(f"DAGSTER_HOME={home}")
    program = Path(sys.executable).parent / argv[0]
    # Run from the Dagster home: started in the project folder, Dagster warns that the dagster.yaml it finds
    # there "will not be used" (its copy in DAGSTER_HOME is). The settings travel as absolute values.
    warnings = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), quiet]))
    env = {**os.environ, **settings.as_env(), "DAGSTER_HOME": str(home)}
    if warnings:
        env["PYTHONWARNINGS"] = warnings
    os.chdir(home)
    os.execve(str(program), [str(program), *argv[1:], "-m", "pipeline.definitions"], env)
