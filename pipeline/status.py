"""What `cryptowire status` reports: paths, counts, freshness, the last run per asset, per-feed health."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline.timestamps import iso_utc
from warehouse.config import Settings

TABLES = (
    "raw_articles",
    "articles",
    "article_tickers",
    "crypto_assets",
    "prediction_events",
    "prediction_event_sources",
    "asset_sentiment",
    "stories",
    "story_articles",
    "feed_fetches",
)

NO_HOME = "no data home yet: `cryptowire materialize` (or `cryptowire up`) creates it and fills it"
# A data home with published snapshots and no warehouse: an API machine's copy of the writer's snapshots/
# (deploy/README.md). Materializing here would build a second warehouse and snapshot, and record its runs in the
# shared Dagster instance as if they were the writer's.
SERVES_COPIES = ("this data home serves snapshots copied from the writer machine; `cryptowire materialize` runs "
                 "on the writer machine only (it publishes them: copy its snapshots/ here, parts first, CURRENT "
                 "last): running it here would build a second warehouse (deploy/README.md)")
QUEUED = ("QUEUED", "NOT_STARTED")
# A run created and never launched nor queued: a launch that failed (the webserver lost its database, a crash
# between creating the run and submitting it) leaves it so. No process runs it.
NOT_STARTED = "NOT_STARTED"
WARNING_SHOWN = 100  # characters of a feed's warning in the text output (the JSON has all of it)

# Per feed URL its last fetch; in_last_run is false for a feed the newest ingestion run did not fetch (disabled,
# removed from the feeds file, or its URL changed): its line is history, not the feed's state now.
FEED_HEALTH_SQL = """
WITH last AS (
    SELECT *, run_id = (SELECT arg_max(run_id, started_at) FROM feed_fetches) AS in_last_run
    FROM feed_fetches
    QUALIFY row_number() OVER (PARTITION BY feed_url ORDER BY started_at DESC) = 1
)
SELECT feed_name, feed_url, started_at, http_status, items_seen, items_new, items_updated, not_modified, error,
       warning, in_last_run
FROM last ORDER BY NOT in_last_run, feed_name
"""


def _shown(iso: str | None) -> str:
    return iso.replace("T", " ").replace("Z", " UTC") if iso else "never"


def _one_line(text: str, limit: int) -> tuple[str, bool]:
    """A warning on one line of at most ``limit`` characters, and whether it was shortened. Parser messages can
    hold newlines and be long: their details in parentheses go first, so that every part of the warning shows."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text, False
    while (inner := re.sub(r"\([^()]*\)", "\0", text)) != text:  # innermost first: parentheses nest
        text = inner
    text = text.replace("\0", "(…)")
    return (text if len(text) <= limit else text[: limit - 1].rstrip() + "…"), True


# Rows of raw_articles that `articles` does not hold as they are (new, or changed since): the enrichment's
# sync (pipeline.enrich.SYNC_SQL) brings exactly these. A join, not a clock: right whoever wrote the rows.
NOT_ENRICHED_SQL = """
SELECT count(*) FROM raw_articles r LEFT JOIN articles a ON a.id = r.id
WHERE a.id IS NULL OR a.content_hash <> r.content_hash OR a.published_at <> r.published_at
   OR a.date_inferred IS DISTINCT FROM r.date_inferred
"""


@dataclass
class Published:
    """The served snapshot's identity, and per served table the newest change stamp it holds (watermarks)."""

    tag: str | None
    created_at: datetime | None
    marks: dict[str, str | None]
    contents: dict[str, int] | None = None  # a set's articles, events and parts (its manifest says)


