"""The scheduled path, through a power cut: the real Dagster daemon runs the `poll_feeds` schedule; while the first
run's step runs, the daemon, its code server and the run's worker are all killed with SIGKILL. Nothing is left to
report the run's end: it stays STARTED and holds the writer pool's slot. Once the daemon is started again, the
`recover_dead_runs` sensor marks the run failed and frees its slot, and the next scheduled run succeeds, with
nobody touching the data home; the daemon also runs the dead run again.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_crash_recovery import _env, _instance

pytestmark = pytest.mark.slow
DAEMON = str(Path(sys.executable).parent / "dagster-daemon")


def _runs(home: Path) -> list:
    instance = _instance(home)
    try:
        return [(r, _failure_message(instance, r.run_id)) for r in instance.get_runs() if r.job_name == "ingest_feeds"]
    finally:
        instance.dispose()


def _failure_message(instance, run_id: str) -> str:  # noqa: ANN001
    from dagster import DagsterEventType

    failures = instance.all_logs(run_id, of_type=DagsterEventType.RUN_FAILURE)
    return failures[-1].dagster_event.message if failures else ""


def _worker_in_step(instance) -> tuple[str, int] | None:  # noqa: ANN001
    """(run id, run worker pid) of a scheduled run whose step has started, if there is one."""
    from dagster import DagsterEventType

    for run in instance.get_runs():
        if run.job_name != "ingest_feeds" or run.status.value != "STARTED":
            continue
        if not instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_START):
            continue
        for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT):
            if "Started process for run" in (entry.dagster_event.message or ""):
                return run.run_id, int(entry.dagster_event.event_specific_data.metadata["pid"].value)
    return None


def _start_daemon(env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    out = open(log, "a")
    return subprocess.Popen(
        [DAEMON, "run", "-m", "pipeline.definitions"], env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(daemon: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(daemon.pid, sig)
        daemon.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()


@pytest.mark.timeout(900)  # its own bounds below (300 s + 420 s) come first
def test_a_scheduled_run_cut_off_mid_step_is_recovered_by_the_daemon(tmp_path: Path, built_models: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(built_models, home / "models")  # the int8 graph: the runs need not build it
    dagster_home = home / "dagster"
    log = tmp_path / "daemon.log"
    _instance(home).dispose()  # the data home's Dagster home, with the project's dagster.yaml
    env = _env(home, DAGSTER_HOME=str(dagster_home), CRYPTOWIRE_SCHEDULE_CRON="* * * * *")
    daemon = _start_daemon(env, dagster_home, log)
    try:
        # generous bounds (a liveness check, not a speed measurement): the suite runs two files at once, and on a
        # busy machine the daemon's ticks and sensors come late (a CI-like run needed over 180 s for the recovery)
        deadline = time.monotonic() + 300
        killed = None
        while killed is None:
            instance = _instance(home)
            try:
                killed = _worker_in_step(instance)
            finally:
                instance.dispose()
            assert daemon.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        run_id, pid = killed
        os.kill(pid, signal.SIGKILL)
        _stop(daemon, signal.SIGKILL)
        instance = _instance(home)
        try:
            assert instance.get_run_by_id(run_id).status.value == "STARTED"  # nobody reported its end
            assert run_id in {s.run_id for s in instance.event_log_storage.get_concurrency_info("duckdb_writer").claimed_slots}
        finally:
            instance.dispose()

        daemon = _start_daemon(env, dagster_home, log)
        deadline = time.monotonic() + 420
        while True:
            runs = _runs(home)
            dead = [r for r, msg in runs if "Marked failed by cryptowire's recovery" in msg]
            ok = [r for r, _ in runs if r.status.value == "SUCCESS"]
            # the dead run is run again (dagster.yaml run_retries; RETRY_TAGS on the daemon's runs),
            # not only replaced by the next poll: downstream runs killed the same way have no next change to wait for
            retried = [r for r in ok if r.parent_run_id == run_id and r.tags.get("dagster/retry_number") == "1"]
            if dead and retried:
                break
            assert daemon.poll() is None, log.read_text()[-3000:]
            seen = [(r.run_id[:8], r.status.value, (r.parent_run_id or "")[:8], r.tags.get("dagster/retry_number"),
                     m[:80]) for r, m in runs]  # short, so that the killed run's own line is not cut off
            assert time.monotonic() < deadline, (run_id[:8], seen, log.read_text()[-3000:])
            time.sleep(2)
        assert [r.run_id for r in dead] == [run_id] and ok[0].run_id != run_id
        instance = _instance(home)
        try:
            info = instance.event_log_storage.get_concurrency_info("duckdb_writer")
            assert run_id not in {s.run_id for s in info.claimed_slots}
        finally:
            instance.dispose()
    finally:
        _stop(daemon)


def test_every_run_the_daemon_starts_may_be_run_again_after_its_process_dies() -> None:
    """The retry is the instance's (dagster.yaml) but only for runs tagged so: the downstream runs the automation
    sensor starts (a killed one would wait for the next change upstream) and the scheduled ones."""
    import yaml

    from pipeline.automation import RETRY_TAGS, automation_sensor, schedules
    from pipeline.jobs import DAGSTER_YAML
    from warehouse.config import Settings

    retries = yaml.safe_load(DAGSTER_YAML.read_text())["run_retries"]
    assert retries == {"enabled": True, "max_retries": 0, "retry_on_asset_or_op_failure": False}
    assert automation_sensor.run_tags == RETRY_TAGS == {"dagster/max_retries": "2", "dagster/retry_strategy": "ALL_STEPS"}
    maintenance = next(s for s in schedules(Settings()) if s.name == "daily_maintenance")
    assert maintenance.tags == RETRY_TAGS
