"""``GET /metrics`` of `cryptowire serve --workers 2`: every scrape reports the whole server (counters summed over
the workers), totals never go backwards, and a worker killed with kill -9 (uvicorn starts another) keeps its
counts. Real processes on a real data home; the multiprocess directory's sweep at a server's start."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.pdf.procmem import descendants
from tests.support.newsdata import Data, build, make_articles, make_events
from tests.support.procs import cmdline, running, wait_for
from tests.support.servers import free_port
from warehouse.config import Settings

PROJECT = Path(__file__).resolve().parent.parent
NEWS_QUERY = "query { cryptoNews(first: 2) { edges { node { title } } } }"
NEWS_ROUTE = {"route": "/crypto-news/{accessKey}", "method": "POST"}
REQUESTS = 30
SCRAPES = 20
HANGING = 10  # requests left in progress: the kernel spreads them over both workers

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def counters(samples: Samples) -> Samples:
    """The samples that must never decrease: counters' totals and histograms' buckets, counts and sums."""
    return {k: v for k, v in samples.items() if k[0].endswith(("_total", "_bucket", "_count", "_sum"))}


class Server:
    """`cryptowire serve --workers 2` on ``home``, in a session of its own."""

    def __init__(self, home: Path) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "PROMETHEUS_"))}
        env.update(CRYPTOWIRE_HOME=str(home), CRYPTOWIRE_PDF_PREWARM="false")
        self.log = home / f"serve-{self.port}.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline.cli", "serve", "--port", str(self.port), "--workers", "2"],
                cwd=PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        assert wait_for(lambda: len(self.workers()) == 2 or self.proc.poll() is not None, 60), self.output()
        assert wait_for(self._answers, 30), self.output()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _answers(self) -> bool:
        try:
            return httpx.get(self.url("/healthz"), timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def workers(self) -> list[int]:
        """uvicorn's worker processes (multiprocessing's spawned children; not its resource tracker)."""
        return [pid for pid in descendants(self.proc.pid)[1:]
                if running(pid) and any("spawn_main" in a for a in cmdline(pid))]

    def scrape(self) -> Samples:
        # A new connection each time: the kernel hands it to either worker.
        r = httpx.get(self.url("/metrics"), timeout=30)
        assert r.status_code == 200, r.text
        return parse(r.text)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    build(home, Data(make_articles(30, 5), make_events(5)))
    return home


def new_key(home: Path) -> str:
    from accounts import SqliteStore

    store = SqliteStore(Settings(home=home).platform_db)
    try:
        return store.create_key("metrics test", "pro", ["news"])[1]
    finally:
        store.close()


def hanging_requests(server: Server, key: str, n: int) -> list[socket.socket]:
    """``n`` requests in progress: headers sent, the body never (each on a connection of its own)."""
    head = (f"POST /crypto-news/{key} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n{").encode()
    conns = []
    for _ in range(n):
        conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        conn.sendall(head)
        conns.append(conn)
    return conns


def still_open(conn: socket.socket) -> bool:
    """Whether the server end of ``conn`` is still there (a killed worker's connections are closed by the kernel)."""
    conn.setblocking(False)
    try:
        return conn.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def scrape_after(server: Server, previous: Samples) -> Samples:
    """A scrape, checked against the one before it: no counter went backwards."""
    now = server.scrape()
    for k, v in counters(previous).items():
        assert now.get(k, 0.0) >= v, f"{k} went from {v} back to {now.get(k, 0.0)}"
    return now


@pytest.fixture
def server(home: Path) -> Iterator[Server]:
    srv = Server(home)
    try:
        yield srv
    finally:
        srv.stop()


def test_every_scrape_reports_the_whole_server_and_a_killed_worker_keeps_its_counts(home: Path,
                                                                                     server: Server) -> None:
    key, other_key = new_key(home), new_key(home)
    charged, answered = 0, Counter[int]()
    for _ in range(REQUESTS):  # one connection per request: both workers answer some
        r = httpx.post(server.url(f"/crypto-news/{key}"), json={"query": NEWS_QUERY}, timeout=30)
        assert r.status_code in (200, 429), r.text  # past the plan's 10 requests per second per worker: 429
        answered[r.status_code] += 1
        charged += int(r.headers.get("x-cu-cost", "0"))
    assert answered[200] >= 10 and charged > 0, answered

    def whole(samples: Samples) -> None:
        for status, n in answered.items():
            assert value(samples, "cryptowire_http_requests_total", **NEWS_ROUTE, status=str(status)) == n
        assert value(samples, "cryptowire_cu_charged_total", api="news") == charged
        assert value(samples, "cryptowire_http_request_duration_seconds_count", **NEWS_ROUTE) == REQUESTS
        assert value(samples, "cryptowire_snapshot_loaded") == 1
        assert not any(k in v for _, labels in samples for _, v in labels for k in (key, other_key))

    last: Samples = {}
    for _ in range(SCRAPES):
        last = scrape_after(server, last)
        whole(last)

    # Requests in progress are summed over the live workers: the hanging ones, and the scrape itself.
    hanging = hanging_requests(server, other_key, HANGING)  # a key of its own: a rate limit of its own
    try:
        assert wait_for(lambda: value(server.scrape(), "cryptowire_http_requests_in_progress") == HANGING + 1, 10)
        for _ in range(SCRAPES // 2):
            last = scrape_after(server, last)
            whole(last)
            assert value(last, "cryptowire_http_requests_in_progress") == HANGING + 1

        before = server.workers()
        assert len(before) == 2, before
        victim = before[0]
        os.kill(victim, signal.SIGKILL)
        assert wait_for(lambda: len(server.workers()) == 2 and victim not in server.workers(), 30), server.output()
        assert wait_for(server._answers, 30), server.output()
        alive = sum(still_open(c) for c in hanging)  # the killed worker's are gone (closed by the kernel)

        for _ in range(SCRAPES):
            last = scrape_after(server, last)
            whole(last)
            assert value(last, "cryptowire_http_requests_in_progress") == alive + 1
    finally:
        for conn in hanging:
            conn.close()
    # The killed worker's "live" gauges (requests in progress, PDF queue) are no longer part of the sums.
    run = Settings(home=home).metrics_dir
    assert not list(run.glob(f"*/gauge_live*_{victim}.db")), sorted(p.name for p in run.glob("*/*"))


def test_a_scrape_while_a_worker_creates_its_files_is_answered(home: Path, server: Server) -> None:
    """CI run 38: right after a killed worker was replaced, a scrape answered 500: the new worker's value file was
    being created (shorter than its header) when the other worker read every file. Such files are skipped."""
    key = new_key(home)
    for _ in range(5):
        assert httpx.post(server.url(f"/crypto-news/{key}"), json={"query": NEWS_QUERY}, timeout=30).status_code == 200
    before = server.scrape()
    shared = next(Settings(home=home).metrics_dir.rglob("worker-*.lock")).parent
    (shared / "counter_999999.db").write_bytes(b"")  # created, not yet sized
    (shared / "histogram_999998.db").write_bytes(b"\x10\x00")  # its header half written
    for _ in range(6):  # each worker answers some
        now = server.scrape()
        assert value(now, "cryptowire_http_requests_total", **NEWS_ROUTE, status="200") == \
            value(before, "cryptowire_http_requests_total", **NEWS_ROUTE, status="200")


def test_a_stopped_server_leaves_no_directory_and_a_killed_ones_is_swept(home: Path) -> None:
    root = Settings(home=home).metrics_dir
    # A killed server's directory (its lock free) and a live one's (its lock held) on the same data home; and one
    # whose server was killed but whose worker still runs (its worker lock held): kept too.
    root.mkdir(parents=True)
    for name in ("1-dead", "2-live", "3-orphan"):
        (root / name).mkdir()
        (root / name / "counter_1.db").write_bytes(b"")
        (root / f"{name}.lock").touch()
    (root / "3-orphan" / "worker-1.lock").touch()
    (root / "4-cut-short").mkdir()  # a sweep cut short removed its lock: its server is gone
    held = []
    for lock in (root / "2-live.lock", root / "3-orphan" / "worker-1.lock"):
        fd = os.open(lock, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)  # flock is per open file: the server's own open does not get it
        held.append(fd)
    kept = {"2-live", "2-live.lock", "3-orphan", "3-orphan.lock"}
    try:
        srv = Server(home)
        try:
            names = {p.name for p in root.iterdir()}
            assert kept <= names and (root / "2-live" / "counter_1.db").exists(), names
            mine = names - kept
            assert len(mine) == 2, names  # this server's directory and its lock, nothing else
            assert srv.scrape()  # served through that directory
        finally:
            srv.stop()
        assert wait_for(lambda: {p.name for p in root.iterdir()} == kept, 5), sorted(root.iterdir())
    finally:
        for fd in held:
            os.close(fd)
