"""Running materializations from the CLI: in-process, recorded in the Dagster instance under the data home."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from warehouse.config import PROJECT_ROOT, Settings
from warehouse.integrity import DAMAGE_HINT, is_damage

DAGSTER_YAML = PROJECT_ROOT / "dagster.yaml"


def dagster_postgres_url(url: str) -> str:
    """The URL for dagster-postgres, whose SQL (``NOTIFY channel, :param``) needs the psycopg2 driver; SQLAlchemy 2.1
    gives ``postgresql://`` to psycopg 3, which binds parameters server-side and fails there."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg2://" + url[len(scheme):]
    return url


def dagster_yaml(settings: Settings) -> str:
    """The instance's dagster.yaml: the project's, plus Postgres storage when ``CRYPTOWIRE_DATABASE_URL`` is set."""
    text = DAGSTER_YAML.read_text()
    if settings.database_url:
        text += (
            "\n# Added by cryptowire because CRYPTOWIRE_DATABASE_URL is set: runs, event logs, schedules and sensors"
            "\n# live in Postgres, shared by the daemon, the webservers and the cryptowire commands of every machine; runs"
            "\n# (the daemon's, `cryptowire materialize`) happen on the writer machine only: it keeps the one warehouse.\n"
            f"storage:\n  postgres:\n    postgres_url: {json.dumps(dagster_postgres_url(settings.database_url))}\n"
        )
    return text


class UnknownAssets(ValueError):
    """A selection naming assets the code location does not define."""


class InstanceError(Exception):
    """The data home's Dagster instance cannot be opened as the settings say: one line saying why and what to do."""


def postgres_where(url: str) -> str:
    """host:port/db of a dagster-postgres URL, never its user or password."""
    from accounts.postgres import describe

    return describe(url.replace("postgresql+psycopg2://", "postgresql://", 1))


def written_postgres_url(target: Path) -> str | None:
    """The Postgres URL the data home's dagster.yaml stores the instance in, if it does."""
    import yaml

    if not target.exists():
        return None
    config = yaml.safe_load(target.read_text()) or {}
    return ((config.get("storage") or {}).get("postgres") or {}).get("postgres_url")


def prepare_dagster_home(settings: Settings, write: bool = True) -> Path:
    """Create the Dagster home under the data home with the instance's dagster.yaml (``dagster_yaml``); point
    DAGSTER_HOME at it. Unset ``CRYPTOWIRE_DATABASE_URL``: Dagster's own SQLite storage in that directory.
    ``write=False`` (read-only commands) leaves an existing dagster.yaml as it is.

    Raises ``InstanceError`` when the written dagster.yaml keeps the instance in Postgres and the setting names
    no database or another one: that would silently switch the data home to another instance."""
    home = settings.dagster_home.resolve()
    target = settings.dagster_yaml.resolve()
    written = written_postgres_url(target)
    wanted = dagster_postgres_url(settings.database_url) if settings.database_url else None
    # The same host, port and database with other credentials or options (a rotated password, sslmode) is the
    # same instance: the file is rewritten below. Only no URL or another database would switch instances.
    if written and (not wanted or postgres_where(wanted) != postgres_where(written)):
        now = f"names {postgres_where(wanted)}" if wanted else "is unset"
        raise InstanceError(
            f"this data home's Dagster instance is in Postgres at {postgres_where(written)} and CRYPTOWIRE_DATABASE_URL "
            f"{now}: set CRYPTOWIRE_DATABASE_URL to that database (to move the instance deliberately, delete "
            f"{target} and run the command again)"
        )
    home.mkdir(parents=True, exist_ok=True)
    text = dagster_yaml(settings)
    if (write or not target.exists()) and (not target.exists() or target.read_text() != text):
        tmp = target.with_name("dagster.yaml.partial")
        # the URL may carry a password: readable by the owner only
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if settings.database_url else 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600 if settings.database_url else 0o644)
        os.replace(tmp, target)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


PROBE_TIMEOUT = 5  # seconds: Dagster itself retries a dead server with backoff for ~13 s, then prints pages


def open_instance(settings: Settings, write: bool = True) -> Any:
    """The data home's Dagster instance (``prepare_dagster_home``), or ``InstanceError`` at once when its Postgres
    cannot be reached: one connection attempt first, instead of Dagster's retries and traceback."""
    home = prepare_dagster_home(settings, write)
    probe_instance(home)
    try:
        return dg.DagsterInstance.get()
    except Exception as exc:
        said = _storage_trouble(exc)
        if said is None:
            raise
        raise InstanceError(
            f"cannot open the Dagster instance under {home} ({said}): its disk may be full, read-only or failing; "
            "free space on it or make it writable, and run again"
        ) from exc


