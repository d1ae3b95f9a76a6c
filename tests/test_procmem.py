"""The process-tree walk behind the PDF pool's memory threshold and the benchmark's RSS figures."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from api.pdf import procmem


def test_descendants_finds_a_real_tree_and_agrees_with_a_full_scan() -> None:
    # bash -> two sleeps, and one of them behind a nested bash: three levels
    proc = subprocess.Popen(["bash", "-c", "sleep 30 & bash -c 'sleep 30 & wait' & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(procmem.descendants(proc.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = procmem.descendants(proc.pid)
        assert found[0] == proc.pid
        assert len(found) == 4, found
        assert sorted(found) == sorted(procmem._descendants_by_scan(proc.pid))
        assert proc.pid in procmem.descendants(os.getpid())
        memory = procmem.tree_memory_mb(proc.pid)
        assert memory["processes"] == 4 and memory["rss_mb"] > 0
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole tree: it has its own session
        proc.wait()


def test_a_process_that_is_gone_has_no_children() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert procmem.descendants(proc.pid) == [proc.pid]
    assert procmem.tree_memory_mb(proc.pid)["rss_mb"] == 0
