"""Celery workers that score and tag partitions of `articles` (one publication day each), over Redis.

``cryptowire worker`` runs one; ``cryptowire backfill`` queues partitions and merges what they write
(pipeline/partitions.py has the flow and its files). A task names its partition by a path relative to the data
home's ``partitions/``, so a worker on another machine resolves it against its own ``CRYPTOWIRE_HOME`` (the same
shared directory).

Delivery: a task is acknowledged when it has finished (``task_acks_late``), a task whose worker process died is
given back (``task_reject_on_worker_lost``), each worker takes one task at a time (``worker_prefetch_multiplier=1``),
and Redis hands a task that a dead worker had taken to another worker after ``CRYPTOWIRE_WORKER_VISIBILITY_TIMEOUT``
seconds. So a partition can run twice; its result is a content-named file written with an atomic rename and
merged idempotently, so running twice changes nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from typing import Any

from celery import Celery

from pipeline.partitions import attempt_id, result_path_for, score_partition_file
from warehouse.config import Settings, get_settings, redis_url_problem

QUEUE = "cryptowire-partitions"
TASK = "cryptowire.score_partition"
# Fault injection for tests only (read from the environment, never configuration): seconds a task sleeps after
# taking its partition, so that a test can kill the worker while it holds one.
TEST_HOLD_ENV = "CRYPTOWIRE_TEST_PARTITION_HOLD"

app = Celery("cryptowire")


def check_redis_url(url: str) -> None:
    """A clear error for a URL Celery would fail on with a traceback (``No such transport``)."""
    problem = redis_url_problem(url)
    if problem:
        raise ValueError(problem)


def celery_url(url: str) -> str:
    """kombu and Celery spell redis-py's ``unix:///path?db=N`` ``redis+socket:///path?virtual_host=N``."""
    if not url.startswith("unix://"):
        return url
    path, _, query = url.removeprefix("unix://").partition("?")
    query = "&".join("virtual_host" + p[2:] if p.startswith("db=") else p for p in query.split("&") if p)
    return f"redis+socket://{path}?{query}" if query else f"redis+socket://{path}"


def configure(settings: Settings | None = None) -> Celery:
    """Point the Celery app at ``CRYPTOWIRE_REDIS_URL`` with the delivery rules above."""
    settings = settings or get_settings()
    if not settings.redis_url:
        raise ValueError(
            "CRYPTOWIRE_REDIS_URL is not set: workers and backfills meet in Redis (redis://host:6379/0); "
            "without it, `cryptowire materialize` scores articles in-process"
        )
    check_redis_url(settings.redis_url)
    timeout = settings.worker_visibility_timeout
    transport = {
        "visibility_timeout": timeout,
        # how often an idle worker looks for tasks a dead one held (kombu's default: every 100 s)
        "unacked_restore_interval": max(1, min(10, int(timeout // 2))),
        "unacked_restore_throttle": 1,
    }
    app.conf.update(
        broker_url=celery_url(settings.redis_url),
        result_backend=celery_url(settings.redis_url),
        broker_transport_options=transport,
        result_backend_transport_options={"visibility_timeout": timeout},
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_track_started=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=7 * 24 * 3600,
    )
    return app


_loaded: tuple[Any, Any] | None = None
_load_lock = threading.Lock()


def load(settings: Settings | None = None, threads: int | None = None) -> tuple[Any, Any]:
    """The sentiment model and the tagger, loaded once per worker process."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            from models.sentiment import load_model
            from models.tagging import get_tagger

            settings = settings or get_settings()
            settings.models_dir.mkdir(parents=True, exist_ok=True)
            # Workers starting together on one data home would each build the int8 graph into the same cache file:
            # the first builds it, the others wait and load it.
            with open(settings.models_dir / ".load.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                model = load_model(threads=threads or settings.sentiment_threads or None,
                                   cache_dir=settings.models_dir)
            _loaded = (model, get_tagger())
        return _loaded


def worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@app.task(name=TASK, bind=True)
def score_partition(self: Any, relative_input: str) -> dict[str, Any]:
    """Score and tag one partition; returns where its result is. Safe to run twice, or after a merge."""
    settings = get_settings()
    root = settings.partitions_dir
    input_path = root / relative_input
    result = result_path_for(input_path)
    info = {"partition": relative_input, "worker": worker_name(),
            "redelivered": bool((self.request.delivery_info or {}).get("redelivered"))}
    if result.exists():
        return {**info, "result": str(result.relative_to(root)), "computed": False}
    if not input_path.exists():
        partition_id = input_path.stem.removeprefix("input-")
        if input_path.with_name(f"merged-{partition_id}.json").exists():  # another attempt finished, it was merged
            return {**info, "result": None, "computed": False}
        raise FileNotFoundError(
            f"partition {relative_input} is not under this worker's data home ({root}): every worker must see the "
            "backfill's CRYPTOWIRE_HOME (a shared directory, the same CRYPTOWIRE_HOME)"
        )
    attempt = attempt_id()
    holding = input_path.with_name(f"running-{input_path.stem.removeprefix('input-')}.{attempt}.json")
    holding.write_text(json.dumps({**info, "pid": os.getpid(), "since": time.time()}))
    try:
        hold = float(os.environ.get(TEST_HOLD_ENV) or 0)
        if hold:
            time.sleep(hold)
        model, tagger = load(settings)
        started = time.perf_counter()
        score_partition_file(input_path, model, tagger)
        seconds = time.perf_counter() - started
        if input_path.with_name(f"merged-{input_path.stem.removeprefix('input-')}.json").exists():
            result.unlink(missing_ok=True)  # a twin of this attempt finished first and was merged: nothing to keep
    finally:
        holding.unlink(missing_ok=True)
    return {**info, "result": str(result.relative_to(root)), "computed": True, "seconds": round(seconds, 3)}


def run_worker(settings: Settings, concurrency: int = 1, threads: int | None = None, loglevel: str = "INFO") -> None:
    """A Celery worker on the partitions queue. One process (the ``solo`` pool) with the model loaded before it
    takes a task when ``concurrency`` is 1; otherwise ``concurrency`` forked processes, each loading it once."""
    configure(settings)
    if concurrency == 1:
        load(settings, threads)
        pool = "solo"
    else:
        from celery.signals import worker_process_init

        @worker_process_init.connect(weak=False)
        def _load_in_child(**_: Any) -> None:
            load(settings, threads)

        pool = "prefork"
    app.worker_main([
        "worker", "--queues", QUEUE, "--concurrency", str(concurrency), "--pool", pool,
        "--hostname", f"cryptowire@{worker_name()}", "--loglevel", loglevel, "--without-gossip",
        "--without-mingle", "--without-heartbeat",
    ])


def queue(relative_inputs: list[str]) -> list[Any]:
    """Send one task per partition; returns their AsyncResults."""
    return [score_partition.apply_async(args=[rel], queue=QUEUE) for rel in relative_inputs]


