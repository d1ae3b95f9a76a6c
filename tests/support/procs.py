"""Looking at real processes from tests: whether one still runs, its arguments, waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed child nobody reaped yet is dead for the test's purposes)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def wait_for(condition: Callable[[], object], seconds: float) -> bool:
    """Polls ``condition`` every 50 ms; whether it held within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
