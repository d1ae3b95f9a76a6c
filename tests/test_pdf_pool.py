"""The warm Chromium pool on its own: restarts by count and by memory, and the browser's own network is dead."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from api.errors import ApiError
from api.pdf import procmem
from api.pdf.params import parse_params
from api.pdf.pool import BrowserPool
from api.pdf.render import render
from api.pdf.ssrf import Policy
from tests.support.httpserver import LocalServer, static
from tests.support.procs import running
from warehouse.config import Settings

CHROMIUM = Settings().chromium_path


async def _render_n(pool: BrowserPool, policy: Policy, url: str, n: int) -> list[int | None]:
    """Render ``n`` times; return the browser generation each render ran in."""
    loop = asyncio.get_running_loop()
    generations = []
    for _ in range(n):
        generations.append(pool.info()["generation"])
        result = await render(pool, policy, parse_params({"url": url}), loop.time() + 30)
        assert result.pdf.startswith(b"%PDF-")
    generations.append(pool.info()["generation"])
    return generations


def test_browser_is_replaced_after_n_conversions_and_above_the_memory_limit(local_server: LocalServer) -> None:
    local_server.routes["/"] = static("<h1>pool</h1>")
    policy = Policy([f"127.0.0.1:{local_server.port}"])

    async def go() -> None:
        by_count = BrowserPool(CHROMIUM, policy, concurrency=1, queue=1, restart_every=2, spares=0)
        try:
            await by_count.start()
            first_pid = by_count.browser_pid()
            gens = await _render_n(by_count, policy, local_server.url("/"), 3)
            assert by_count.stats["restarts"] == 1 and by_count.stats["launches"] == 2, by_count.stats
            assert gens[0] == 1 and gens[-1] == 2
            await asyncio.sleep(0.5)
            assert first_pid is not None and not running(first_pid)  # the retired browser really went away
        finally:
            await by_count.close()

        by_memory = BrowserPool(CHROMIUM, policy, concurrency=1, queue=1, restart_every=0, max_pss_mb=1,
                                memory_check_every=1, spares=0)
        try:
            gens = await _render_n(by_memory, policy, local_server.url("/"), 1)
            assert by_memory.stats["restarts"] == 1 and by_memory.stats["launches"] == 1, by_memory.stats
            assert gens == [None, None]  # retired at once: the next request starts a new browser
        finally:
            await by_memory.close()

    asyncio.run(go())


def test_the_browser_reaches_nothing_but_through_the_egress_policy() -> None:
    """Even with no request interception at all, Chromium's connections go through the egress proxy, which
    applies the policy to each (names resolved there once, loopback not exempt)."""
    with LocalServer() as page, LocalServer() as secret:
        page.routes["/ok"] = static("<h1>reachable</h1>")
        secret.routes["/direct"] = static("reached")

        async def go() -> tuple[list[str], str]:
            pool = BrowserPool(CHROMIUM, Policy([f"127.0.0.1:{page.port}"]), concurrency=1, spares=0)
            errors = []
            try:
                async with pool.slot(asyncio.get_running_loop().time() + 30) as browser:
                    bare = await browser.browser.new_context()  # no egress proxy: nothing at all is reachable
                    tab = await bare.new_page()
                    try:
                        await tab.goto(page.url("/ok"), timeout=10_000)
                    except Exception as exc:
                        errors.append(str(exc).splitlines()[0])
                    await bare.close()
                    context = await browser.browser.new_context(**pool.context_options())  # no routing installed
                    for url in (secret.url("/direct"), f"http://localhost:{secret.port}/direct",
                                f"http://[::ffff:127.0.0.1]:{secret.port}/direct", "http://169.254.169.254/"):
                        tab = await context.new_page()  # a page of its own: error pages load late
                        try:
                            await tab.goto(url, timeout=10_000)
                        except Exception as exc:
                            errors.append(str(exc).splitlines()[0])
                    tab = await context.new_page()
                    await tab.goto(page.url("/ok"), timeout=10_000)
                    text = await tab.inner_text("h1")
                    await context.close()
                assert pool.egress.stats["blocked"] >= 4, pool.egress.stats
            finally:
                await pool.close()
            return errors, text

        errors, text = asyncio.run(go())
        assert len(errors) == 5, errors
        assert text == "reachable" and page.hits("/ok") == 1
        assert secret.seen == []


def test_busy_message_counts_in_good_english() -> None:
    """One renderer rendering and one request queued: the next is refused, in the singular."""

    async def go() -> str:
        pool = BrowserPool(CHROMIUM, concurrency=1, queue=1, spares=0)
        deadline = asyncio.get_running_loop().time() + 30

        async def queued() -> None:
            async with pool.slot(deadline):
                pass

        try:
            async with pool.slot(deadline):
                waiting = asyncio.create_task(queued())
                while pool.info()["waiting"] == 0:
                    await asyncio.sleep(0.01)
                try:
                    async with pool.slot(deadline):
                        raise AssertionError("a third request must be refused")
                except ApiError as exc:
                    assert exc.code == "BUSY"
                    message = exc.message
            await waiting  # served once the first one is done
        finally:
            await pool.close()
        return message

    assert asyncio.run(go()).startswith("the only renderer is busy and 1 request is waiting; ")



def test_the_browser_pid_is_found_behind_a_launcher_script(tmp_path: Path) -> None:
    # Debian's chromium-headless-shell is a sh script that runs the binary without exec: both carry the arguments,
    # and killing the script would leave the browser running.
    launcher = tmp_path / "launcher"
    launcher.write_text(f"#!/bin/sh\n{sys.executable} -c 'import time; time.sleep(60)' \"$@\"\ntrue\n")
    launcher.chmod(0o755)
    marker = f"--cryptowire-test={uuid.uuid4().hex}"
    proc = subprocess.Popen([str(launcher), marker])
    try:
        def program(pid: int | None) -> bytes | None:
            try:
                return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] if pid else None
            except OSError:
                return None

        # until the script's child has exec'd python (a forked shell briefly carries the same arguments)
        deadline = time.monotonic() + 10
        pid = procmem.find_by_arg(marker)
        while program(pid) != sys.executable.encode() and time.monotonic() < deadline:
            time.sleep(0.05)
            pid = procmem.find_by_arg(marker)
        assert pid is not None and pid != proc.pid
        assert program(pid) == sys.executable.encode()
    finally:
        for child in reversed(procmem.descendants(proc.pid)):
            with contextlib.suppress(OSError):
                os.kill(child, 9)
        proc.wait()