def _published(current: Path) -> Published:
    """A set's manifest records its watermarks (``warehouse.parts.changes``): the same stamps compared, no
    clock. A single-file snapshot (the older layout) records only its creation time: it stands in for them."""
    from warehouse.parts import is_set, read_manifest
    from warehouse.parts.changes import SOURCES

    if is_set(current):
        manifest = read_manifest(current)
        created = datetime.fromisoformat(manifest["created_at"]) if manifest.get("created_at") else None
        marks = manifest.get("watermarks") or {}
        fallback = created.isoformat(sep=" ") if created else None
        contents = {k: manifest[k] for k in ("articles", "events") if isinstance(manifest.get(k), int)}
        contents["parts"] = len(manifest.get("parts") or [])
        return Published(manifest.get("tag"), created, {t: marks.get(t, fallback) for t in SOURCES}, contents)
    import duckdb

    con = duckdb.connect(str(current), read_only=True)
    try:
        tag, created = con.execute("SELECT tag, created_at FROM snapshot_info").fetchall()[0]
    finally:
        con.close()
    return Published(tag, created, {t: created.isoformat(sep=" ") if created else None for t in SOURCES})


def _columns(con: Any, table: str) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]).fetchall()}


def _behind(con: Any, names: set[str], published: Published) -> dict[str, int]:
    """Per warehouse table, the rows the served snapshot does not show yet (only tables with some): written
    after its watermarks, and, for raw_articles, ingested but not in `articles` yet. On a warehouse whose
    migrations are pending (made by an older cryptowire) only the columns it has are compared."""
    from warehouse.parts.changes import SOURCES

    behind: dict[str, int] = {}
    if {"raw_articles", "articles"} <= names:
        sql = NOT_ENRICHED_SQL
        if "date_inferred" not in _columns(con, "articles"):  # before migration 0004
            sql = sql.replace("\n   OR a.date_inferred IS DISTINCT FROM r.date_inferred", "")
        behind["raw_articles"] = con.execute(sql).fetchall()[0][0]
    for table, (src, _, stamps) in SOURCES.items():
        mark = published.marks.get(table)
        if src not in names or mark is None:
            continue
        have = _columns(con, src)
        stamps = tuple(s for s in stamps if s in have)  # prediction_events.withdrawn_at: migration 0005
        if not stamps:
            continue
        where = " OR ".join(f"{stamp} > ?::TIMESTAMP" for stamp in stamps)
        sql = f"SELECT count(*) FROM {src} WHERE {where}"
        behind[src] = con.execute(sql, [mark] * len(stamps)).fetchall()[0][0]
    return {t: n for t, n in behind.items() if n}


def _shipped_versions() -> dict[str, str]:
    """The sentiment model's and the tagger's versions as this cryptowire ships them: what `articles` compares
    its rows' model_version and tagger_version with (``pipeline.enrich``). Read from the files, no model built."""
    found: dict[str, str] = {}
    try:
        from models.sentiment.model import int8_model_version

        found["model_version"] = int8_model_version()
    except Exception as exc:  # a model file missing or damaged: materialize says so; status shows the rest
        found["model_version_error"] = str(exc)
    try:
        from models.tagging import get_tagger

        found["tagger_version"] = get_tagger().version
    except Exception as exc:
        found["tagger_version_error"] = str(exc)
    return found


def _upgrade(con: Any, names: set[str]) -> dict[str, Any]:
    """What an upgrade of cryptowire left to do in this warehouse (read only: status never migrates): the
    migrations it lacks, and the articles scored or tagged by another model or tagger version than the shipped
    ones; each with what brings it up to date (``steps``). Versions recorded by a newer cryptowire: upgrade it."""
    from warehouse import db

    pending, newer = db.schema_state(con)
    found: dict[str, Any] = {"pending_migrations": pending, "latest_migration": db.latest_version()}
    steps = []
    if newer:
        found["newer_migrations"] = newer
        steps.append(f"the warehouse has schema version {max(newer)}, newer than this cryptowire knows "
                     f"({found['latest_migration']}): upgrade cryptowire (this one refuses to write it; reading "
                     "still works)")
    elif pending:
        what = pending[0] if len(pending) == 1 else f"{pending[0]} to {pending[-1]}"
        steps.append(f"{len(pending)} schema migration{'s' if len(pending) != 1 else ''} pending ({what}): the "
                     "next `cryptowire materialize` applies them (status only reads)")
    columns = _columns(con, "articles") if "articles" in names else set()
    shipped = _shipped_versions()
    found |= shipped
    total = con.execute("SELECT count(*) FROM articles").fetchall()[0][0] if columns else 0
    # What pipeline.enrich processes: every article whose version is not the shipped one (another, or none yet).
    for kind, column, verb, what in (("model", "model_version", "re-scores", "scored by the shipped sentiment model"),
                                     ("tagger", "tagger_version", "re-tags", "tagged by the shipped tagger")):
        version = shipped.get(column)
        if version is None or column not in columns:
            continue
        n = con.execute(f"SELECT count(*) FROM articles WHERE {column} IS DISTINCT FROM ?", [version]).fetchall()[0][0]
        found[f"articles_other_{kind}"] = n
        if n and not newer:
            steps.append(f"{n} of {total} articles not {what} ({version}) yet: the next `cryptowire materialize` "
                         f"{verb} them")
    found["steps"] = steps
    return found


