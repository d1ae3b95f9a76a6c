"""HTML-to-PDF speed: the warm-pool service vs a naive service that launches Chromium per request.

Pages come from a local HTTP server: ``simple`` (a short article) and ``heavy`` (8 images, two web fonts served
locally, a long table). The service (``api.app.create_app`` under uvicorn, in its own process) is driven over
HTTP at concurrency 1, 2 and 4; the baseline, in the same run, runs ``chromium --headless --print-to-pdf`` once
per request (its own profile directory each, as concurrent instances need); so does Debian's
``chromium-headless-shell``, the service's default binary, when installed (``baseline_headless_shell``: context,
not the goal). Reported per case: PDFs/s, p50/p99
latency, and CPU seconds per PDF (all processes involved) — the CPU figure hardly moves when other processes
compete for the cores, PDFs/s and latency do. With ``--rss`` the service's memory (RSS and PSS summed over its
process tree: Python, the Playwright driver, Chromium) is read after 50 and after ``--rss-total`` conversions.

    .venv/bin/python bench/pdf.py [--requests 40] [--baseline-requests 12] [--concurrency 1,2,4] [--rss]
                                  [--rss-total 500] [--out result.json]

Goals (issue 8): simple page at concurrency 2: throughput >= 4x the baseline, p99 <= 1.5 s; RSS after 500
conversions within 20 % of RSS after 50.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this folder leads sys.path, and bench/graphql.py would shadow the graphql package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from api.pdf import procmem  # noqa: E402
from tests.support.httpserver import LocalServer, static  # noqa: E402

# The baseline is ``chromium --headless``; the same naive launch of Debian's headless shell (the binary the
# service uses by default) is measured too, so that the pool's gain is not credited to the lighter binary alone.
CHROMIUM = "/usr/bin/chromium"
HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
FONTS = Path("/usr/share/fonts/truetype/dejavu")
SERVER_CODE = """
import uvicorn
from api.access import StaticKeys
from api.app import create_app
uvicorn.run(create_app(access=StaticKeys(["bench"])), host="127.0.0.1", port={port}, log_level="warning")
"""


# --- pages ----------------------------------------------------------------------------------------------------
def png(width: int, height: int, seed: int) -> bytes:
    """A deterministic RGB picture (smooth bands plus noise, so it neither vanishes nor explodes compressed)."""
    rnd = random.Random(seed)
    rows = []
    for y in range(height):
        row = bytearray([0])
        for x in range(width):
            n = rnd.randrange(32)
            row += bytes(((x * 255 // width + n) % 256, (y * 255 // height + n) % 256, (seed * 40 + n) % 256))
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 6)) + \
        chunk(b"IEND", b"")


SIMPLE = """<!doctype html><html><head><meta charset="utf-8"><title>Bitcoin steady</title>
<style>body{font-family:sans-serif;margin:2cm} h1{color:#246}</style></head><body>
<h1>Bitcoin holds above 60k as ETF inflows continue</h1>
<p>Markets were calm on Tuesday. Analysts pointed to steady inflows and low volatility.</p>
<p>Ethereum traded sideways while Solana gained 3 percent.</p></body></html>"""


def heavy_page() -> str:
    rows = "".join(
        f"<tr><td>{i}</td><td>Asset {i}</td><td>{(i * 37) % 1000 / 10:.1f}</td><td>note {i * 7}</td></tr>"
        for i in range(300)
    )
    images = "".join(f'<img src="/img/{i}.png" width="320">' for i in range(8))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Heavy</title><style>
@font-face {{ font-family: "Bench Sans"; src: url("/fonts/sans.ttf") format("truetype"); }}
@font-face {{ font-family: "Bench Sans"; font-weight: bold; src: url("/fonts/sans-bold.ttf") format("truetype"); }}
body {{ font-family: "Bench Sans"; margin: 1cm; }} img {{ margin: 4px; }}
table {{ border-collapse: collapse; width: 100%; }} td {{ border: 1px solid #999; padding: 2px 6px; }}
</style></head><body><h1>Market report with pictures and web fonts</h1>{images}
<table>{rows}</table></body></html>"""


def page_server() -> LocalServer:
    srv = LocalServer()
    srv.routes["/simple"] = static(SIMPLE)
    srv.routes["/heavy"] = static(heavy_page())
    for i in range(8):
        srv.routes[f"/img/{i}.png"] = static(png(480, 300, i), "image/png")
    srv.routes["/fonts/sans.ttf"] = static((FONTS / "DejaVuSans.ttf").read_bytes(), "font/ttf")
    srv.routes["/fonts/sans-bold.ttf"] = static((FONTS / "DejaVuSans-Bold.ttf").read_bytes(), "font/ttf")
    return srv.start()


# --- measuring ------------------------------------------------------------------------------------------------
def tree_cpu(root: int) -> float:
    """CPU seconds used by ``root`` and everything below it, including children already reaped."""
    total = 0
    for pid in procmem.descendants(root):
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return total / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def become_subreaper() -> None:
    """Chromium exits before its renderer/GPU processes do (the baseline's, and a retired pool browser's); as a
    subreaper this process inherits and reaps them, so their CPU time lands in RUSAGE_CHILDREN (without this the
    baseline looked ~40 % cheaper and a service phase with a browser restart could come out negative)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap_orphans(keep: set[int], timeout: float = 15.0) -> None:
    """Wait for (and reap) every child except ``keep``: the orphans Chromium left behind."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = [p for p in procmem.descendants(me) if p != me and p not in keep and procmem_parent(p) == me]
        if not kids:
            return
        for pid in kids:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.05)


