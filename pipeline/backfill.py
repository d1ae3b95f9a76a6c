"""``cryptowire backfill``: export the days' partitions, queue them for the workers, merge their results.

The export and every merge hold the data home's materialization lock and open the warehouse read-write for a
moment, so they take turns with ``cryptowire materialize`` and keep the one-writer rule; the workers never open the
warehouse. Results are merged as they arrive, so an interrupted backfill keeps what it merged, and running it again
queues only the partitions still unscored (a partition whose result is already on disk is not computed again).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any

from warehouse.config import Settings

POLL_SECONDS = 0.25
# How long the backfill keeps polling while Redis is away (a restart) before it gives up with one line.
REDIS_RETRY_SECONDS = 120.0
# How often the backfill checks that Redis still holds its marker key: a Redis that restarted without persistence
# comes back empty (queued tasks and results gone, the marker too), and the days not merged are queued again.
RESTART_CHECK_SECONDS = 2.0
MARKER_PREFIX = "cryptowire:backfill:"
MARKER_SECONDS = 24 * 3600  # refreshed at every check; left by a killed backfill, it expires


@dataclass
class PartitionOutcome:
    day: str
    input_id: str
    articles: int
    status: str = "queued"  # queued | merged | failed
    worker: str | None = None
    computed: bool | None = None
    applied: int = 0
    stale: int = 0
    error: str | None = None


@dataclass
class BackfillReport:
    since: str
    until: str
    model_version: str
    tagger_version: str
    partitions: list[PartitionOutcome] = field(default_factory=list)
    articles: int = 0
    merged_articles: int = 0
    seconds: float = 0.0
    ok: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class BackfillTimeout(Exception):
    pass


class WorkersIdle(BackfillTimeout):
    """No worker took a queued partition, and none of this backfill's finished, for ``idle_timeout`` seconds."""


class BackfillRangeError(ValueError):
    """``--until`` before ``--since``."""


class RedisUnreachable(Exception):
    pass


def _unscored(con: Any, part: Any, model_version: str, tagger_version: str) -> int:
    """Articles of ``part``'s day that the warehouse still lacks scores or tags for. Any such article means the
    day is not done, whatever its content id says now (articles may have arrived since the export): a day is
    counted merged only when the warehouse shows its articles scored."""
    from pipeline.partitions import day_start

    return con.execute(
        "SELECT count(*) FROM articles WHERE published_at >= ? AND published_at < ? "
        "AND (model_version IS DISTINCT FROM ? OR tagger_version IS DISTINCT FROM ?)",
        [day_start(part.day), day_start(part.day + timedelta(days=1)), model_version, tagger_version],
    ).fetchall()[0][0]


def _finished(pending: dict[str, Any], results: dict[str, Any], outcomes: dict[str, PartitionOutcome],
              say: Callable[[str], None], states: dict[str, str] | None = None) -> list[tuple[Any, dict | None]]:
    """The queued days whose task ended: (part, its result), or (part, None) for a task that failed. ``states``
    gets each pending task's state as read (PENDING, STARTED once a worker took it, SUCCESS, FAILURE)."""
    from pipeline.workers import app

    done: list[tuple[Any, dict | None]] = []
    for task_id, part in pending.items():
        res = results[task_id] or app.AsyncResult(task_id)
        results[task_id] = res
        state = res.state
        if states is not None:
            states[task_id] = state
        if state == "SUCCESS":
            done.append((part, res.result))
        elif state == "FAILURE":
            outcome = outcomes[part.input_id]
            outcome.status, outcome.error = "failed", f"{type(res.result).__name__}: {res.result}"
            say(f"partition {part.day} failed: {outcome.error}")
            done.append((part, None))
    return done