def _warehouse(settings: Settings, published: Published | None = None, serving: bool = False) -> dict[str, Any]:
    """``serving``: the data home has a published snapshot (``CURRENT`` names one)."""
    import duckdb

    from warehouse import db
    from warehouse.integrity import DAMAGE_HINT, is_damage

    path = settings.warehouse_path
    if not settings.home.is_dir():
        return {"exists": False, "hint": NO_HOME}
    if not path.exists():
        if serving:  # an API machine's home: snapshots copied from the writer, never a warehouse of its own
            return {"exists": False, "serves_copies": True, "hint": SERVES_COPIES}
        return {"exists": False, "hint": "run `cryptowire materialize` to create it"}
    try:
        con = db.connect(path, read_only=True)
    except duckdb.IOException as exc:  # WarehouseLocked names the holder and what to do
        return {"exists": True, "error": f"{exc}: {DAMAGE_HINT}" if is_damage(str(exc)) else str(exc)}
    try:
        names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES if t in names}
        # Undated items carry their fetch time (date_inferred): the newest *dated* article says how fresh feeds are.
        newest = (
            con.execute("SELECT max(published_at) FILTER (WHERE NOT date_inferred) FROM raw_articles").fetchall()[0][0]
            if "raw_articles" in names
            else None
        )
        feeds = [
            dict(zip(("feed", "url", "at", "status", "seen", "new", "updated", "not_modified", "error", "warning",
                      "in_last_run"), r, strict=True))
            for r in con.execute(FEED_HEALTH_SQL).fetchall()
        ] if "feed_fetches" in names else []
        behind = _behind(con, names, published) if published else None
        upgrade = _upgrade(con, names)
    finally:
        con.close()
    for f in feeds:
        f["at"] = iso_utc(f["at"])
        if not f["in_last_run"]:  # history, not the feed's state now: an alert on "error" must not fire for it
            f["last_error"], f["error"] = f["error"], None
    found = {"exists": True, "counts": counts, "newest_article": iso_utc(newest), "feeds": feeds, "upgrade": upgrade}
    return found if behind is None else {**found, "behind": behind}


def _run_events(instance: Any, run_id: str) -> tuple[set[str], dict[str, str]]:
    """In one run: the assets it materialized, and the steps that failed with their error's root cause (the
    exception our code raised, as the run's summary gives it)."""
    from dagster import DagsterEventType

    from pipeline.jobs import root_cause

    materialized: set[str] = set()
    failed: dict[str, str] = {}
    kinds = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE}
    for entry in instance.all_logs(run_id, of_type=kinds):
        event = entry.dagster_event
        if event.event_type == DagsterEventType.STEP_FAILURE:
            error = getattr(event.event_specific_data, "error", None)
            failed[event.step_key or ""] = root_cause(error)
        elif event.asset_key is not None:
            materialized.add(event.asset_key.to_user_string())
    return materialized, failed


def _asset_outcome(run: Any, events: tuple[set[str], dict[str, str]], asset: str, step: str, dead: bool) -> str:
    """The asset's own outcome in its last run, whatever the whole run's status (a failed run can have
    materialized some assets and never attempted others; a run whose process died never finishes them)."""
    materialized, failed = events
    if step in failed:
        return "failed"
    if asset in materialized:
        return "materialized"
    if run.status.value == "CANCELED":  # stopped (the UI's Terminate, SIGTERM) before this asset was done
        return "canceled"
    if run.is_finished:
        return "skipped"
    if run.status.value == NOT_STARTED:  # never launched nor queued: nothing will run it (see _not_started)
        return "not started"
    if dead:
        return "interrupted"
    # not launched yet: a run the Dagster UI queued waits for the daemon, which may not be running
    return "queued" if run.status.value in QUEUED else "running"


