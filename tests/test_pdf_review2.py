"""From the second PDF review, on real servers and real Chromium: egress connections that outlive their render,
pages that fire thousands of requests, requests refused before they fetch, a forced stop mid-render, origins that
redirect badly or answer without content, and a server without its browser."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.access import StaticKeys
from api.app import create_app
from api.pdf import egress, render
from api.pdf.filename import content_disposition
from api.pdf.params import parse_params
from api.pdf.ssrf import Policy
from tests.support.apiserver import ApiServer, PdfEnv, free_port
from tests.support.httpserver import LocalServer, Reply, RequestHandler, static
from tests.support.procs import wait_for
from warehouse.config import Settings

PDF = "/api/html-to-pdf/k"
PROJECT = Path(__file__).resolve().parent.parent


class SilentServer:
    """Accepts TCP connections and never answers; knows how many its clients still hold open."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.conns: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setblocking(False)
            with self._lock:
                self.conns.append(conn)

    def open_connections(self) -> int:
        """Connections the other side has not closed yet (reading EOF means it closed)."""
        with self._lock:
            alive = []
            for c in self.conns:
                if self._still_open(c):
                    alive.append(c)
                else:
                    c.close()
            self.conns = alive
            return len(alive)

    @staticmethod
    def _still_open(conn: socket.socket) -> bool:
        try:
            while conn.recv(65536):  # what the client sent (a request), never answered
                pass
            return False  # end of stream: the client closed
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()
        with self._lock:
            for c in self.conns:
                c.close()


def delayed(seconds: float, body: str) -> Any:
    def handler(req: RequestHandler) -> Reply:
        time.sleep(seconds)
        return Reply(200, body.encode(), {"Content-Type": "text/html"})

    return handler


@dataclass
class Env(PdfEnv):
    page: LocalServer
    silent: SilentServer


def silent_images(port: int, n: int) -> str:
    return "<h1>IMAGES</h1>" + "".join(f"<img src='http://127.0.0.1:{port}/i{i}.png'>" for i in range(n))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    silent = SilentServer()
    blocked_port = free_port()  # not allowed: every request to it is refused by the interceptor
    with LocalServer() as page:
        page.routes["/hello"] = static("<h1>HELLO</h1>")
        page.routes["/silent-images"] = static(silent_images(silent.port, 20))
        page.routes["/flood"] = static(
            "<h1>FLOOD</h1><script>for (let i = 0; i < 30000; i++) "
            f"new Image().src = 'http://127.0.0.1:{blocked_port}/f' + i;</script>"
        )
        page.routes["/slow-html"] = delayed(1.0, "<h1>SLOW HTML</h1>")
        page.routes["/no-content"] = static(b"", status=204)
        page.routes["/not-modified"] = static(b"", status=304)
        for i, location in enumerate(REDIRECTS):
            page.routes[f"/redirect{i}"] = lambda req, loc=location: Reply(302, b"", {"Location": loc})
        settings = Settings(
            home=tmp_path_factory.mktemp("pdfhome"),
            pdf_allow_hosts=[f"127.0.0.1:{page.port}", f"127.0.0.1:{silent.port}"],
            pdf_concurrency=1,
            pdf_queue=2,
            pdf_prewarm=True,
        )
        app = create_app(settings, access=StaticKeys(["k"]))
        try:
            with ApiServer(app) as api:
                yield Env(api=api, app=app, page=page, silent=silent)
        finally:
            silent.close()



def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# --- 1. the egress proxy closes what Chromium gave up on -------------------------------------------------------


def test_connections_to_a_server_that_never_answers_are_closed_after_the_render(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress, "LINGER_SECONDS", 0.5)
    assert env.get(url=env.page.url("/hello")).status_code == 200  # the browser and its spares are up
    fds = _fds()
    for _ in range(2):
        r = env.get(url=env.page.url("/silent-images"), timeoutMs=2000)
        assert r.status_code == 504 and "x-cu-cost" not in r.headers, r.text
    # Chromium dropped its side of each image connection: the proxy closes the origin's side too, soon
    assert wait_for(lambda: env.pool.egress.open_connections == 0, 5), env.pool.egress.open_connections
    assert wait_for(lambda: env.silent.open_connections() == 0, 5), env.silent.open_connections()
    assert wait_for(lambda: _fds() <= fds + 2, 5), (fds, _fds())


