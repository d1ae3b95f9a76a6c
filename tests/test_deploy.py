"""deploy/: the process list names commands that exist, and the Dagster daemon and webserver it starts share one
instance on Postgres (real processes, a real Postgres)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.support.servers import free_port

PROJECT = Path(__file__).resolve().parent.parent
PROCFILE = PROJECT / "deploy" / "Procfile"


def _procfile() -> dict[str, str]:
    lines = [ln for ln in PROCFILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return dict(ln.split(": ", 1) for ln in lines)


def test_the_process_list_names_real_commands() -> None:
    from typer.main import get_command

    from pipeline.cli import app

    commands = set(get_command(app).commands)  # type: ignore[attr-defined]
    procs = _procfile()
    assert {"postgres", "redis", "daemon", "webserver", "worker", "api"} <= set(procs)
    for name, line in procs.items():
        argv = line.split()
        if argv[0] == "cryptowire":
            assert argv[1] in commands, f"{name}: no command `cryptowire {argv[1]}`"
    for key in re.findall(r"^(CRYPTOWIRE_\w+)=", (PROJECT / "deploy" / "cryptowire.env").read_text(), re.M):
        from warehouse.config import Settings

        assert key.removeprefix("CRYPTOWIRE_").lower() in Settings.model_fields, key


@pytest.mark.slow
def test_daemon_and_webserver_share_one_instance_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(PROJECT), CRYPTOWIRE_HOME=str(tmp_path / "home"), CRYPTOWIRE_DATABASE_URL=postgres_url,
               CRYPTOWIRE_PRICE_SOURCE_URL="")
    port = free_port()
    logs = {name: (tmp_path / f"{name}.log").open("wb") for name in ("daemon", "webserver")}
    procs = {
        "daemon": subprocess.Popen([sys.executable, "-m", "pipeline.cli", "daemon"], env=env, cwd=PROJECT,
                                   stdout=logs["daemon"], stderr=subprocess.STDOUT),
        "webserver": subprocess.Popen([sys.executable, "-m", "pipeline.cli", "webserver", "--port", str(port)],
                                      env=env, cwd=PROJECT, stdout=logs["webserver"], stderr=subprocess.STDOUT),
    }
    try:
        deadline = time.monotonic() + 240
        heartbeats, ui = 0, False
        while time.monotonic() < deadline and not (heartbeats and ui):
            for name, p in procs.items():
                assert p.poll() is None, f"{name} exited: {(tmp_path / f'{name}.log').read_text()[-2000:]}"
            try:
                ui = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2).status_code == 200
            except httpx.HTTPError:
                ui = False
            try:
                with psycopg.connect(postgres_url) as conn:
                    heartbeats = conn.execute("SELECT count(*) FROM daemon_heartbeats").fetchone()[0]  # type: ignore[index]
            except psycopg.errors.UndefinedTable:
                heartbeats = 0
            time.sleep(1)
        assert ui, "the webserver did not answer /server_info"
        assert heartbeats, "the daemon wrote no heartbeat into Postgres"
        # the webserver reads the instance the daemon writes: the daemon's health as the UI's GraphQL sees it
        q = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"
        got = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": q}, timeout=30).json()
        statuses = got["data"]["instance"]["daemonHealth"]["allDaemonStatuses"]
        assert any(s["daemonType"] == "SCHEDULER" and s["healthy"] for s in statuses), statuses
    finally:
        for p in procs.values():  # exec'd: the signal reaches Dagster itself, which stops its children
            p.send_signal(signal.SIGTERM)
        for name, p in procs.items():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                pytest.fail(f"{name} did not stop on SIGTERM")
        for f in logs.values():
            f.close()