def _queued(instance: Any) -> dict[str, Any]:
    """Runs waiting in the run queue, and whether a daemon is there to launch them (its queue heartbeat is fresh)."""
    from dagster import DagsterRunStatus, RunsFilter

    from pipeline.recovery import HEARTBEAT_TIMEOUT

    records = instance.get_run_records(filters=RunsFilter(statuses=[DagsterRunStatus.QUEUED]))
    beat = instance.get_daemon_heartbeats().get("QUEUED_RUN_COORDINATOR")
    return {
        "runs_queued": [{"run_id": r.dagster_run.run_id, "job": r.dagster_run.job_name,
                         "since": iso_utc(r.create_timestamp.timestamp())} for r in records],
        "daemon_running": beat is not None and time.time() - beat.timestamp < HEARTBEAT_TIMEOUT,
    }


def _runs(settings: Settings) -> dict[str, Any]:
    """Per asset, the last materialization, and the last run that planned it: the asset's own outcome there and
    the whole run's status. Per check, its last evaluation. Runs not finished, runs queued. From the Dagster
    instance under the data home."""
    nothing: dict[str, Any] = {"assets": [], "checks": [], "runs_in_progress": [], "runs_queued": [],
                               "daemon_running": False}
    if not settings.dagster_yaml.exists():
        return nothing
    from dagster._core.storage.asset_check_execution_record import (
        AssetCheckExecutionRecordStatus as CheckStatus,
    )

    from pipeline.definitions import ALL_ASSETS, ALL_CHECKS
    from pipeline.jobs import InstanceError, open_instance
    from pipeline.recovery import in_progress

    try:
        instance = open_instance(settings, write=False)  # status reads: it never rewrites dagster.yaml
    except InstanceError as exc:  # the warehouse part is still worth showing
        return {**nothing, "runs_error": str(exc)}
    unfinished = {r.run_id: r for r in in_progress(instance)}
    assets = []
    by_run: dict[str, tuple[set[str], dict[str, str]]] = {}  # one event-log read per run, shared by its assets
    for asset in ALL_ASSETS:
        name = asset.key.to_user_string()
        mat = instance.get_latest_materialization_event(asset.key)
        planned = instance.get_latest_planned_materialization_info(asset.key)
        run = instance.get_run_by_id(planned.run_id) if planned else None
        last_run = None
        if run is not None:
            if run.run_id not in by_run:
                by_run[run.run_id] = _run_events(instance, run.run_id)
            proc = unfinished.get(run.run_id)
            dead = proc is not None and not proc.alive
            outcome = _asset_outcome(run, by_run[run.run_id], name, asset.node_def.name, dead)
            last_run = {"run_id": run.run_id, "outcome": outcome, "status": run.status.value, "process_gone": dead}
            if outcome == "failed":
                last_run["error"] = by_run[run.run_id][1].get(asset.node_def.name, "")
        assets.append(
            {"asset": name, "last_materialized": iso_utc(mat.timestamp if mat else None), "last_run": last_run}
        )
    materialized_at = {a["asset"]: a["last_materialized"] for a in assets}
    checks = []
    evaluated = {CheckStatus.SUCCEEDED, CheckStatus.FAILED}  # not PLANNED: a failed run never evaluated those
    for definition in ALL_CHECKS:
        for check_key in definition.check_keys:
            records = instance.event_log_storage.get_asset_check_execution_history(
                check_key, limit=1, status=evaluated
            )
            if not records:
                continue
            event = records[0].event
            data = event.dagster_event.event_specific_data if event and event.dagster_event else None
            # FAILED: the check itself raised, so it did not pass
            passed = getattr(data, "passed", None) if records[0].status == CheckStatus.SUCCEEDED else False
            asset = check_key.asset_key.to_user_string()
            at = iso_utc(event.timestamp if event else None)  # the evaluation's time, not the run's planning
            # a check skipped by the asset's later runs still shows its old result: say it is older than the data
            stale = bool(at and materialized_at.get(asset) and at < materialized_at[asset])
            found = {"asset": asset, "check": check_key.name, "passed": passed, "evaluated_at": at, "stale": stale,
                     "blocking": any(s.key == check_key and s.blocking for s in definition.check_specs)}
            meta = getattr(data, "metadata", None) or {}
            if passed is False and "violations" in meta:  # what the check found: how many rows, and a few of them
                found["violations"] = getattr(meta["violations"], "value", meta["violations"])
                found["sample"] = getattr(meta.get("sample"), "value", None)
            checks.append(found)
    runs = [
        {"run_id": r.run_id, "status": r.status, "pid": r.pid, "host": r.host, "since": r.since, "alive": r.alive,
         "why": _not_started(instance, r.since) if r.status == NOT_STARTED else r.reason}
        for r in unfinished.values()
    ]
    return {"assets": assets, "checks": checks, "runs_in_progress": runs, **_queued(instance),
            "automation_stopped": _stopped_automation(instance), **_instance_note(settings)}