def procmem_parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def run_load(job: Callable[[], None], requests: int, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one(_: int) -> None:
        started = time.perf_counter()
        try:
            job()
        except Exception as exc:
            with lock:
                errors.append(str(exc)[:200])
            return
        with lock:
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(requests)))
    wall = time.perf_counter() - started
    lat = sorted(latencies)
    return {
        "requests": requests,
        "ok": len(lat),
        "errors": len(errors),
        "error_samples": errors[:3],
        "pdfs_per_s": round(len(lat) / wall, 3),
        "p50_s": round(statistics.median(lat), 3) if lat else None,
        "p99_s": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 3) if lat else None,
        "wall_s": round(wall, 2),
    }


class Service:
    def __init__(self, allow: str, home: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_ALLOW_HOSTS": json.dumps([allow])}
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER_CODE.format(port=self.port)], cwd=ROOT, env=env)
        self.client = threading.local()
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the PDF service did not start")
            time.sleep(0.2)

    def convert(self, url: str) -> None:
        client = getattr(self.client, "c", None)
        if client is None:
            client = self.client.c = httpx.Client(timeout=120)
        r = client.get(f"http://127.0.0.1:{self.port}/api/html-to-pdf/bench", params={"url": url})
        if r.status_code != 200 or not r.content.startswith(b"%PDF-"):
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:150]}")

    def memory(self) -> dict[str, float]:
        return procmem.tree_memory_mb(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def baseline_convert(url: str, binary: str = CHROMIUM) -> None:
    """What a naive service does: one Chromium launch per request, with its own profile."""
    with tempfile.TemporaryDirectory(prefix="pdfbase-") as tmp:
        out = Path(tmp) / "out.pdf"
        subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp}/profile", "--no-pdf-header-footer", f"--print-to-pdf={out}", url],
            capture_output=True, timeout=120, check=False,
        )
        if not out.exists() or not out.read_bytes().startswith(b"%PDF-"):
            raise RuntimeError("chromium produced no PDF")


