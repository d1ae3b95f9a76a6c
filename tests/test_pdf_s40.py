"""A PDF request's charge at a forced stop, and full Chromium's leftovers in /tmp after a kill -9. Real `cryptowire
serve` processes, real Chromium, real signals, a real page server on 127.0.0.1 whose image never arrives (the
render stays in flight until the test lets it go)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.httpserver import LocalServer, Reply, static
from tests.support.pdfserver import ServeProcess, new_key, used
from tests.support.procs import running, wait_for

FULL = Path("/usr/bin/chromium")


# --- 1. a forced stop by SIGTERM then SIGINT refunds the render in flight -------------------------------------


@pytest.mark.parametrize("signals", [(signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGINT)],
                         ids=["TERM-INT", "INT-INT"])
def test_a_forced_stop_during_a_render_refunds_it_whatever_the_signals(
    tmp_path: Path, signals: tuple[signal.Signals, signal.Signals],
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key_id, key = new_key(home)
    hold = threading.Event()
    with LocalServer() as page:
        page.routes["/slow"] = static("<h1>SLOW</h1><img src='/never.png'>")
        page.routes["/never.png"] = lambda req: (hold.wait(60), Reply(404))[1]
        server = ServeProcess(home, page.port)
        try:
            answers: list[Any] = []

            def call() -> None:
                try:
                    answers.append(httpx.get(server.url(f"/api/html-to-pdf/{key}"),
                                             params={"url": page.url("/slow"), "timeoutMs": 60000}, timeout=90))
                except httpx.HTTPError as exc:
                    answers.append(exc)

            client = threading.Thread(target=call)
            client.start()
            assert wait_for(lambda: page.hits("/never.png") > 0, 60), server.output()  # charged, rendering
            assert used(home, key_id) == 20_000
            first, second = signals
            server.proc.send_signal(first)  # graceful: the server waits for the render...
            time.sleep(0.5)
            assert server.proc.poll() is None
            server.proc.send_signal(second)  # ... forced: the render is stopped
            assert wait_for(lambda: server.proc.poll() is not None, 30), "the server did not stop"
            client.join(30)
        finally:
            hold.set()
            server.stop()
        out = server.output()
        assert used(home, key_id) == 0, out
        # The usage endpoint of the next server on the same data home says the same.
        restarted = ServeProcess(home, page.port, CRYPTOWIRE_PDF_PREWARM="false")
        try:
            day = httpx.get(restarted.url(f"/api/usage/{key}"), params={"days": 1}, timeout=10).json()["days"][-1]
        finally:
            restarted.stop()
    assert day["apis"]["pdf"] == {"cu": 0, "requests": 0}, day
    assert "were refunded" in out, out
    answer = answers[0]  # the client is told, before the server exits
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 503 and answer.headers["x-cu-cost"] == "0", answer.text
    assert answer.json()["error"]["code"] == "RENDERER_UNAVAILABLE", answer.text


# --- 2. full Chromium's singleton directory after a kill -9 ------------------------------------------------------


@pytest.mark.skipif(not FULL.exists(), reason=f"{FULL} is not installed (Debian package chromium)")
def test_full_chromiums_temp_files_of_a_killed_server_are_removed_by_the_next_start_only(tmp_path: Path) -> None:
    """Full Chromium makes org.chromium.Chromium.XXXXXX/SingletonSocket in its TMPDIR and removes it when it exits;
    killed with its server (kill -9 of the whole process tree: a supervisor's, the OOM killer's), it leaves it. The
    next server on the data home removes that server's, and nothing of a live server or of another program."""
    home = tmp_path / "home"
    home.mkdir()
    _key_id, key = new_key(home)
    # The servers' TMPDIR, in place of /tmp (short, as /tmp is: the socket path must stay under 107 bytes).
    systmp = Path(tempfile.mkdtemp(prefix="s40-", dir="/tmp"))
    others = [systmp / "org.chromium.Chromium.other", systmp / "cw-1-another"]  # another program's
    for d in others:
        d.mkdir()
    servers: list[ServeProcess] = []

    def start_and_render(**env: str) -> tuple[ServeProcess, set[str]]:
        """A server that rendered a page; what appeared in the temp directory since it started."""
        before = {p.name for p in systmp.iterdir()}
        server = ServeProcess(home, page.port, **env)
        servers.append(server)
        r = httpx.get(server.url(f"/api/html-to-pdf/{key}"), params={"url": page.url("/p")}, timeout=60)
        assert r.status_code == 200 and r.content.startswith(b"%PDF-"), r.text
        server.find_browser()
        return server, {p.name for p in systmp.iterdir()} - before

    try:
        with LocalServer() as page:
            page.routes["/p"] = static("<h1>P</h1>")
            env = {"CRYPTOWIRE_CHROMIUM_PATH": str(FULL), "TMPDIR": str(systmp)}
            killed, killed_files = start_and_render(**env)
            live, live_files = start_and_render(**env)
            assert killed_files and live_files, "full Chromium put nothing in its TMPDIR"

            os.killpg(killed.proc.pid, signal.SIGKILL)  # the server and its Playwright driver...
            for pid in killed.browser:  # ... and Chromium, in a process group of its own
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed.proc.wait(10)
            assert wait_for(lambda: not any(running(pid) for pid in killed.browser), 15), killed.browser
            left = [systmp / name for name in killed_files]
            assert all(p.exists() for p in left)  # the kill really left them
            assert any(p.name == "SingletonSocket" for d in left for p in d.rglob("*")), killed_files

            start_and_render(**env)  # its pool is up: what dead servers left was swept before its launch

            assert [p for p in left if p.exists()] == [], "the killed server's browser files are still there"
            assert all((systmp / name).exists() for name in live_files), "a live server's files were removed"
            assert all(d.exists() for d in others), "another program's files were removed"
            r = httpx.get(live.url(f"/api/html-to-pdf/{key}"), params={"url": page.url("/p")}, timeout=60)
            assert r.status_code == 200 and r.content.startswith(b"%PDF-"), r.text
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(systmp, ignore_errors=True)


@pytest.mark.skipif(not FULL.exists(), reason=f"{FULL} is not installed (Debian package chromium)")
def test_full_chromium_gets_a_short_temp_directory_of_its_own_which_a_closed_pool_removes(tmp_path: Path) -> None:
    import asyncio

    from api.pdf.params import parse_params
    from api.pdf.pool import BrowserPool
    from api.pdf.render import render
    from api.pdf.ssrf import Policy

    root = tmp_path / "run" / "chromium-tmp"
    with LocalServer() as page:
        page.routes["/p"] = static("<h1>P</h1>")
        policy = Policy([f"127.0.0.1:{page.port}"])
        seen: list[Path] = []

        async def go() -> None:
            pool = BrowserPool(FULL, policy, concurrency=1, queue=1, spares=0, tmp_dir=root)
            try:
                loop = asyncio.get_running_loop()
                result = await render(pool, policy, parse_params({"url": page.url("/p")}), loop.time() + 60)
                assert result.pdf.startswith(b"%PDF-")
                (mine,) = [d for d in root.iterdir() if d.is_dir()]
                browser_tmp = Path(tempfile.gettempdir()) / f"cw-{mine.name}"
                assert (mine / "browser-tmp").read_text() == str(browser_tmp)
                # Chromium's singleton directory is in it, not loose in the system's temp directory.
                assert [p.name for p in browser_tmp.glob("org.chromium.Chromium.*/SingletonSocket")], browser_tmp
                seen.append(browser_tmp)
            finally:
                await pool.close()

        asyncio.run(go())
    assert seen and not seen[0].exists()