# What stops when each schedule or sensor is turned off in the UI (each runs by default).
AUTOMATION = {
    "poll_feeds": "the feeds are not polled",
    "follow_upstream": "nothing after a poll runs by itself (articles, events, stories, the snapshot)",
    "recover_dead_runs": "dead runs hold the writer pool until the next `cryptowire materialize` or `doctor`",
    "daily_maintenance": "old snapshots, the feed fetch log and run history are not pruned",
}


def _stopped_automation(instance: Any) -> list[str]:
    """The project's schedules and sensors someone turned off (the UI stores that; each runs by default)."""
    from dagster._core.scheduler.instigation import InstigatorStatus

    states = instance.all_instigator_state(instigator_statuses={InstigatorStatus.STOPPED})
    return sorted({s.instigator_name for s in states} & set(AUTOMATION))


def _not_started(instance: Any, since: str | None) -> str:
    """What a NOT_STARTED run is and what ends it. Nothing runs it and Dagster cannot terminate it as it can a
    queued or started run; the daemon fails it (Dagster's run monitoring counts its start timeout from the run's
    creation; cryptowire's recover_dead_runs sensor after HEARTBEAT_TIMEOUT without an event)."""
    from pipeline.recovery import HEARTBEAT_TIMEOUT

    ends = []
    if instance.run_monitoring_enabled and instance.run_monitoring_start_timeout_seconds > 0:
        ends.append(f"the Dagster daemon's run monitoring marks it failed "
                    f"{instance.run_monitoring_start_timeout_seconds:.0f} s after it was created")
    ends.append(f"`cryptowire doctor` (and the daemon's recover_dead_runs sensor) marks it failed once it has "
                f"been silent {HEARTBEAT_TIMEOUT:.0f} s")
    ends.append("or delete it in the Dagster UI (Runs; plain Terminate refuses a run that never started, "
                "\"Force termination immediately\" marks it canceled)")
    return (f"created {_shown(since)} and never launched nor queued: its launch failed (the webserver or daemon "
            f"lost its database, or crashed while submitting it); no process runs it and it will not start: "
            f"{'; '.join(ends)}")


def _instance_note(settings: Settings) -> dict[str, Any]:
    """When CRYPTOWIRE_DATABASE_URL names Postgres but the data home's dagster.yaml still keeps the instance in
    SQLite: status reads SQLite (it never rewrites dagster.yaml); the next writing command moves the instance."""
    from pipeline.jobs import dagster_postgres_url, postgres_where, written_postgres_url

    if not settings.database_url or written_postgres_url(settings.dagster_yaml):
        return {}
    return {"instance_note": (
        f"CRYPTOWIRE_DATABASE_URL names Postgres at {postgres_where(dagster_postgres_url(settings.database_url))}, but this "
        "data home's Dagster instance is still in SQLite: the runs shown are SQLite's; the next `cryptowire "
        "materialize`, `daemon` or `webserver` moves the instance to Postgres (the SQLite run history stays behind)")}


