"""From the operations review (2026-11-26): what `materialize --json` and `up --json` print, on real runs.

- a failed run's `--json` summary has the keys every `--json` error has (`error`, `exitCode`);
- `up --json` prints exactly one JSON document on stdout: the summary when the run failed (no second document),
  and, when it serves, the summary with a `serving` part holding the key shown once; the lines for people go to
  stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.apiserver import free_port
from tests.support.feedgen import item, rss
from tests.support.servers import wait_serving
from tests.test_operator_review import CLI, _cli, _env, one_feed_home


def _all_bad_feeds(tmp_path: Path) -> Path:
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text(f"feeds:\n  - name: Gone\n    url: {tmp_path / 'missing.xml'}\n")
    return feeds


def test_a_failed_run_under_json_names_the_error_and_the_exit_code(tmp_path: Path) -> None:
    out = _cli(tmp_path / "home", "materialize", "--json", "--feeds", str(_all_bad_feeds(tmp_path)))
    assert out.returncode == 1, out.stderr[-2000:]
    doc = json.loads(out.stdout)  # one document
    assert doc["ok"] is False and doc["exitCode"] == 1
    assert doc["error"].startswith("the run failed: raw_articles"), doc["error"]


def test_status_says_why_an_asset_failed(tmp_path: Path) -> None:
    """`status` listed a failed asset with its run's id and nothing on why (a Dagster review, s47): the cause is
    the error the run's summary gave, under the asset, and `last_run.error` under --json."""
    home = tmp_path / "home"
    out = _cli(home, "materialize", "--select", "raw_articles", "--feeds", str(_all_bad_feeds(tmp_path)))
    assert out.returncode == 1, out.stderr[-2000:]
    text = _cli(home, "status").stdout
    (why,) = [line.strip() for line in text.splitlines() if line.strip().startswith("why: ")]
    assert "AllFeedsFailed" in why and "missing.xml" in why, text
    doc = json.loads(_cli(home, "status", "--json").stdout)
    (raw,) = [a for a in doc["assets"] if a["asset"] == "raw_articles"]
    assert raw["last_run"]["outcome"] == "failed" and "AllFeedsFailed" in raw["last_run"]["error"], raw


@pytest.mark.parametrize("serve", [True, False], ids=["serving", "no-serve"])
def test_up_json_prints_one_document_when_the_run_fails(tmp_path: Path, serve: bool) -> None:
    args = ("up", "--json", "--feeds", str(_all_bad_feeds(tmp_path)), *(() if serve else ("--no-serve",)))
    out = _cli(tmp_path / "home", *args, CRYPTOWIRE_PORT=str(free_port()))
    assert out.returncode == 1
    doc = json.loads(out.stdout)  # "Extra data" before: the summary, then a second error document; or nothing
    assert doc["exitCode"] == 1 and doc["ok"] is False
    assert "nothing to serve" in out.stderr


