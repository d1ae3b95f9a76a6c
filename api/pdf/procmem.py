"""Memory of a process tree, read from /proc (Linux). Used for the pool's restart threshold and the benchmark."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _ppid(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may contain spaces: split after the last ')'
    return int(stat.rsplit(")", 1)[1].split()[1])


def _children(pid: int) -> list[int] | None:
    """Direct children, from /proc/PID/task/*/children; None where this kernel has no such files."""
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return []  # the process is gone
    out: list[int] = []
    for task in tasks:
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:
            if task.exists():
                return None
        except OSError:
            continue  # the thread ended meanwhile
    return out


def descendants(root: int) -> list[int]:
    """``root`` and all processes below it."""
    out, todo = [], [root]
    while todo:  # walk down from the root: a few small reads instead of every process's stat
        pid = todo.pop()
        kids = _children(pid)
        if kids is None:
            return _descendants_by_scan(root)
        out.append(pid)
        todo.extend(kids)
    return out


def _descendants_by_scan(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            parent = _ppid(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def find_by_arg(marker: str) -> int | None:
    """The pid of the browser process whose command line holds ``marker`` as a whole argument.

    A launcher script that runs the binary without ``exec`` (Debian's chromium-headless-shell) carries the same
    arguments: of the matching processes, the one whose parent also matches is the browser itself.
    """
    want = marker.encode()
    found: dict[int, int | None] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in args:
            found[int(entry.name)] = _ppid(int(entry.name))
    for pid, parent in found.items():
        if parent in found:
            return pid
    return next(iter(found), None)


def memory_kb(pid: int) -> dict[str, int]:
    """RSS and PSS (kB) of one process; PSS shares pages fairly between processes, RSS counts them in each."""
    rss = pss = 0
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        try:
            rss = int((PROC / str(pid) / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
        except OSError:
            return {"rss_kb": 0, "pss_kb": 0}
        pss = rss
    return {"rss_kb": rss, "pss_kb": pss}


def tree_memory_mb(root: int) -> dict[str, float]:
    """Summed RSS and PSS (MB) of ``root`` and its descendants, and how many processes that is."""
    pids = descendants(root)
    rss = pss = 0
    for pid in pids:
        m = memory_kb(pid)
        rss += m["rss_kb"]
        pss += m["pss_kb"]
    return {"rss_mb": round(rss / 1024, 1), "pss_mb": round(pss / 1024, 1), "processes": len(pids)}