def _storage_trouble(exc: BaseException) -> str | None:
    """SQLite's or the OS's first words when the instance's files cannot be read or written, else None."""
    import sqlite3

    import sqlalchemy.exc

    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlite3.OperationalError):
        orig = getattr(exc, "orig", None) or exc
        return str(orig).strip().splitlines()[0]
    return None


def probe_instance(home: Path) -> None:
    """``InstanceError`` at once when the Postgres that ``home``'s dagster.yaml keeps the instance in cannot be
    reached (one connection attempt, ``PROBE_TIMEOUT``); nothing for an instance on SQLite. ``cryptowire daemon``
    and ``webserver`` call it before they become Dagster, which would retry for ~14 s and print tracebacks."""
    url = written_postgres_url(home / "dagster.yaml")
    if url:
        import psycopg2

        try:
            psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://", 1),
                             connect_timeout=PROBE_TIMEOUT).close()
        except psycopg2.Error as exc:
            # libpq's first line ends with the reason ("Connection refused"); it never holds the password
            reason = " ".join(str(exc).strip().splitlines()[0].rsplit(" failed: ", 1)[-1].split())
            raise InstanceError(
                f"cannot reach the Dagster instance's Postgres at {postgres_where(url)} (CRYPTOWIRE_DATABASE_URL): "
                f"{reason}; start that server, or set CRYPTOWIRE_DATABASE_URL to the one that holds it"
            ) from None


@dataclass
class AssetOutcome:
    asset: str
    ok: bool
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    skipped: bool = False  # not run: an asset it depends on failed
    stopped: bool = False  # SIGINT/SIGTERM stopped it while it ran


@dataclass
class RunSummary:
    run_id: str
    ok: bool
    assets: list[AssetOutcome]
    checks: list[dict[str, Any]]
    repairs: list[str] = field(default_factory=list)  # what recovery repaired before the run
    stopped: bool = False  # SIGINT/SIGTERM stopped it: what it committed stays


def _plain(value: Any) -> Any:
    raw = getattr(value, "value", value)
    if isinstance(raw, int | float | str | bool | type(None) | list | dict):
        return raw
    return str(raw)


def check_steps(checks: list[Any]) -> dict[str, Any]:
    """Step key -> check spec: how Dagster names the step that runs each asset check."""
    return {f"{spec.asset_key.to_python_identifier()}_{spec.name}": spec for c in checks for spec in c.check_specs}


# A step's root cause when SIGINT/SIGTERM stopped it: Dagster's, or DuckDB's when the signal came mid-query.
INTERRUPTED = ("DagsterExecutionInterruptedError", "RuntimeError: Query interrupted")


def root_cause(err: Any) -> str:
    """The exception our code raised, without Dagster's wrappers: ``AllFeedsFailed: all 1 feeds failed ...``."""
    if err is None:
        return "failed"
    while err.cause is not None:
        err = err.cause
    name, _, text = err.message.strip().partition(": ")
    said = f"{name.rsplit('.', 1)[-1]}: {text}" if text else name
    if is_damage(said):  # every run fails alike until someone acts: say who can tell what
        said += f" ({DAMAGE_HINT})"
    return said


def repair_files(settings: Settings, fix: bool = True) -> list[str]:
    """Unfinished snapshot files, a dangling ``CURRENT``, an unreplayed warehouse log, a model build's temp
    directory: what a crash can leave in the data home's files. Call it with no run writing (the materialization
    lock held, no live pool holder)."""
    from models.sentiment.runtime import remove_leftover_builds
    from warehouse.repair import repair_snapshots, replay_warehouse_wal

    return [*repair_snapshots(settings.snapshots_dir, fix), *replay_warehouse_wal(settings.warehouse_path, fix),
            *remove_leftover_builds(settings.models_dir, fix)]