def _serving(settings: Settings) -> tuple[dict[str, Any], Published | None]:
    """What the API would serve: the snapshot ``CURRENT`` names, whether it opens complete, tag and time."""
    from warehouse.parts import NewerFormat
    from warehouse.published import current_snapshot
    from warehouse.repair import valid_snapshot

    try:
        current = current_snapshot(settings.snapshots_dir)
    except ValueError as exc:
        problem = f"{exc}: run `cryptowire doctor` to repoint it"
        return {"current": None, "complete": False, "problem": problem}, None
    if current is None:
        from warehouse.publish import list_snapshots

        left = len(list_snapshots(settings.snapshots_dir)) if settings.snapshots_dir.is_dir() else 0
        problem = ("nothing published yet" if not left else  # doctor removes a CURRENT no complete snapshot can take
                   f"no complete snapshot to serve ({left} on disk, none complete: damaged or unfinished)")
        return {"current": None, "complete": False,
                "problem": f"{problem}: run `cryptowire materialize` to publish a snapshot"}, None
    try:
        complete = current.is_file() and valid_snapshot(current)
    except NewerFormat as exc:  # not damage (doctor must not repoint it): this cryptowire is too old to read it
        return {"current": current.name, "complete": False, "newer": True, "problem": str(exc)}, None
    if complete:
        import duckdb

        try:
            published = _published(current)
        except (OSError, ValueError, KeyError, IndexError, duckdb.Error):  # replaced meanwhile: it still serves
            return {"current": current.name, "complete": True, "problem": None}, None
        found = {"current": current.name, "complete": True, "problem": None, "tag": published.tag,
                 "published_at": iso_utc(published.created_at)}
        if published.contents is not None:  # a set: what it serves, and its newest change per table
            found |= {"contents": published.contents, "watermarks": published.marks}
        return found, published
    problem = "it is missing or damaged: run `cryptowire doctor` to point CURRENT at the newest complete one"
    return {"current": current.name, "complete": False, "problem": problem}, None


def _lag(behind: dict[str, int] | None) -> str | None:
    """What the served snapshot lacks, and what to do; None when it is up to date (or that is unknown)."""
    if not behind:
        return None
    said = []
    if behind.get("raw_articles"):
        said.append(f"{behind['raw_articles']} articles ingested and not enriched yet")
    changed = ", ".join(f"{t} {n}" for t, n in behind.items() if t != "raw_articles")
    if changed:
        said.append(f"rows written after its publication ({changed})")
    # The whole job, not the snapshot alone: stories (and what each news row says of its story) follow the articles.
    todo = "run `cryptowire materialize` to " + ("enrich and publish them" if behind.get("raw_articles") else
                                                  "publish them")
    return (f"the warehouse holds what this snapshot does not serve: {'; '.join(said)}; API clients read older "
            f"news than the warehouse shows: {todo}")


def collect(settings: Settings) -> dict[str, Any]:
    serving, published = _serving(settings)
    found = _warehouse(settings, published, serving=serving["current"] is not None)
    if published is not None:  # behind is None when a run holds the warehouse: unknown, not up to date
        serving["behind"] = found.pop("behind", None)
        serving["lag"] = _lag(serving["behind"])
    return {
        "home": str(settings.home.resolve()),
        "home_exists": settings.home.is_dir(),
        "warehouse": str(settings.warehouse_path.resolve()),
        "snapshots": str(settings.snapshots_dir.resolve()),
        "feeds_file": str(settings.feeds_file),
        **found,
        "serving": serving,
        **_runs(settings),
    }


def _queue_lines(report: dict[str, Any]) -> list[str]:
    queued = report.get("runs_queued") or []
    if not queued:
        return []
    lines = [f"runs queued: {', '.join(r['run_id'][:8] + ' ' + r['job'] for r in queued)}"]
    if report.get("daemon_running"):
        lines.append("  the Dagster daemon starts them as run slots free up")
    else:
        lines.append("  no Dagster daemon is running: they start when it runs (`cryptowire daemon`, or `make dev`)")
    return lines


