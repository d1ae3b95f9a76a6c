"""From a data engineer's review of the Dagster side (s47): the UI and the CLI on one data home.

- a second `cryptowire dev` on a port already taken printed "address already in use", yet kept its daemon running
  beside the first one's (two daemons on one instance) and never exited;
- a broken feeds file, a warehouse held by another process: the UI said only `Error occurred while executing op
  "raw_articles"`, the text that says what to do was in the error's cause;
- `status` said nothing of a schedule or sensor turned off in the UI: polls had stopped, and nothing said so;
- a run of `cryptowire materialize` showed in the UI with no word of what it was asked (selection, feeds file).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "cryptowire")


@pytest.mark.parametrize("command", ["dev", "webserver"])
def test_a_taken_port_is_refused_before_dagster_starts(tmp_path: Path, command: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env["CRYPTOWIRE_HOME"] = str(tmp_path / "home")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run([CLI, command, "--port", str(port)], env=env, capture_output=True, text=True,
                              timeout=120, start_new_session=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr, done.stderr
    assert "DAGSTER_HOME=" not in done.stdout  # refused before Dagster was started
    assert time.monotonic() - started < 60


def test_a_broken_feeds_file_is_the_steps_own_error_in_the_ui(tmp_path: Path) -> None:
    import dagster as dg

    from pipeline.assets.ingest import raw_articles
    from pipeline.definitions import resources
    from pipeline.jobs import root_cause
    from warehouse.config import Settings

    feeds = tmp_path / "feeds.yaml"
    feeds.write_text("feeds: [\n")
    settings = Settings(home=tmp_path / "home", feeds_file=feeds)
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([raw_articles], resources=resources(settings), instance=instance,
                                raise_on_error=False)
        (failure,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    error = failure.step_failure_data.error
    # what the UI shows first: the error's own message, not Dagster's wrapper
    assert "feeds file" in error.message and "not valid YAML" in error.message, error.message
    assert "Error occurred while executing" not in error.message
    assert root_cause(error).startswith("FeedsFileError: feeds file"), root_cause(error)  # the CLI's summary


def test_status_names_the_schedules_and_sensors_turned_off(tmp_path: Path) -> None:
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env["CRYPTOWIRE_HOME"] = str(tmp_path / "home")
    made = subprocess.run([CLI, "materialize", "--select", "crypto_assets"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    from tests.test_crash_recovery import _instance

    instance = _instance(tmp_path / "home")
    try:  # a CLI run says in the UI what it was asked (it is Dagster's __ephemeral_asset_job__ there)
        (run,) = instance.get_runs()
        assert run.tags["cryptowire/command"] == "materialize" and run.tags["cryptowire/select"] == "crypto_assets"
        assert run.tags["cryptowire/feeds_file"].endswith(".yaml"), run.tags
    finally:
        instance.dispose()
    dagster_home = tmp_path / "home" / "dagster"
    before = subprocess.run([CLI, "status"], env=env, capture_output=True, text=True, timeout=120).stdout
    assert "STOPPED" not in before
    for kind, name in (("schedule", "poll_feeds"), ("sensor", "follow_upstream")):  # as the UI's toggle does
        stopped = subprocess.run([str(Path(sys.executable).parent / "dagster"), kind, "stop", name, "-m",
                                  "pipeline.definitions"], env={**env, "DAGSTER_HOME": str(dagster_home)},
                                 cwd=dagster_home, capture_output=True, text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stderr[-2000:]
    text = subprocess.run([CLI, "status"], env=env, capture_output=True, text=True, timeout=120).stdout
    assert "automation: poll_feeds is STOPPED" in text and "the feeds are not polled" in text, text
    assert "automation: follow_upstream is STOPPED" in text, text
    doc = json.loads(subprocess.run([CLI, "status", "--json"], env=env, capture_output=True, text=True,
                                    timeout=120).stdout)
    assert doc["automation_stopped"] == ["follow_upstream", "poll_feeds"], doc["automation_stopped"]


def test_the_articles_data_version_moves_with_every_change_the_followers_read(tmp_path: Path) -> None:
    """The followers of `articles` run on a change of its data version (pipeline.automation.ON_CHANGE). A date
    corrected by a later fetch is copied without re-scoring (pipeline.enrich.SYNC_SQL) and left the version as it
    was (a diff review, s47): the sentiment buckets and events of re-dated articles were never redone."""
    import duckdb

    from pipeline.assets.enrich import VERSION_SQL
    from tests.support.newsdata import Data, build, make_articles, make_events

    build(tmp_path, Data(make_articles(40, 4), make_events(3)))
    con = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    try:
        def version() -> tuple:
            return tuple(con.execute(VERSION_SQL).fetchall()[0])

        first = version()
        assert version() == first  # nothing changed: the same version
        one = "(SELECT min(id) FROM articles)"
        changes = [
            f"UPDATE articles SET published_at = published_at - INTERVAL 3 HOUR, date_inferred = false WHERE id = {one}",
            f"UPDATE articles SET enriched_at = now()::TIMESTAMP, sentiment = 'negative' WHERE id = {one}",
            f"UPDATE articles SET tagged_at = now()::TIMESTAMP, tickers = ['ETH'] WHERE id = {one}",
            f"DELETE FROM article_tickers WHERE article_id = {one}",
            f"DELETE FROM articles WHERE id = {one}",
        ]
        seen = {first}
        for change in changes:
            con.execute(change)
            now = version()
            assert now not in seen, change
            seen.add(now)
    finally:
        con.close()