def machine() -> dict[str, Any]:
    from importlib.metadata import version as package_version

    from warehouse.config import Settings

    service = str(Settings().chromium_path)

    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "chromium": _version(CHROMIUM),
        "service_chromium": f"{service} ({_version(service)})",
        "playwright": package_version("playwright"),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _version(binary: str) -> str:
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "not installed"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40, help="service requests per page and concurrency")
    ap.add_argument("--baseline-requests", type=int, default=12, help="baseline requests per page and concurrency")
    ap.add_argument("--concurrency", default="1,2,4", help="comma-separated concurrency levels")
    ap.add_argument("--pages", default="simple,heavy", help="comma-separated pages: simple, heavy")
    ap.add_argument("--rss", action="store_true", help="also read the service's memory after 50 and N conversions")
    ap.add_argument("--rss-total", type=int, default=500, help="conversions for the second memory reading")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    names = [n for n in args.pages.split(",") if n]
    if not names or set(names) - {"simple", "heavy"}:
        ap.error("--pages takes simple, heavy or both (comma-separated)")

    result: dict[str, Any] = {"machine": machine(), "service": {}, "baseline": {}}
    baselines = {"baseline": CHROMIUM}
    if Path(HEADLESS_SHELL).exists():
        baselines["baseline_headless_shell"] = HEADLESS_SHELL
        result["baseline_headless_shell"] = {}
    become_subreaper()
    pages = page_server()
    home = Path(tempfile.mkdtemp(prefix="pdfbench-"))
    service = Service(f"127.0.0.1:{pages.port}", home)
    try:
        for _ in range(3):  # warm: browser launched, spares made
            service.convert(pages.url("/simple"))
        for name in names:
            url = pages.url(f"/{name}")
            service.convert(url)
            for c in levels:
                cpu0 = tree_cpu(service.proc.pid) + children_cpu()
                stats = run_load(lambda u=url: service.convert(u), args.requests, c)
                reap_orphans(keep={service.proc.pid}, timeout=2)  # a retired browser's leftovers
                cpu = tree_cpu(service.proc.pid) + children_cpu() - cpu0
                stats["cpu_s_per_pdf"] = round(cpu / max(1, stats["ok"]), 3)
                result["service"][f"{name}_c{c}"] = stats
                print(f"service  {name:6s} c={c}: {stats}", file=sys.stderr)
        for label, binary in baselines.items():
            for name in names:
                url = pages.url(f"/{name}")
                for c in levels:
                    cpu0 = children_cpu()
                    stats = run_load(lambda u=url, b=binary: baseline_convert(u, b), args.baseline_requests, c)
                    reap_orphans(keep={service.proc.pid})
                    stats["cpu_s_per_pdf"] = round((children_cpu() - cpu0) / max(1, stats["ok"]), 3)
                    result[label][f"{name}_c{c}"] = stats
                    print(f"{label} {name:6s} c={c}: {stats}", file=sys.stderr)
    finally:
        service.stop()
    try:
        if args.rss:  # a fresh service, so that conversions are counted from its start
            fresh = Service(f"127.0.0.1:{pages.port}", home)
            try:
                result["memory"] = memory_run(fresh, pages.url("/simple"), args.rss_total)
            finally:
                fresh.stop()
    finally:
        pages.stop()
        shutil.rmtree(home, ignore_errors=True)

    goals: dict[str, Any] = {}
    if 2 in levels:
        s, b = result["service"]["simple_c2"], result["baseline"]["simple_c2"]
        goals["simple_c2_throughput_vs_baseline"] = round(s["pdfs_per_s"] / b["pdfs_per_s"], 2) if b["pdfs_per_s"] else None
        goals["simple_c2_cpu_per_pdf_baseline_over_service"] = round(b["cpu_s_per_pdf"] / s["cpu_s_per_pdf"], 2)
        goals["simple_c2_p99_s"] = s["p99_s"]
        goals["throughput_goal_met (>= 4x)"] = bool(goals["simple_c2_throughput_vs_baseline"] and
                                                   goals["simple_c2_throughput_vs_baseline"] >= 4)
        goals["p99_goal_met (<= 1.5 s)"] = s["p99_s"] is not None and s["p99_s"] <= 1.5
        shell = result.get("baseline_headless_shell", {}).get("simple_c2")
        if shell and shell["pdfs_per_s"]:  # context, not the goal: the naive service on the lighter binary
            goals["simple_c2_throughput_vs_headless_shell_baseline"] = round(s["pdfs_per_s"] / shell["pdfs_per_s"], 2)
    if "memory" in result:
        goals["rss_growth"] = result["memory"]["rss_growth"]
        goals["rss_goal_met (<= 20 %)"] = result["memory"]["rss_growth"] <= 0.20
    result["goals"] = goals
    result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


def memory_run(service: Service, url: str, total: int) -> dict[str, Any]:
    """Memory of a freshly started service after 50 and after ``total`` conversions (simple page, concurrency 2)."""
    readings: dict[str, Any] = {}
    done = 0
    for target in (50, total):
        stats = run_load(lambda: service.convert(url), target - done, 2)
        done = target
        time.sleep(2)  # let retired browsers finish closing
        readings[f"after_{target}"] = {**service.memory(), "errors": stats["errors"],
                                       "pdfs_per_s": stats["pdfs_per_s"]}
        print(f"memory after {target}: {readings[f'after_{target}']}", file=sys.stderr)
    a, b = readings["after_50"]["rss_mb"], readings[f"after_{total}"]["rss_mb"]
    readings["rss_growth"] = round((b - a) / a, 3)
    readings["pss_growth"] = round(
        (readings[f"after_{total}"]["pss_mb"] - readings["after_50"]["pss_mb"]) / readings["after_50"]["pss_mb"], 3
    )
    return readings


if __name__ == "__main__":
    main()
