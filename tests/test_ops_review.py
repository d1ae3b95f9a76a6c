"""From the operations review (2026-11-26): what `materialize --json` and `up --json` print, on real runs.

- a failed run's `--json` summary has the keys every `--json` error has (`error`, `exitCode`);
- `up --json` prints exactly one JSON document on stdout: the summary when the run failed (no second document),
  and, when it serves, the summary with a `serving` part holding the key shown once; the lines for people go to
  stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.apiserver import free_port
from tests.support.feedgen import item, rss
from tests.test_operator_review import CLI, _cli, _env


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


def test_up_json_prints_one_document_when_the_run_fails(tmp_path: Path) -> None:
    out = _cli(tmp_path / "home", "up", "--no-serve", "--json", "--feeds", str(_all_bad_feeds(tmp_path)))
    assert out.returncode == 1
    doc = json.loads(out.stdout)  # "Extra data" before: the summary, then a second error document
    assert doc["exitCode"] == 1 and doc["ok"] is False
    assert "nothing to serve" in out.stderr


def test_up_json_while_serving_prints_one_document_with_the_key(tmp_path: Path, built_models: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(built_models, home / "models")
    (tmp_path / "one.xml").write_text(rss(item("Bitcoin rises 2% as ETF inflows return", "https://one.example.com/1")))
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text("feeds:\n  - name: One\n    url: one.xml\n")
    port = free_port()
    proc = subprocess.Popen([CLI, "up", "--json", "--feeds", str(feeds)], env=_env(home, CRYPTOWIRE_PORT=str(port)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # serving once /healthz answers
            assert proc.poll() is None and time.monotonic() < deadline, "up stopped or never served"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    doc = json.loads(stdout)  # the one document, whole
    serving = doc["serving"]
    assert doc["ok"] is True and serving["key"].startswith("cw_live_"), doc
    assert serving["graphql"] == f"http://127.0.0.1:{port}/crypto-news/{serving['key']}"
    assert "access key (pro plan, shown once)" in stderr and "access key" not in stdout.replace('"key"', "")
