"""How long the run after a SIGKILL takes, against an uninterrupted run, in the same session.

    .venv/bin/python bench/recovery.py [--rounds 3] [--points articles:scoring,events:merging,snapshot:written]

Each round, interleaved so that a noisy machine affects both alike: an uninterrupted `cryptowire materialize` of
the bundled sample in a fresh data home (the baseline), and for each crash point a fresh data home where a run is
killed there (``CRYPTOWIRE_CRASH_AT``) and the next run, the one timed, recovers it. Every data home starts with
the model's int8 graph already built. Prints JSON: median seconds, and per point the ratio to the baseline and
the difference in seconds (the issue's bound: a normal run plus at most 10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = str(Path(sys.executable).parent / "cryptowire")


def _run(home: Path, crash_at: str | None = None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env["CRYPTOWIRE_HOME"] = str(home)
    if crash_at:
        env["CRYPTOWIRE_CRASH_AT"] = crash_at
    started = time.monotonic()
    out = subprocess.run([CLI, "materialize", "--json"], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if crash_at is None and out.returncode != 0:
        raise SystemExit(f"materialize failed in {home}: {out.stderr[-2000:]}")
    if crash_at is not None and out.returncode != -9:
        raise SystemExit(f"the run was not killed at {crash_at} (exit {out.returncode})")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--points", default="articles:scoring,events:merging,snapshot:written")
    args = parser.parse_args()
    points = [p for p in args.points.split(",") if p]

    with tempfile.TemporaryDirectory(prefix="cw-recovery-") as tmp:
        models = Path(tmp) / "build"
        _run(models)  # builds the int8 graph once
        normal: list[float] = []
        rerun: dict[str, list[float]] = {p: [] for p in points}
        for r in range(args.rounds):
            home = Path(tmp) / f"normal-{r}"
            shutil.copytree(models / "models", home / "models")
            normal.append(_run(home))
            for p in points:
                home = Path(tmp) / f"{p.replace(':', '-')}-{r}"
                shutil.copytree(models / "models", home / "models")
                _run(home, crash_at=p)
                rerun[p].append(_run(home))
    base = statistics.median(normal)
    print(json.dumps({
        "bench": "recovery",
        "rounds": args.rounds,
        "normal_run_s": round(base, 2),
        "rerun_after_kill": {
            p: {"median_s": round(statistics.median(v), 2), "ratio": round(statistics.median(v) / base, 2),
                "extra_s": round(statistics.median(v) - base, 2)}
            for p, v in rerun.items()
        },
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "load_avg_end": os.getloadavg()},
    }, indent=2))


if __name__ == "__main__":
    main()