def _apply(con: Any, part: Any, value: dict, outcome: PartitionOutcome, versions: tuple[str, str],
           say: Callable[[str], None]) -> None:
    """Merge one computed day into the warehouse (the caller holds the writer lock) and record how it went."""
    from pipeline.partitions import finish_partition, merge_result

    outcome.worker, outcome.computed = value.get("worker"), value.get("computed")
    if part.result_path.exists():
        merged = merge_result(con, part.result_path)
        outcome.applied, outcome.stale = merged.applied, merged.stale
        finish_partition(part, merged)
        outcome.status = "merged"
    elif (merged_file := part.input_path.with_name(f"merged-{part.input_id}.json")).exists():
        # merged by another run of the same work, if the warehouse shows it
        left = _unscored(con, part, *versions)
        outcome.status = "failed" if left else "merged"
        if left:
            outcome.error = (f"{merged_file.name} says merged but {left} of its articles are still "
                             "unscored; run the same backfill again")
            say(f"partition {part.day} failed: {outcome.error}")
    else:
        outcome.status = "failed"
        outcome.error = f"{part.result_path} is missing after the worker reported it done"
        say(f"partition {part.day} failed: {outcome.error}")


def run_backfill(
    settings: Settings,
    since: date,
    until: date,
    timeout: float | None = None,
    wait_timeout: float | None = None,
    say: Callable[[str], None] = print,
    idle_timeout: float | None = None,
) -> BackfillReport:
    """Export, queue and merge the days ``since``..``until``. ``timeout`` bounds the whole wait for the workers;
    ``idle_timeout`` bounds only a wait without progress (``WorkersIdle``): for that long no worker took a
    partition off the queue (this backfill's or another's) and none of this backfill's finished. A partition a
    worker took counts as progress for up to ``worker_visibility_timeout`` after it was taken (past it Redis hands
    it to another worker). Either way the days not done stay queued, as after a kill: a worker that takes them
    leaves its result on disk, which the same backfill run again merges without computing it again."""
    from models.sentiment.model import int8_model_version
    from models.tagging import get_tagger
    from pipeline.partitions import export_partitions
    from pipeline.runlock import exclusive
    from pipeline.workers import QUEUE, configure, queue
    from warehouse import db

    if until < since:
        raise BackfillRangeError(f"--until {until} is before --since {since}")
    configure(settings)
    import redis

    client = redis.Redis.from_url(settings.redis_url or "", socket_connect_timeout=5, socket_timeout=5)
    try:  # before exporting anything
        client.ping()
    except redis.RedisError as exc:
        raise RedisUnreachable(f"cannot reach Redis at CRYPTOWIRE_REDIS_URL ({exc}): start it or fix the URL") from exc
    settings.ensure_dirs()
    started = time.perf_counter()
    root = settings.partitions_dir
    lock = settings.materialize_lock
    model_version, tagger_version = int8_model_version(), get_tagger().version
    report = BackfillReport(since.isoformat(), until.isoformat(), model_version, tagger_version)

    with exclusive(lock, wait_timeout, say):
        con = db.connect(settings.warehouse_path)
        try:
            parts = export_partitions(con, root, model_version, tagger_version, since, until)
        finally:
            con.close()
        for p in parts:
            # The warehouse still lacks this work, so a marker of the same content id is from a merge it no longer
            # holds (restored from a copy, versions reset): left, workers would drop their results as merged.
            p.input_path.with_name(f"merged-{p.input_id}.json").unlink(missing_ok=True)
    report.articles = sum(p.articles for p in parts)
    if not parts:
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    say(f"queued {len(parts)} partition(s), {report.articles} articles")
    outcomes = {p.input_id: PartitionOutcome(p.day.isoformat(), p.input_id, p.articles) for p in parts}
    report.partitions = list(outcomes.values())
    marker = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
    try:
        client.set(marker, "queued", ex=MARKER_SECONDS)  # before the tasks: a Redis that loses them loses it too
    except redis.RedisError as exc:
        raise RedisUnreachable(f"Redis at CRYPTOWIRE_REDIS_URL went away before the days were queued ({exc}); "
                               "start it and run the same backfill again") from exc
    pending = dict(zip([r.id for r in queue([str(p.input_path.relative_to(root)) for p in parts])], parts,
                       strict=True))
    results = {task_id: None for task_id in pending}
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    redis_lost: float | None = None
    checked = time.monotonic()
    # Progress, for idle_timeout: a task of ours changing state (taken, finished), or the shared queue getting
    # shorter (workers busy with other backfills' days, e.g. the other runs of a Dagster backfill).
    progress = time.monotonic()
    states: dict[str, str] = {}
    taken_at: dict[str, float] = {}
    queue_length: int | None = None
    while pending:
        done: list[tuple[Any, dict | None]] = []
        try:
            if redis_lost is not None or time.monotonic() - checked > RESTART_CHECK_SECONDS:
                checked = time.monotonic()
                if not client.expire(marker, MARKER_SECONDS):  # the key is gone: so are the queued tasks
                    # A day already computed is only picked up again (its result is on disk); twice changes nothing.
                    say(f"Redis lost its data (restarted without persistence?): queuing {len(pending)} "
                        "partition(s) again")
                    parts_left = list(pending.values())
                    sent = queue([str(p.input_path.relative_to(root)) for p in parts_left])
                    pending = dict(zip([r.id for r in sent], parts_left, strict=True))
                    results = {task_id: None for task_id in pending}
                    client.set(marker, "queued", ex=MARKER_SECONDS)
                    progress, states, taken_at = time.monotonic(), {}, {}
            seen: dict[str, str] = {}
            done = _finished(pending, results, outcomes, say, seen)
            if idle_timeout is not None:
                now = time.monotonic()
                if any(states.get(task_id, "PENDING") != state for task_id, state in seen.items()):
                    progress = now
                for task_id, state in seen.items():
                    if state == "STARTED":
                        taken_at.setdefault(task_id, now)
                states = seen
                length = client.llen(QUEUE)
                if queue_length is not None and length < queue_length:
                    progress = now
                queue_length = length
        except (RedisConnectionError, RedisTimeoutError, OperationalError, redis.RedisError) as exc:
            # Redis restarting: the next poll reconnects (the workers reconnect by themselves too)
            redis_lost = redis_lost or time.monotonic()
            if time.monotonic() - redis_lost > REDIS_RETRY_SECONDS:
                raise RedisUnreachable(
                    f"Redis at CRYPTOWIRE_REDIS_URL is unreachable ({exc}) for {REDIS_RETRY_SECONDS:g} s, with "
                    f"{len(pending)} partition(s) not merged; start it and run the same backfill again to carry on "
                    "(the days merged so far stay merged)"
                ) from exc
            time.sleep(1)
            continue
        redis_lost = None
        if done:
            with exclusive(lock, wait_timeout, say):
                try:
                    con = db.connect(settings.warehouse_path)
                except db.WarehouseLocked as exc:  # a run the daemon launched is writing: merge on a later turn
                    say(f"merge postponed: {exc}")
                    time.sleep(POLL_SECONDS)
                    continue
                try:
                    for part, value in done:
                        if value is not None:
                            _apply(con, part, value, outcomes[part.input_id], (model_version, tagger_version), say)
                finally:
                    con.close()
            for part, _ in done:
                pending = {k: v for k, v in pending.items() if v is not part}
        if pending:
            if timeout is not None and time.perf_counter() - started > timeout:
                days = ", ".join(sorted(p.day.isoformat() for p in pending.values()))
                raise BackfillTimeout(
                    f"gave up after {timeout:g} s with {len(pending)} partition(s) not done ({days}); are workers "
                    "running (`cryptowire worker`)? They stay queued: run the same backfill again to merge them"
                )
            if idle_timeout is not None:
                # a day a worker took is given the visibility timeout to finish (after it, Redis hands it on)
                busy_until = max((taken_at[t] + settings.worker_visibility_timeout for t in pending if t in taken_at),
                                 default=0.0)
                if time.monotonic() - max(progress, busy_until) > idle_timeout:
                    days = ", ".join(sorted(p.day.isoformat() for p in pending.values()))
                    raise WorkersIdle(
                        f"no worker took or finished a partition for {idle_timeout:g} s "
                        f"(CRYPTOWIRE_WORKER_WAIT_SECONDS), with {len(pending)} partition(s) not done ({days}): start "
                        "`cryptowire worker` against the same CRYPTOWIRE_REDIS_URL (and CRYPTOWIRE_HOME), then run "
                        "these partitions again. They stay queued: a worker that takes them leaves the result for "
                        "the next run to merge, without scoring them again"
                    )
            time.sleep(POLL_SECONDS)
    try:
        client.delete(marker)
    except redis.RedisError:
        pass  # it expires
    report.merged_articles = sum(o.applied for o in report.partitions)
    report.ok = all(o.status == "merged" for o in report.partitions)
    report.seconds = round(time.perf_counter() - started, 3)
    return report
