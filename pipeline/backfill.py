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
    from pipeline.workers import configure

    if until < since:
        raise BackfillRangeError(f"--until {until} is before --since {since}")
    configure(settings)
    client = _redis(settings)  # reached before exporting anything
    settings.ensure_dirs()
    started = time.perf_counter()
    versions = (int8_model_version(), get_tagger().version)
    report = BackfillReport(since.isoformat(), until.isoformat(), *versions)
    parts = _export(settings, since, until, versions, wait_timeout, say)
    report.articles = sum(p.articles for p in parts)
    if parts:
        say(f"queued {len(parts)} partition(s), {report.articles} articles")
        queued = _Queued(client, settings.partitions_dir,
                         {p.input_id: PartitionOutcome(p.day.isoformat(), p.input_id, p.articles) for p in parts})
        report.partitions = list(queued.outcomes.values())
        queued.send(parts)
        _wait_and_merge(settings, queued, versions, started, timeout, wait_timeout, idle_timeout, say)
        queued.forget()
        report.merged_articles = sum(o.applied for o in report.partitions)
        report.ok = all(o.status == "merged" for o in report.partitions)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _redis(settings: Settings) -> Any:
    import redis

    client = redis.Redis.from_url(settings.redis_url or "", socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise RedisUnreachable(f"cannot reach Redis at CRYPTOWIRE_REDIS_URL ({exc}): start it or fix the URL") from exc
    return client


def _export(settings: Settings, since: date, until: date, versions: tuple[str, str], wait_timeout: float | None,
            say: Callable[[str], None]) -> list[Any]:
    """The days' partitions still to score, written under ``partitions_dir`` (holding the materialization lock)."""
    from pipeline.partitions import export_partitions
    from pipeline.runlock import exclusive
    from warehouse import db

    with exclusive(settings.materialize_lock, wait_timeout, say):
        con = db.connect(settings.warehouse_path)
        try:
            parts = export_partitions(con, settings.partitions_dir, *versions, since, until)
        finally:
            con.close()
        for p in parts:
            # The warehouse still lacks this work, so a marker of the same content id is from a merge it no longer
            # holds (restored from a copy, versions reset): left, workers would drop their results as merged.
            p.input_path.with_name(f"merged-{p.input_id}.json").unlink(missing_ok=True)
    return parts


class _Queued:
    """This backfill's partitions on the queue, and what the wait has seen of them: for ``idle_timeout``, progress
    is a task of ours changing state (taken, finished), or the shared queue getting shorter (workers busy with
    other backfills' days, e.g. the other runs of a Dagster backfill)."""

    def __init__(self, client: Any, root: Any, outcomes: dict[str, PartitionOutcome]) -> None:
        self.client, self.root, self.outcomes = client, root, outcomes
        self.marker = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
        self.pending: dict[str, Any] = {}  # task id -> partition
        self.results: dict[str, Any] = {}
        self.checked = time.monotonic()
        self.progress = time.monotonic()
        self.states: dict[str, str] = {}
        self.taken_at: dict[str, float] = {}
        self.queue_length: int | None = None

    def send(self, parts: list[Any]) -> None:
        import redis

        try:  # the marker before the tasks: a Redis that loses them loses it too
            self.client.set(self.marker, "queued", ex=MARKER_SECONDS)
        except redis.RedisError as exc:
            raise RedisUnreachable(f"Redis at CRYPTOWIRE_REDIS_URL went away before the days were queued ({exc}); "
                                   "start it and run the same backfill again") from exc
        self._queue(parts)

    def _queue(self, parts: list[Any]) -> None:
        from pipeline.workers import queue

        sent = queue([str(p.input_path.relative_to(self.root)) for p in parts])
        self.pending = dict(zip([r.id for r in sent], parts, strict=True))
        self.results = {task_id: None for task_id in self.pending}

    def requeue_if_lost(self, say: Callable[[str], None], now_anyway: bool) -> None:
        """Every few seconds (and after Redis went away): a missing marker means Redis lost the queued tasks."""
        if not now_anyway and time.monotonic() - self.checked <= RESTART_CHECK_SECONDS:
            return
        self.checked = time.monotonic()
        if self.client.expire(self.marker, MARKER_SECONDS):
            return
        # A day already computed is only picked up again (its result is on disk); twice changes nothing.
        say(f"Redis lost its data (restarted without persistence?): queuing {len(self.pending)} partition(s) again")
        self._queue(list(self.pending.values()))
        self.client.set(self.marker, "queued", ex=MARKER_SECONDS)
        self.progress, self.states, self.taken_at = time.monotonic(), {}, {}

    def poll(self, say: Callable[[str], None], track_idle: bool) -> list[tuple[Any, dict | None]]:
        from pipeline.workers import QUEUE

        seen: dict[str, str] = {}
        done = _finished(self.pending, self.results, self.outcomes, say, seen)
        if track_idle:
            now = time.monotonic()
            if any(self.states.get(task_id, "PENDING") != state for task_id, state in seen.items()):
                self.progress = now
            for task_id, state in seen.items():
                if state == "STARTED":
                    self.taken_at.setdefault(task_id, now)
            self.states = seen
            length = self.client.llen(QUEUE)
            if self.queue_length is not None and length < self.queue_length:
                self.progress = now
            self.queue_length = length
        return done

    def drop(self, done: list[tuple[Any, dict | None]]) -> None:
        for part, _ in done:
            self.pending = {k: v for k, v in self.pending.items() if v is not part}

    def days_left(self) -> str:
        return ", ".join(sorted(p.day.isoformat() for p in self.pending.values()))

    def idle_since(self, visibility_timeout: float) -> float:
        """When progress was last seen; a day a worker took is given the visibility timeout to finish (after it,
        Redis hands it on)."""
        busy_until = max((self.taken_at[t] + visibility_timeout for t in self.pending if t in self.taken_at),
                         default=0.0)
        return max(self.progress, busy_until)

    def forget(self) -> None:
        import redis

        try:
            self.client.delete(self.marker)
        except redis.RedisError:
            pass  # it expires


def _wait_and_merge(settings: Settings, queued: _Queued, versions: tuple[str, str], started: float,
                    timeout: float | None, wait_timeout: float | None, idle_timeout: float | None,
                    say: Callable[[str], None]) -> None:
    import redis
    from kombu.exceptions import OperationalError

    redis_lost: float | None = None
    while queued.pending:
        try:
            queued.requeue_if_lost(say, now_anyway=redis_lost is not None)
            done = queued.poll(say, track_idle=idle_timeout is not None)
        except (OperationalError, redis.RedisError) as exc:
            # Redis restarting: the next poll reconnects (the workers reconnect by themselves too)
            redis_lost = redis_lost or time.monotonic()
            if time.monotonic() - redis_lost > REDIS_RETRY_SECONDS:
                raise RedisUnreachable(
                    f"Redis at CRYPTOWIRE_REDIS_URL is unreachable ({exc}) for {REDIS_RETRY_SECONDS:g} s, with "
                    f"{len(queued.pending)} partition(s) not merged; start it and run the same backfill again to "
                    "carry on (the days merged so far stay merged)"
                ) from exc
            time.sleep(1)
            continue
        redis_lost = None
        if done and not _merge(settings, done, queued.outcomes, versions, wait_timeout, say):
            time.sleep(POLL_SECONDS)
            continue
        queued.drop(done)
        if queued.pending:
            if timeout is not None and time.perf_counter() - started > timeout:
                raise BackfillTimeout(
                    f"gave up after {timeout:g} s with {len(queued.pending)} partition(s) not done "
                    f"({queued.days_left()}); are workers running (`cryptowire worker`)? They stay queued: run the "
                    "same backfill again to merge them"
                )
            if idle_timeout is not None and (
                time.monotonic() - queued.idle_since(settings.worker_visibility_timeout) > idle_timeout
            ):
                raise WorkersIdle(
                    f"no worker took or finished a partition for {idle_timeout:g} s "
                    f"(CRYPTOWIRE_WORKER_WAIT_SECONDS), with {len(queued.pending)} partition(s) not done "
                    f"({queued.days_left()}): start `cryptowire worker` against the same CRYPTOWIRE_REDIS_URL (and "
                    "CRYPTOWIRE_HOME), then run these partitions again. They stay queued: a worker that takes them "
                    "leaves the result for the next run to merge, without scoring them again"
                )
            time.sleep(POLL_SECONDS)


def _merge(settings: Settings, done: list[tuple[Any, dict | None]], outcomes: dict[str, PartitionOutcome],
           versions: tuple[str, str], wait_timeout: float | None, say: Callable[[str], None]) -> bool:
    """Merge the finished days (holding the materialization lock); False if a run holds the warehouse (the days
    are merged on a later turn)."""
    from pipeline.runlock import exclusive
    from warehouse import db

    with exclusive(settings.materialize_lock, wait_timeout, say):
        try:
            con = db.connect(settings.warehouse_path)
        except db.WarehouseLocked as exc:  # a run the daemon launched is writing: merge on a later turn
            say(f"merge postponed: {exc}")
            return False
        try:
            for part, value in done:
                if value is not None:
                    _apply(con, part, value, outcomes[part.input_id], versions, say)
        finally:
            con.close()
    return True
