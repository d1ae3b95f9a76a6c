"""Runs whose process is gone: telling them from live runs, marking them failed, freeing their pool slots.

A run killed with SIGKILL (an OOM kill, an eviction, a power cut) never reports its end: the Dagster instance
keeps it as ``STARTED`` and its step keeps the ``duckdb_writer`` pool's only slot, so every later run would
wait for it forever. Dagster frees the slots of *finished* runs (run monitoring in the daemon) but cannot tell
that the process of a run launched by ``DefaultRunLauncher`` or run in-process is gone. This module can:

- runs started by ``cryptowire`` carry tags naming their host, pid and the pid's start time (so a reused pid is
  not mistaken for the run), and a heartbeat tag refreshed while they run (for runs on other hosts);
- runs launched by the Dagster daemon carry the pid of their run worker in the engine event
  "Started process for run (pid: N)"; they run on this host (``DefaultRunLauncher``).

- any other run (``dagster asset materialize``, a notebook's ``materialize``) is tied to its coordinating process
  by its first step, and every step in a child process records its own pid (``claim_run``, called when the
  warehouse resource is set up): a run is alive while its coordinator or its latest step lives.

A run with none of these (one that has not reached a step yet, or one on another host without heartbeats) is
judged by its events: it is taken for dead when it has written none for ``HEARTBEAT_TIMEOUT``.

``recover`` marks every in-progress run whose process is gone as failed, with the reason, and frees the slots
and pending claims of every run that is no longer in progress. It runs before each materialization, in the
``recover_dead_runs`` sensor of the daemon, and in ``cryptowire doctor``.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.timestamps import ISO_SECONDS, iso_utc

POOL = "duckdb_writer"
TAG_HOST = "cryptowire/host"
TAG_PID = "cryptowire/pid"
TAG_PID_START = "cryptowire/pid_start"
TAG_HEARTBEAT = "cryptowire/heartbeat"
TAG_STEP_PID = "cryptowire/step_pid"  # the latest step's own process, when it runs in a child (claim_run)
TAG_STEP_PID_START = "cryptowire/step_pid_start"
TAG_TOKEN = "cryptowire/token"  # finds the run a process started before its run id is known
log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0
HEARTBEAT_TIMEOUT = 120.0  # a run on another host is taken for dead when its heartbeat is older than this


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat``), or None when there is no
    such process or it is a zombie. Together with the pid it names one process, even after the pid is reused."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def process_tags() -> dict[str, str]:
    """Tags that tie a run to this process."""
    pid = os.getpid()
    return {
        TAG_TOKEN: secrets.token_hex(8),
        TAG_HOST: socket.gethostname(),
        TAG_PID: str(pid),
        TAG_PID_START: process_start(pid) or "",
        TAG_HEARTBEAT: iso_utc(time.time()),
    }


def claim_run(instance: Any, run_id: str) -> None:
    """Tie a run to the processes that run it, from each of its steps. A run started by other means
    (``dagster asset materialize``, the webserver's in-process runs, a notebook) gets the process that coordinates
    it: a step of the multiprocess executor runs in a child of that process, an in-process step in it (runs that
    ``cryptowire`` or the daemon started are tied already). A step in a child process also records itself: it
    keeps writing if its coordinator is killed alone. Without this such a run could only be judged by its silence,
    and a step fetching slow feeds or scoring thousands of articles is silent for minutes while alive."""
    import multiprocessing

    run = instance.get_run_by_id(run_id)
    if run is None:
        return
    tags: dict[str, str] = {}
    parent = multiprocessing.parent_process()
    if parent is not None:
        tags.update({TAG_STEP_PID: str(os.getpid()), TAG_STEP_PID_START: process_start(os.getpid()) or ""})
    if TAG_PID not in run.tags and _worker_pid(instance, run_id) is None:
        # A coordinator killed while this step started has left it to init (getppid() is then 1): not recorded.
        pid = os.getpid() if parent is None else parent.pid if os.getppid() == parent.pid else None
        if pid is not None:
            tags.update({TAG_PID: str(pid), TAG_PID_START: process_start(pid) or ""})
    if tags:
        instance.add_run_tags(run_id, {TAG_HOST: run.tags.get(TAG_HOST, socket.gethostname()), **tags})


def _alive(pid: int, recorded_start: str | None) -> bool:
    start = process_start(pid)
    return start is not None and (not recorded_start or recorded_start == start)


@dataclass
class RunProcess:
    """An in-progress run and what is known of its process."""

    run_id: str
    status: str
    pid: int | None
    host: str | None
    since: str | None  # when the run started (ISO 8601 UTC)
    alive: bool
    reason: str  # why it is taken for dead, or how it was seen alive

    def describe(self) -> str:
        where = f"pid {self.pid}" + (f" on {self.host}" if self.host and self.host != socket.gethostname() else "")
        return f"run {self.run_id} ({where if self.pid else 'pid unknown'}, since {self.since or '?'})"


def _worker_pid(instance: Any, run_id: str) -> int | None:
    """The pid of a daemon-launched run's worker, from its "Started process for run" engine event."""
    from dagster import DagsterEventType

    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        pid = (getattr(data, "metadata", None) or {}).get("pid")
        if pid is not None and "Started process for run" in (entry.dagster_event.message or ""):
            return int(getattr(pid, "value", pid))
    return None


def _last_event_time(instance: Any, run_id: str, record: Any) -> float:
    found = instance.event_log_storage.get_records_for_run(run_id, ascending=False, limit=1).records
    return found[0].event_log_entry.timestamp if found else record.create_timestamp.timestamp()


def inspect_run(instance: Any, record: Any) -> RunProcess:
    run = record.dagster_run
    tags = run.tags
    host = tags.get(TAG_HOST)
    pid = int(tags[TAG_PID]) if tags.get(TAG_PID, "").isdigit() else _worker_pid(instance, run.run_id)
    since = iso_utc(record.start_time or record.create_timestamp.timestamp())
    out = RunProcess(run.run_id, run.status.value, pid, host, since, True, "")
    if host is not None and host != socket.gethostname() and TAG_HEARTBEAT in tags:
        beat = tags.get(TAG_HEARTBEAT)
        age = time.time() - datetime.strptime(beat, ISO_SECONDS).replace(tzinfo=UTC).timestamp() if beat else None
        out.alive = age is not None and age < HEARTBEAT_TIMEOUT
        out.reason = f"its last heartbeat from {host} was {age:.0f} s ago" if age is not None else f"no heartbeat from {host}"
        return out
    step = int(tags[TAG_STEP_PID]) if tags.get(TAG_STEP_PID, "").isdigit() else None
    elsewhere = host is not None and host != socket.gethostname()  # its pids mean nothing here
    if elsewhere or (pid is None and step is None):  # not reached a step yet, or another host without heartbeats
        silent = time.time() - _last_event_time(instance, run.run_id, record)
        out.alive = silent < HEARTBEAT_TIMEOUT
        out.reason = f"no process is recorded for it here and its last event was {silent:.0f} s ago"
        return out
    coordinator_alive = pid is not None and _alive(pid, tags.get(TAG_PID_START))
    if step is not None and not coordinator_alive and _alive(step, tags.get(TAG_STEP_PID_START)):
        out.alive, out.reason = True, f"its step's process (pid {step}) is running"
        return out
    if pid is None:
        out.alive, out.reason = False, f"its step's process (pid {step}) is gone and no coordinator is recorded"
        return out
    start = process_start(pid)
    recorded = tags.get(TAG_PID_START)
    if start is None:
        out.alive, out.reason = False, f"its process (pid {pid}) is gone"
    elif recorded and recorded != start:
        out.alive, out.reason = False, f"its process is gone (pid {pid} now belongs to another process)"
    else:
        out.alive, out.reason = True, f"its process (pid {pid}) is running"
    return out


def in_progress(instance: Any) -> list[RunProcess]:
    """Every run the instance holds as not finished, with what is known of its process."""
    from dagster import DagsterRunStatus, RunsFilter

    statuses = [
        DagsterRunStatus.NOT_STARTED,
        DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED,
        DagsterRunStatus.CANCELING,
    ]
    records = instance.get_run_records(filters=RunsFilter(statuses=statuses))
    return [inspect_run(instance, r) for r in records]


def pool_runs(instance: Any, pool: str = POOL) -> set[str]:
    """Runs holding a slot of the pool or waiting for one."""
    info = instance.event_log_storage.get_concurrency_info(pool)
    return {s.run_id for s in info.claimed_slots} | {s.run_id for s in info.pending_steps}


def recover(instance: Any, fix: bool = True) -> list[str]:
    """Mark in-progress runs whose process is gone as failed; free the pool slots of runs no longer in progress.
    Returns one line per repair (with ``fix=False``, per repair it would make)."""
    done = []
    live = set()
    for run in in_progress(instance):
        if not run.alive:
            if fix:
                dagster_run = instance.get_run_by_id(run.run_id)
                instance.report_run_failed(
                    dagster_run, message=f"Marked failed by cryptowire's recovery: {run.reason}."
                )
            done.append(f"{'marked' if fix else 'would mark'} {run.describe()} failed: {run.reason}")
        else:
            live.add(run.run_id)
    if not instance.event_log_storage.supports_global_concurrency_limits:
        return done
    for run_id in sorted(pool_runs(instance) - live):
        if fix:
            instance.event_log_storage.free_concurrency_slots_for_run(run_id)
        done.append(f"{'freed' if fix else 'would free'} the {POOL} pool slot held by run {run_id}, which is not running")
    return done


def heartbeat(instance: Any, token: str, stop: threading.Event) -> None:
    """Refresh the heartbeat tag of the run tagged with ``token`` until ``stop`` (a ``threading.Event``) is set.
    Runs in a thread beside an in-process materialization."""
    from dagster import RunsFilter

    run_id = None
    missed = 0
    while not stop.wait(HEARTBEAT_SECONDS):
        try:
            if run_id is None:
                found = instance.get_run_ids(RunsFilter(tags={TAG_TOKEN: token}), limit=1)
                run_id = found[0] if found else None
            if run_id is not None:
                instance.add_run_tags(run_id, {TAG_HEARTBEAT: iso_utc(time.time())})
            missed = 0
        except Exception:  # retried at the next beat; the run itself must not fail for it, but say why it may
            missed += 1   # be taken for dead (another process marks a run dead when its beats stop)
            if missed == 1 or missed % 10 == 0:
                log.warning("run heartbeat not written (%d in a row); after %.0f s without one other processes "
                            "treat this run as dead", missed, HEARTBEAT_TIMEOUT, exc_info=True)