def test_up_json_while_serving_prints_one_document_with_the_key(tmp_path: Path, built_models: Path) -> None:
    home, feeds = one_feed_home(tmp_path, built_models)
    port = free_port()
    proc = subprocess.Popen([CLI, "up", "--json", "--feeds", str(feeds)], env=_env(home, CRYPTOWIRE_PORT=str(port)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_serving(f"http://127.0.0.1:{port}/healthz", proc, 300, "up")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    doc = json.loads(stdout)  # the one document, whole
    serving = doc["serving"]
    assert doc["ok"] is True and serving["key"].startswith("cw_live_"), doc
    assert serving["graphql"] == f"http://127.0.0.1:{port}/crypto-news/{serving['key']}"
    assert "access key (pro plan, shown once)" in stderr and "access key" not in stdout.replace('"key"', "")


def test_analysts_can_read_the_warehouse_while_the_feeds_download(tmp_path: Path) -> None:
    """The writer held the file for the whole fetch (up to the 120 s deadline on every poll); now only to read the
    feeds' validators and to merge."""
    import duckdb

    from tests.support.httpserver import LocalServer, hang, static

    home = tmp_path / "home"
    with LocalServer() as feeds:
        feeds.routes["/slow.xml"] = hang(30)  # cut by the run's 6 s deadline
        feeds.routes["/fine.xml"] = static(rss(item("Fine", "https://fine.example.com/1")), "application/rss+xml")
        feeds_file = tmp_path / "feeds.yaml"
        feeds_file.write_text(f"feeds:\n  - name: Slow\n    url: {feeds.url('/slow.xml')}\n"
                              f"  - name: Fine\n    url: {feeds.url('/fine.xml')}\n")
        proc = subprocess.Popen([CLI, "materialize", "--select", "raw_articles", "--json", "--feeds", str(feeds_file)],
                                env=_env(home, CRYPTOWIRE_FETCH_DEADLINE="6"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not feeds.hits("/slow.xml"):  # the run is downloading
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)  # README's open, query, close
        try:
            assert con.execute("SELECT count(*) FROM raw_articles").fetchall() == [(0,)]
        finally:
            con.close()
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert json.loads(stdout)["ok"] is True
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT title FROM raw_articles").fetchall() == [("Fine",)]
    finally:
        con.close()


def test_a_poll_that_finds_nothing_new_does_not_run_what_follows(tmp_path: Path, built_models: Path,
                                                                  monkeypatch) -> None:  # noqa: ANN001
    """Every scheduled poll re-ran articles, events, stories and the snapshot (a new snapshot each ten minutes,
    emptying the API's page cache), though it had found nothing new. Evaluated as the daemon's `follow_upstream`
    sensor does, on the runs' real records. A poll with something new asks for the whole chain down to the snapshot
    at one evaluation, which the sensor launches as one run (a real daemon, 2026-11-28: one run of the five, not one
    run per layer)."""
    import dagster as dg

    from tests.test_crash_recovery import _instance

    home, feeds = one_feed_home(tmp_path, built_models)
    feed = tmp_path / "one.xml"
    for name, value in _env(home).items():
        if name.startswith("CRYPTOWIRE_"):
            monkeypatch.setenv(name, value)
    from pipeline.definitions import defs

    def poll() -> None:
        out = _cli(home, "materialize", "--select", "raw_articles", "--json", "--feeds", str(feeds))
        assert out.returncode == 0, out.stderr[-2000:]

    def full_run() -> None:  # every asset, in one run
        out = _cli(home, "materialize", "--feeds", str(feeds))
        assert out.returncode == 0, out.stderr[-2000:]

    full_run()
    instance = _instance(home)
    chain = ("articles", "asset_sentiment", "stories", "prediction_events", "serving_snapshot")
    only = dg.AssetSelection.assets(*chain)  # what follows raw_articles
    try:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only)
        feed.write_text(rss(item("Bitcoin rises 2% as ETF inflows return", "https://one.example.com/1"),
                            item("Ether slides 3% as gas fees jump", "https://one.example.com/2")))
        full_run()  # new data, and articles ran with it
        after_full = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only,
                                                       cursor=first.cursor)
        assert after_full.total_requested == 0, "what follows raw_articles ran again after a full run"
        poll()  # the same feed: nothing new
        quiet = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only,
                                                  cursor=after_full.cursor)
        assert quiet.total_requested == 0, "a poll with nothing new re-ran what follows it"
        feed.write_text(rss(item("Bitcoin rises 2% as ETF inflows return", "https://one.example.com/1"),
                            item("Ether slides 3% as gas fees jump", "https://one.example.com/2"),
                            item("Solana fees fall after the upgrade", "https://one.example.com/3")))
        poll()  # one new article
        busy = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only,
                                                 cursor=quiet.cursor)
        requested = {a: busy.get_num_requested(dg.AssetKey(a)) for a in chain}
        assert all(requested.values()), f"a poll with a new article did not ask for the whole chain at once: {requested}"
    finally:
        instance.dispose()


def test_an_articles_run_that_changed_nothing_does_not_run_what_follows(tmp_path: Path, built_models: Path,
                                                                        monkeypatch) -> None:  # noqa: ANN001
    """One step down from the test above (a Dagster review, s47): a run of `articles` that scored and tagged
    nothing (the UI's "Materialize" on it, a retry) re-ran the sentiment buckets, stories, events and the snapshot,
    publishing a new set. Now `articles` gives a data version its followers run on a change of."""
    import dagster as dg

    from tests.test_crash_recovery import _instance

    home, feeds = one_feed_home(tmp_path, built_models)
    feed = tmp_path / "one.xml"
    for name, value in _env(home).items():
        if name.startswith("CRYPTOWIRE_"):
            monkeypatch.setenv(name, value)
    from pipeline.definitions import defs

    def run(select: str) -> None:
        out = _cli(home, "materialize", "--select", select, "--feeds", str(feeds))
        assert out.returncode == 0, out.stderr[-2000:]

    followers = ("asset_sentiment", "stories", "prediction_events")
    only = dg.AssetSelection.assets(*followers)
    run("crypto_assets,asset_reference_prices,raw_articles,articles,asset_sentiment,stories,prediction_events")
    instance = _instance(home)
    try:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only)
        run("articles")  # nothing new to score or tag
        quiet = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only,
                                                  cursor=first.cursor)
        requested = {a: quiet.get_num_requested(dg.AssetKey(a)) for a in followers}
        assert not any(requested.values()), f"an articles run that changed nothing re-ran {requested}"
        feed.write_text(rss(item("Bitcoin rises 2% as ETF inflows return", "https://one.example.com/1"),
                            item("Solana fees fall after the upgrade", "https://one.example.com/9")))
        run("raw_articles,articles")  # one new article scored
        busy = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only,
                                                 cursor=quiet.cursor)
        requested = {a: busy.get_num_requested(dg.AssetKey(a)) for a in followers}
        assert all(requested.values()), f"a new scored article did not run what follows articles: {requested}"
    finally:
        instance.dispose()