def render(report: dict[str, Any]) -> str:
    lines = [
        f"data home:  {report['home']}",
        f"warehouse:  {report['warehouse']}",
        f"snapshots:  {report['snapshots']}",
        f"feeds file: {report['feeds_file']} ({report.get('feeds_file_note', 'what runs without --feeds read')})",
    ]
    if not report.get("home_exists", True):
        lines.append(NO_HOME)
        return "\n".join(lines)
    runs_error = [f"runs: UNAVAILABLE, {report['runs_error']}"] if report.get("runs_error") else []
    if report.get("serves_copies"):  # no warehouse by design: what this home serves is shown below
        lines.append(f"no warehouse here: {report.get('hint', '')}")
    elif not report.get("exists"):
        lines.append(f"no warehouse yet: {report.get('hint', '')}")
        # a run queued in the Dagster UI may be what creates it
        return "\n".join(lines + runs_error + _queue_lines(report))
    elif report.get("error"):  # held by a run: tables and feeds wait, what the instance knows is shown
        lines.append(report["error"])
    else:
        lines.append("tables:")
        lines += [f"  {t:<26} {n:>8}" for t, n in report["counts"].items()]
        newest = report["newest_article"]
        # undated items carry their fetch time: the newest *dated* one says how fresh the feeds are
        lines.append(f"newest dated article: {_shown(newest) if newest else 'none'}")
        upgrade = report.get("upgrade") or {}
        for column, what in (("model_version", "the sentiment model"), ("tagger_version", "the tagger")):
            if upgrade.get(f"{column}_error"):  # the next materialize fails on it: said here, not only in --json
                lines.append(f"CANNOT RUN: {what} cannot be loaded: {upgrade[f'{column}_error']}")
        steps = upgrade.get("steps") or []
        if steps:  # an upgrade of cryptowire left these to do
            lines.append("UPGRADE PENDING:")
            lines += [f"  {step}" for step in steps]
    serving = report.get("serving") or {"complete": False, "current": None, "problem": "unknown"}
    if serving["complete"]:
        when = f", published {_shown(serving['published_at'])}" if serving.get("published_at") else ""
        tag = f", tag {serving['tag']}" if serving.get("tag") else ""
        lines.append(f"serving snapshot: {serving['current']} (complete){when}{tag}")
        if report.get("serves_copies") and serving.get("contents"):  # no warehouse to count: the set's manifest
            held = serving["contents"]
            what = ", ".join(f"{held[k]} {k}" for k in ("articles", "events", "parts") if k in held)
            marks = ", ".join(f"{t} {m[:19]}" for t, m in (serving.get("watermarks") or {}).items()
                              if m and not m.startswith("0001-"))  # 0001-01-01: the table is empty
            lines.append(f"  serves {what}" + (f"; newest change per table: {marks}" if marks else ""))
        blocked = [c for c in report.get("checks") or [] if c.get("blocking") and c["passed"] is False
                   and not c["stale"]]
        if serving.get("lag") and blocked:  # a run would fail on the same rows: say what to fix instead
            names = ", ".join(f"{c['asset']}.{c['check']}" for c in blocked)
            lines.append(f"  BEHIND, and BLOCKED: the blocking check {names} failed, so no run publishes a snapshot "
                         "until the rows it names (below) are fixed; then run `cryptowire materialize`")
        elif serving.get("lag"):
            lines.append(f"  BEHIND: {serving['lag']}")
            if any(r["alive"] and r["status"] != NOT_STARTED for r in report.get("runs_in_progress") or []):
                lines.append("  (a run is in progress, listed below: it publishes when it finishes, unless "
                             "it fails)")
    elif serving.get("newer"):  # a newer cryptowire's set: this one cannot read it, nothing is damaged
        lines.append(f"serving snapshot: {serving['current']}: UNREADABLE HERE, {serving['problem']}")
    else:
        lines.append(f"serving snapshot: {serving['current'] or 'none'}: NOT SERVABLE, {serving['problem']}")
    lines += runs_error
    if report.get("instance_note"):
        lines.append(f"note: {report['instance_note']}")
    if report.get("assets"):
        lines.append("assets:")
        w = max([20, *(len(a["asset"]) for a in report["assets"])])
        lines.append(f"  {'asset':<{w}} {'last materialized':<24} {'in its last run':<16} whole run")
        for a in report["assets"]:
            run = a["last_run"]
            outcome, whole = (run["outcome"], f"{run['run_id'][:8]} {run['status']}") if run else ("-", "-")
            whole += " (process gone)" if run and run["process_gone"] else ""
            lines.append(f"  {a['asset']:<{w}} {_shown(a['last_materialized']):<24} {outcome:<16} {whole}")
            if run and run.get("error"):
                why = " ".join(run["error"].split())
                lines.append(f"  {'':<{w}} why: {why if len(why) <= 300 else why[:299] + '…'}")
    if report.get("runs_in_progress"):
        lines.append("runs not finished:")
        for r in report["runs_in_progress"]:
            state = "not started" if r["status"] == NOT_STARTED else "running" if r["alive"] else "DEAD"
            lines.append(f"  {r['run_id'][:8]} {r['status']:<9} {state:<8} since {_shown(r['since'])}: {r['why']}")
        if any(not r["alive"] and r["status"] != NOT_STARTED for r in report["runs_in_progress"]):
            lines.append("  the next `cryptowire materialize` repairs dead runs by itself; `cryptowire doctor` does it now")
    lines += _queue_lines(report)
    for name in report.get("automation_stopped") or []:
        lines.append(f"automation: {name} is STOPPED (turned off in the Dagster UI or its CLI): {AUTOMATION[name]}; "
                     "turn it on in the UI's Automation page to resume")
    if report.get("checks"):
        passed = sum(c["passed"] is True for c in report["checks"])
        failed = [c for c in report["checks"] if c["passed"] is False]
        lines.append(f"checks (last evaluation of each): {passed} passed, {len(failed)} failed")
        for c in failed:
            lines.append(f"  FAILED {c['asset']}.{c['check']}{' (blocking)' if c.get('blocking') else ''} (evaluated "
                         f"{_shown(c['evaluated_at'])}"
                         + (", before the asset's last materialization: stale)" if c["stale"] else ")"))
            if c.get("violations") is not None:
                sample = "; ".join(" ".join(row) if isinstance(row, list) else str(row) for row in (c["sample"] or [])[:3])
                lines.append(f"    {c['violations']} row(s)" + (f", e.g. {sample[:200]}" if sample else ""))
        stale = sum(c["stale"] for c in report["checks"])
        if stale:
            lines.append(f"  {stale} of these results predate their asset's last materialization "
                         "(the check did not run since): `cryptowire materialize` evaluates them again")
    if report.get("feeds"):
        lines.append("feeds (last fetch):")
        # http is "-" for file feeds, which have no HTTP status
        lines.append(f"  {'feed':<28} {'fetched at':<23} {'http':>4} {'seen':>5} {'new':>5} {'upd':>4}  result")
        cut = False
        old_feeds = [f for f in report["feeds"] if not f.get("in_last_run", True)]
        for f in report["feeds"]:
            if f is (old_feeds[0] if old_feeds else None):
                lines.append("  not fetched by the last run (disabled, removed from the feeds file, or moved to "
                             "another URL):")
            result = f"ERROR {f['error']}" if f["error"] else ("unchanged" if f["not_modified"] else "ok")
            if f.get("last_error"):
                result = f"then: ERROR {f['last_error']}"
            if f.get("warning") and not f["error"]:
                shown, was_cut = _one_line(f["warning"], WARNING_SHOWN)
                cut = cut or was_cut
                result += f" (warning: {shown})"
            http = f["status"] or "-"
            lines.append(f"  {f['feed']:<28} {_shown(f['at']):<23} {http!s:>4} {f['seen']:>5} {f['new']:>5} "
                         f"{f.get('updated', 0):>4}  {result}")
        if cut:
            lines.append("  (long warnings are cut here: `cryptowire status --json` has them whole)")
    return "\n".join(lines)