def wait_for_pool(instance: Any, timeout: float | None, say: Callable[[str], None]) -> list[str]:
    """Wait, sleeping, until no live run holds or waits for the writer pool (runs the daemon launched); dead
    holders are recovered on the way. Returns the repairs made."""
    from pipeline.recovery import POOL, in_progress, pool_runs, recover
    from pipeline.runlock import POLL_SECONDS, wait_deadline

    repairs: list[str] = []
    started = time.monotonic()
    told = False
    while True:
        repairs += recover(instance)
        holders = [r for r in in_progress(instance) if r.run_id in pool_runs(instance)]
        if not holders:
            return repairs
        what = f"{holders[0].describe()}, which holds the {POOL} pool (one process writes the warehouse)"
        if not told:
            say(f"waiting for {what}")
            told = True
        wait_deadline(started, timeout, what)
        time.sleep(POLL_SECONDS * 2)


def _wait_for_readers(settings: Settings, wait_timeout: float | None) -> None:
    """Open the warehouse once before the run: a process reading it (a notebook, the duckdb CLI) blocks every
    writer, and without this each asset of the run would wait out the same reader in turn before failing."""
    from warehouse import db

    wait = db.WRITER_LOCK_WAIT if wait_timeout is None else wait_timeout
    db.connect(settings.warehouse_path, lock_wait=wait).close()  # raises WarehouseLocked, naming the holder


def materialize(
    settings: Settings,
    select: list[str] | None = None,
    wait_timeout: float | None = None,
    say: Callable[[str], None] = print,
    rederive: bool = False,
) -> RunSummary:
    """Materialize the selected assets (all by default) with the in-process executor, so it starts fast.
    ``rederive``: the events step derives every article again (as the ``rederive_events`` job does).

    First, with the data home's materialization lock held: recover what a crashed run left, and wait (saying so
    once, at most ``wait_timeout`` seconds) for a live run that holds the writer pool."""
    from pipeline import dagster_fixes  # noqa: F401  (a waiting step sleeps instead of spinning)
    from pipeline.definitions import ALL_ASSETS, ALL_CHECKS, resources
    from pipeline.recovery import TAG_TOKEN, heartbeat, process_tags
    from pipeline.runlock import exclusive, redeliver_dropped_stops, running, stop_requested

    instance = open_instance(settings)
    settings.ensure_dirs()
    names = {a.key.to_user_string() for a in ALL_ASSETS}
    selection: Any = None
    if select:
        unknown = sorted(set(select) - names)
        if unknown:
            raise UnknownAssets(f"unknown asset(s) {', '.join(unknown)}: choose from {', '.join(sorted(names))}")
        selection = dg.AssetSelection.assets(*select)
    tags = process_tags()
    # What the run was asked, for whoever finds it in the UI (a CLI run is Dagster's `__ephemeral_asset_job__`).
    tags["cryptowire/command"] = "materialize"
    tags["cryptowire/select"] = ",".join(select) if select else "all"
    tags["cryptowire/feeds_file"] = str(settings.feeds_file)
    if rederive:
        from pipeline.automation import FULL_DERIVATION_TAG

        tags[FULL_DERIVATION_TAG] = "1"

    def find_run(token: str) -> str | None:
        found = instance.get_run_ids(dg.RunsFilter(tags={TAG_TOKEN: token}), limit=1)
        return found[0] if found else None

    with exclusive(settings.materialize_lock, wait_timeout, say, tags[TAG_TOKEN], find_run):
        repairs = wait_for_pool(instance, wait_timeout, say)  # also marks dead runs failed, frees their slots
        repairs += repair_files(settings)
        for line in repairs:
            say(f"repaired: {line}")
        _wait_for_readers(settings, wait_timeout)
        stop = threading.Event()
        beat = threading.Thread(target=heartbeat, args=(instance, tags[TAG_TOKEN], stop), daemon=True)
        beat.start()
        redeliver_dropped_stops()
        running.set()
        try:
            result = dg.materialize(
                [*ALL_ASSETS, *ALL_CHECKS],
                selection=selection,
                resources=resources(settings),
                instance=instance,
                raise_on_error=False,
                tags=tags,
                # Dagster's own console lines (per-event DEBUG, a stack trace per failed step) drown the summary,
                # which gives each failure in one line; the full traces stay in the run's event log (the Dagster
                # UI). Our own warnings (a feed that failed) are Python logging and still show.
                run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
            )
        finally:
            running.clear()
            stop.set()
        if not stop_requested.is_set():
            from pipeline.history import housekeep_if_due

            for line in housekeep_if_due(settings, instance):  # a home run by cron alone has no daemon to do it
                say(f"housekeeping: {line}")
    stopped = stop_requested.is_set()
    if stopped and not result.success:  # Dagster records an interrupted run as failed: it was canceled
        instance.report_run_canceled(result.dagster_run, message="stopped by SIGINT/SIGTERM")
    assets, checks = summarize(result, ALL_ASSETS, ALL_CHECKS, stopped)
    return RunSummary(
        run_id=result.run_id, ok=result.success, assets=assets, checks=checks, repairs=repairs, stopped=stopped
    )


