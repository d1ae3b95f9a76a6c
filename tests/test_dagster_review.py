"""From a data engineer's review of the Dagster side (s47): the UI and the CLI on one data home.

- a second `cryptowire dev` on a port already taken printed "address already in use", yet kept its daemon running
  beside the first one's (two daemons on one instance) and never exited.
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