def test_a_connection_on_which_nothing_moves_is_closed(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image that never arrives no longer holds the page up to its deadline once the idle limit passes."""
    monkeypatch.setattr(egress, "IDLE_SECONDS", 1.0)
    started = time.monotonic()
    r = env.get(url=env.page.url("/silent-images"), timeoutMs=8000)
    assert r.status_code == 200 and r.content.startswith(b"%PDF-"), r.text
    assert time.monotonic() - started < 6


async def _socks_connect(proxy_port: int, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    writer.write(b"\x05\x01\x00")
    assert await reader.readexactly(2) == b"\x05\x00"
    writer.write(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", port))
    reply = await reader.readexactly(10)
    assert reply[1] == 0, reply
    return reader, writer


def test_closing_the_proxy_with_connections_open_logs_no_errors(caplog: pytest.LogCaptureFixture) -> None:
    silent = SilentServer()

    async def go() -> tuple[int, int]:
        proxy = egress.EgressProxy(Policy([f"127.0.0.1:{silent.port}"]))
        await proxy.start()
        clients = [await _socks_connect(proxy.port, silent.port) for _ in range(5)]
        open_before = proxy.open_connections
        await proxy.close()
        for _, w in clients:
            w.close()
        await asyncio.sleep(0.1)  # anything asyncio would log about the cancelled handlers is logged by now
        return open_before, proxy.open_connections

    try:
        with caplog.at_level(logging.ERROR):
            before, after = asyncio.run(go())
    finally:
        silent.close()
    assert before == 5 and after == 0
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == [], caplog.text


# --- 2. a page firing thousands of requests is stopped -----------------------------------------------------------


def test_a_page_firing_too_many_requests_is_stopped_and_refunded(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "MAX_PAGE_REQUESTS", 300)
    started = time.monotonic()
    r = env.get(url=env.page.url("/flood"), timeoutMs=20000)
    took = time.monotonic() - started
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "PAGE_TOO_MANY_REQUESTS" and "more than 300 requests" in error["message"], error
    assert "x-cu-cost" not in r.headers  # refunded
    assert took < 10, took  # stopped, not left firing until its deadline
    assert env.get(url=env.page.url("/hello")).status_code == 200


# --- 3. a request with no queue place never fetches its page ------------------------------------------------------


def test_a_request_refused_as_busy_never_fetches_its_page(env: Env) -> None:
    for _ in range(3):  # a request takes about 1 s here (its page answers after 1 s): Retry-After learns that
        assert env.get(url=env.page.url("/slow-html")).status_code == 200
    fetched = env.page.hits("/slow-html")
    results: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda: results.append(env.get(url=env.page.url("/slow-html"))))
               for _ in range(3)]  # one renderer, two queue places: all three are fetching their page now
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: env.page.hits("/slow-html") == fetched + 3, 5)
        for _ in range(5):
            started = time.monotonic()
            r = env.get(url=env.page.url("/slow-html"))
            assert r.status_code == 503 and r.json()["error"]["code"] == "BUSY", r.text
            assert time.monotonic() - started < 0.8
            # three requests ahead of it at about 1 s each, on one renderer
            assert int(r.headers["retry-after"]) >= 3, r.headers["retry-after"]
        assert env.page.hits("/slow-html") == fetched + 3  # the refused ones never downloaded it
    finally:
        for t in threads:
            t.join(60)
    assert [r.status_code for r in results] == [200, 200, 200]


# --- 5, 7. the origin's bad redirects are the origin's fault ------------------------------------------------------

REDIRECTS = ["http://[::1", "http://]/", "//[bad", "http://exa mple.com/", "\\\\evil.example/x",
             "http://user:pw@example.com/", "http://example.com:99999/", "file:///etc/passwd", "javascript:alert(1)"]


@pytest.mark.parametrize(("i", "status", "code"), [
    *[(i, 502, "UPSTREAM_BAD_REDIRECT") for i in range(7)],
    (7, 403, "BLOCKED_DESTINATION"),
    (8, 403, "BLOCKED_DESTINATION"),
], ids=REDIRECTS)
def test_a_bad_redirect_from_the_page_is_the_pages_fault(env: Env, i: int, status: int, code: str) -> None:
    r = env.get(url=env.page.url(f"/redirect{i}"), timeoutMs=5000)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code, error
    assert "redirect" in error["message"] and env.page.url(f"/redirect{i}") in error["message"], error
    assert "x-cu-cost" not in r.headers


# --- 6. lengths and numbers in ASCII digits only -------------------------------------------------------------------


@pytest.mark.parametrize("margin", ["١٠mm", "１０mm", "10mm ١ 1 1", "۱in"])
def test_margins_in_other_scripts_digits_are_400_before_any_fetch(env: Env, margin: str) -> None:
    fetched = env.page.hits("/hello")
    r = env.get(url=env.page.url("/hello"), margin=margin)
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_PARAMETER", r.text
    assert "`margin`" in r.json()["error"]["message"] and "0-9" in r.json()["error"]["message"]
    assert env.page.hits("/hello") == fetched


def test_numbers_in_other_scripts_digits_are_refused() -> None:
    with pytest.raises(Exception, match="digits 0-9"):
        parse_params({"url": "http://example.com/", "timeoutMs": "١٠٠٠٠"})
    assert parse_params({"url": "http://example.com/", "timeoutMs": "10000", "margin": "10mm"}).timeout_ms == 10000


# --- 8. an answer without content ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "status"), [("/no-content", "204"), ("/not-modified", "304")])
def test_a_page_answering_without_content_is_a_clear_502(env: Env, path: str, status: str) -> None:
    r = env.get(url=env.page.url(path), timeoutMs=5000)
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "UPSTREAM_STATUS" and f"HTTP {status}" in error["message"], error
    assert "nothing to print" in error["message"] and r.headers["x-upstream-status"] == status
    assert "x-cu-cost" not in r.headers


# --- 9. a JSON key given twice ---------------------------------------------------------------------------------------


def test_a_json_key_given_twice_is_refused_like_in_the_query_string(env: Env) -> None:
    body = f'{{"url": "{env.page.url("/hello")}", "url": "{env.page.url("/hello")}?b"}}'.encode()
    r = httpx.post(env.api.url(PDF), content=body, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"code": "INVALID_PARAMETER", "message": "`url` is given more than once; give it once"}


# --- 10. both forms of the file name name the same file --------------------------------------------------------------


@pytest.mark.parametrize(("given", "name"), [
    ("x.pdf.pdf", "x.pdf.pdf"), ("report.PDF.pdf", "report.PDF.pdf"), ("report.pdf", "report.pdf"),
    ("report", "report.pdf"), ("Ünïcode.pdf.pdf", "Unicode.pdf.pdf"),
])
def test_the_ascii_file_name_is_the_same_name(given: str, name: str) -> None:
    value, used = content_disposition("attachment", given, "example.com")
    fallback = value.split('filename="', 1)[1].split('"', 1)[0]
    assert fallback == name
    if given.isascii():
        assert used == name


# --- 11. a server without its browser ---------------------------------------------------------------------------------


def test_a_missing_browser_is_said_once_in_the_log_and_never_shows_server_paths(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no" / "chromium"
    broken = tmp_path / "broken-chromium"  # exists, but is no browser: launching it fails
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    with LocalServer() as page:
        page.routes["/hello"] = static("<h1>HELLO</h1>")
        for chromium, message, retry in (
            (missing, "PDF rendering is not available on this server", None),
            (broken, "the PDF renderer could not start; retry shortly", "5"),
        ):
            settings = Settings(home=tmp_path / "home", chromium_path=chromium, pdf_prewarm=True,
                                pdf_allow_hosts=[f"127.0.0.1:{page.port}"])
            caplog.clear()
            with caplog.at_level(logging.INFO), ApiServer(create_app(settings, access=StaticKeys(["k"]))) as api:
                time.sleep(0.2)
                for _ in range(2):
                    r = httpx.get(api.url(PDF), params={"url": page.url("/hello")}, timeout=60)
                    assert r.status_code == 503, r.text
                    error = r.json()["error"]
                    assert error["code"] == "RENDERER_UNAVAILABLE" and error["message"].startswith(message), error
                    assert str(tmp_path) not in r.text
                    assert r.headers.get("retry-after") == retry
            errors = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]
            if chromium == missing:
                assert page.hits("/hello") == 0  # refused before the page is fetched
                assert len(errors) == 1, errors  # once, at startup
                assert str(missing) in errors[0] and "CRYPTOWIRE_CHROMIUM_PATH" in errors[0]
            else:
                assert errors and all(str(broken) in e for e in errors), errors  # the reason is in the log


# --- 4. a forced stop during a render refunds it ------------------------------------------------------------------


def test_a_forced_stop_during_a_render_refunds_its_charge(tmp_path: Path) -> None:
    from accounts import SqliteStore

    home = tmp_path / "home"
    home.mkdir()
    store = SqliteStore(Settings(home=home).platform_db)
    key_id, key = store.create_key("stop test", "pro", ["pdf"])
    store.close()
    port = free_port()
    hold = threading.Event()
    with LocalServer() as page:
        page.routes["/slow"] = static("<h1>SLOW</h1><img src='/never.png'>")
        page.routes["/never.png"] = lambda req: (hold.wait(30), Reply(404))[1]
        env = {**os.environ, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "true",
               "CRYPTOWIRE_PDF_ALLOW_HOSTS": f'["127.0.0.1:{page.port}"]', "CRYPTOWIRE_PDF_CONCURRENCY": "1"}
        for name in ("CRYPTOWIRE_REDIS_URL", "CRYPTOWIRE_DATABASE_URL", "CRYPTOWIRE_PLANS_FILE"):
            env.pop(name, None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        try:
            assert wait_for(lambda: _answers(f"http://127.0.0.1:{port}/healthz") or proc.poll() is not None, 60)
            assert proc.poll() is None, proc.communicate()[0]
            answers: list[Any] = []

            def call() -> None:
                try:
                    answers.append(httpx.get(f"http://127.0.0.1:{port}/api/html-to-pdf/{key}",
                                             params={"url": page.url("/slow"), "timeoutMs": 30000}, timeout=60))
                except httpx.HTTPError as exc:
                    answers.append(exc)

            client = threading.Thread(target=call)
            client.start()
            assert wait_for(lambda: page.hits("/never.png") > 0, 30)  # charged, and rendering
            proc.send_signal(signal.SIGINT)  # graceful: waits for the render...
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)  # ... forced (Ctrl+C twice): the render is cancelled
            out, _ = proc.communicate(timeout=30)
            client.join(30)
        finally:
            hold.set()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            try:  # whatever the server started and left behind (its browser) goes too
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    store = SqliteStore(Settings(home=home).platform_db)
    try:
        used = store.used(key_id, dt.datetime.now(dt.UTC).date().isoformat())
    finally:
        store.close()
    assert used == 0, out
    assert "were refunded" in out, out


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