def summarize(
    result: Any, all_assets: list[Any], all_checks: list[Any], stopped: bool = False
) -> tuple[list[AssetOutcome], list[dict[str, Any]]]:
    """One outcome per planned asset (materialized, failed with its root cause, or not run) and one entry per
    check (its evaluation, or a failure when it raised) from a finished ``dg.materialize`` result."""
    outcomes: dict[str, AssetOutcome] = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_MATERIALIZATION":
            mat = event.event_specific_data.materialization  # type: ignore[union-attr]
            key = mat.asset_key.to_user_string()
            outcomes[key] = AssetOutcome(key, True, {k: _plain(v) for k, v in mat.metadata.items()})
        elif event.event_type_value == "STEP_FAILURE":
            step = event.step_key or "?"
            err = event.event_specific_data.error  # type: ignore[union-attr]
            cause = root_cause(err)
            if stopped and any(mark in cause for mark in INTERRUPTED):  # a stop: not a fault, nor a failed check
                outcomes[step] = AssetOutcome(step, False, error="stopped before it finished", skipped=True,
                                              stopped=True)
            else:
                outcomes[step] = AssetOutcome(step, False, error=cause)
    # The in-process executor records nothing for the steps after a failure: planned assets without an outcome
    # were not run, and the summary says so rather than leaving them out.
    names = {key.to_user_string() for a in all_assets for key in a.keys}
    why = "not run: the run was stopped" if stopped else "not run: an asset it depends on failed"
    for step in result.dagster_run.step_keys_to_execute or []:
        if step in names and step not in outcomes:
            outcomes[step] = AssetOutcome(step, False, error=why, skipped=True)
    checks = []
    evaluations = result.get_asset_check_evaluations()
    evaluated = {(ev.asset_key.to_user_string(), ev.check_name) for ev in evaluations}
    # A check that raised has no evaluation: it is a failed check (not a passed one, nor an asset). A blocking check
    # that failed has both (its step then fails the run): it is listed once, by its evaluation.
    specs = check_steps(all_checks)
    stopping = set()  # blocking checks that failed: their step failed, and what follows them did not run
    for step in [k for k, o in outcomes.items() if k in specs and not o.ok]:
        spec, outcome = specs[step], outcomes.pop(step)
        name = (spec.asset_key.to_user_string(), spec.name)
        if name in evaluated:
            stopping.add(name)
        elif not outcome.skipped:
            checks.append({"asset": name[0], "check": name[1], "passed": False, "severity": "ERROR",
                           "metadata": {"error": outcome.error}})
    for ev in evaluations:
        name = (ev.asset_key.to_user_string(), ev.check_name)
        checks.append(
            {
                "asset": name[0],
                "check": name[1],
                "passed": ev.passed,
                "severity": ev.severity.value,
                "metadata": {k: _plain(v) for k, v in ev.metadata.items()},
                **({"stopped_run": True} if name in stopping else {}),
            }
        )
    return list(outcomes.values()), checks


def doctor(settings: Settings, fix: bool = True) -> tuple[list[str], str | None]:
    """``cryptowire doctor``: the repairs made (or, with ``fix=False``, needed), and why file repairs were
    skipped, if they were (a live run is writing). Only checking creates nothing in the data home."""
    from pipeline.recovery import in_progress, pool_runs, recover
    from pipeline.runlock import WaitTimeout, exclusive

    if not settings.home.is_dir() and not settings.database_url:
        return [], f"no data home at {settings.home.resolve()} yet: nothing to check"
    if not fix and not settings.database_url and not settings.dagster_yaml.exists():
        return repair_files(settings, fix), None  # no run was ever recorded here: none to recover
    instance = open_instance(settings, write=fix)  # --check never rewrites dagster.yaml
    try:
        with exclusive(settings.materialize_lock, 0, lambda _line: None):
            repairs = recover(instance, fix)
            writers = [r for r in in_progress(instance) if r.alive and r.run_id in pool_runs(instance)]
            if writers:
                return repairs, f"{writers[0].describe()} is writing the warehouse: file checks skipped"
            return repairs + repair_files(settings, fix), None
    except WaitTimeout:
        return recover(instance, fix), "a materialization is running: only its dead peers were checked"