def test_a_step_that_failed_is_tried_again_at_the_next_tick(tmp_path: Path, built_models: Path, monkeypatch) -> None:  # noqa: ANN001
    """A downstream run that failed (an analyst held the warehouse) was never run again: the poll had changed
    nothing more, so the API served the snapshot from before until the feeds changed (an operator's review)."""
    import sys
    from datetime import UTC, datetime, timedelta

    import dagster as dg

    from tests.test_crash_recovery import _instance
    from tests.test_operator_review import HOLDER

    home, feeds = one_feed_home(tmp_path, built_models)
    feed = tmp_path / "one.xml"
    for name, value in _env(home).items():
        if name.startswith("CRYPTOWIRE_"):
            monkeypatch.setenv(name, value)
    from pipeline.definitions import defs

    out = _cli(home, "materialize", "--select", "crypto_assets,raw_articles,articles", "--feeds", str(feeds))
    assert out.returncode == 0, out.stderr[-2000:]
    feed.write_text(rss(item("Bitcoin rises 2% as ETF inflows return", "https://one.example.com/1"),
                        item("Solana fees fall after the upgrade", "https://one.example.com/3")))
    out = _cli(home, "materialize", "--select", "raw_articles", "--feeds", str(feeds))  # the poll: new data
    assert out.returncode == 0, out.stderr[-2000:]
    from pipeline.definitions import ALL_ASSETS, resources
    from warehouse.config import Settings

    instance = _instance(home)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home / "warehouse.duckdb")], env=_env(home),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        # the run the sensor starts, its step failing on the held file (WarehouseLocked after 30 s)
        failed = dg.materialize(ALL_ASSETS, selection=["articles"], resources=resources(Settings()),
                                instance=instance, raise_on_error=False)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert not failed.success
    only = dg.AssetSelection.assets("articles")
    now = datetime.now(UTC)
    try:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only,
                                                  evaluation_time=now)
        later = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=only,
                                                  evaluation_time=now + timedelta(minutes=11), cursor=first.cursor)
        assert later.get_num_requested(dg.AssetKey("articles")) == 1, "the failed articles step was not tried again"
    finally:
        instance.dispose()


def test_a_stopped_run_under_json_names_the_exit_code_it_exits_with(tmp_path: Path) -> None:
    from tests.support.httpserver import LocalServer, hang

    with LocalServer() as feeds:
        feeds.routes["/slow.xml"] = hang(60)
        feeds_file = tmp_path / "feeds.yaml"
        feeds_file.write_text(f"feeds:\n  - name: Slow\n    url: {feeds.url('/slow.xml')}\n")
        proc = subprocess.Popen([CLI, "materialize", "--json", "--feeds", str(feeds_file)], env=_env(tmp_path / "home"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not feeds.hits("/slow.xml"):  # stopped while it downloads
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=120)
    doc = json.loads(stdout)
    assert proc.returncode == 130 and doc["stopped"] is True and doc["exitCode"] == 130, (proc.returncode, doc)


def test_a_daemon_alone_on_a_new_data_home_materializes_the_roots_nothing_else_updates(tmp_path: Path) -> None:
    """With only `cryptowire daemon` running on a new data home, the asset registry and today's prices were never
    materialized (eager and on_missing skip what is missing at the first evaluation, and nothing upstream updates
    them), so `articles` and everything after it waited on them forever. Evaluated as `follow_upstream` does."""
    import warnings

    import dagster as dg

    from pipeline.definitions import build_definitions
    from warehouse.config import Settings

    defs = build_definitions(Settings(home=tmp_path / "home"))

    def requested(result: dg.AutomationResult) -> set[str]:
        return {r.key.to_user_string() for r in result.results if r.true_subset.size}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dg.instance_for_test() as instance:
            first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
            assert requested(first) == {"crypto_assets", "asset_reference_prices"}
            again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
            assert requested(again) == set(), "a root whose run failed is not requested at every tick"
            for key in ("crypto_assets", "asset_reference_prices", "raw_articles"):  # their runs, and a poll
                instance.report_runless_asset_event(dg.AssetMaterialization(key))
            after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=again.cursor)
            assert {"articles", "prediction_events", "stories", "serving_snapshot"} <= requested(after)
