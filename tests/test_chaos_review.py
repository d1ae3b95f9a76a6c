"""From an operator's review that broke a data home the ways machines do (s47): damaged bytes, full and read-only
disks, damaged databases. Real DuckDB and SQLite files, the real CLI in processes of its own, no mocks.

- a ``snapshots/CURRENT`` holding bytes that are not UTF-8 stopped `doctor`, `materialize` and `up` with a
  UnicodeDecodeError traceback, though `status` sent the user to `doctor`;
- a CURRENT naming a part's file (not a set's manifest) was "nothing to repair" for `doctor`, and not servable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.newsdata import Data, build, make_articles, make_events, republish
from warehouse.published import POINTER, current_snapshot
from warehouse.repair import repair_snapshots

CLI = str(Path(sys.executable).parent / "cryptowire")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {**env, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false", "CRYPTOWIRE_PRICE_SOURCE_URL": ""}


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], env=_env(home), capture_output=True, text=True, timeout=300)


def test_a_current_of_damaged_bytes_is_repointed_by_doctor(tmp_path: Path) -> None:
    build(tmp_path, Data(make_articles(30, 3), make_events(4)), parts=True)
    newest = republish(tmp_path)
    pointer = tmp_path / "snapshots" / POINTER
    pointer.write_bytes(b"\xff\xfe\x00garbage\n")
    check = _run(tmp_path, "doctor", "--check", "--json")
    assert check.returncode == 1, check.stderr
    assert "not the name of a snapshot" in json.dumps(json.loads(check.stdout)), check.stdout
    fixed = _run(tmp_path, "doctor")
    assert fixed.returncode == 0, fixed.stderr
    assert "Traceback" not in fixed.stderr and newest.name in fixed.stdout, fixed.stdout
    assert current_snapshot(tmp_path / "snapshots") == newest
    assert _run(tmp_path, "doctor", "--check").returncode == 0


def test_a_current_naming_a_part_is_repointed_at_the_newest_set(tmp_path: Path) -> None:
    build(tmp_path, Data(make_articles(30, 3), make_events(4)), parts=True)
    newest = republish(tmp_path)
    snapshots = tmp_path / "snapshots"
    part = next(p for p in sorted(snapshots.glob("part-*.duckdb")))
    (snapshots / POINTER).write_text(part.name + "\n")
    (line,) = repair_snapshots(snapshots, fix=False)
    assert "not the name of a snapshot" in line and newest.name in line
    repair_snapshots(snapshots)
    assert current_snapshot(snapshots) == newest
    assert repair_snapshots(snapshots) == []
