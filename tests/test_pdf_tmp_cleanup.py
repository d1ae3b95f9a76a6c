"""A `serve` killed with kill -9 leaves its browser's temp files (profile, artifacts) in the data home, and the next
server to start removes them, never those of a server still running on the same data home. Real servers, real
Chromium."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.support.httpserver import LocalServer, static
from tests.support.pdfserver import ServeProcess
from tests.support.procs import cmdline, running, wait_for
from warehouse.config import Settings


def test_a_killed_servers_browser_files_are_removed_by_the_next_start_and_a_live_ones_kept(tmp_path: Path) -> None:
    from accounts import SqliteStore

    home = tmp_path / "home"
    home.mkdir()
    systmp = tmp_path / "tmp"  # the servers' TMPDIR, in place of /tmp: nothing of the browser may land there
    systmp.mkdir()
    store = SqliteStore(Settings(home=home).platform_db)
    _key_id, key = store.create_key("tmp test", "pro", ["pdf"])
    store.close()
    servers: list[Server] = []
    with LocalServer() as page:
        page.routes["/p"] = static("<h1>P</h1>")
        try:
            killed = Server(home, systmp, page.port)
            servers.append(killed)
            live = Server(home, systmp, page.port)
            servers.append(live)
            killed_profile, live_profile = killed.profile(), live.profile()

            os.killpg(killed.proc.pid, signal.SIGKILL)  # the server and its Playwright driver
            killed.proc.wait(10)
            # Chromium is in a process group of its own; it exits when its pipe to the driver closes.
            assert wait_for(lambda: not any(running(pid) for pid in killed.browser), 15), killed.browser
            assert killed_profile.exists()  # nothing removed it

            restarted = Server(home, systmp, page.port)
            servers.append(restarted)
            restarted.profile()  # its pool is up: leftovers are swept before the launch

            assert not killed_profile.exists(), f"{killed_profile} of the killed server is still there"
            assert live_profile.exists()
            r = httpx.get(live.url(f"/api/html-to-pdf/{key}"), params={"url": page.url("/p")}, timeout=60)
            assert r.status_code == 200 and r.content.startswith(b"%PDF-"), r.text
            tmp_root = Settings(home=home).chromium_tmp_dir
            assert live_profile.is_relative_to(tmp_root) and restarted.profile().is_relative_to(tmp_root)
            assert len([d for d in tmp_root.iterdir() if d.is_dir()]) == 2  # the live server's and the new one's
            assert sorted(p.name for p in systmp.iterdir()) == [], "browser files in the system temp directory"
        finally:
            for server in servers:
                server.stop()


class Server(ServeProcess):
    """`cryptowire serve` on ``home`` with ``tmp`` as its TMPDIR, its browser launched at start."""

    def __init__(self, home: Path, tmp: Path, page_port: int) -> None:
        super().__init__(home, page_port, TMPDIR=str(tmp))

    def profile(self) -> Path:
        """The running browser's profile directory (waits for the browser)."""
        for pid in self.find_browser():
            for arg in cmdline(pid):
                if arg.startswith("--user-data-dir="):
                    return Path(arg.split("=", 1)[1])
        raise AssertionError(f"no --user-data-dir among the browser's arguments: {self.browser}")


@pytest.mark.parametrize("binary", ["/usr/bin/chromium-headless-shell", "/usr/bin/chromium"])
def test_both_browsers_render_under_a_long_data_home_and_a_closed_pool_removes_its_directory(
    tmp_path: Path, binary: str,
) -> None:
    """Full Chromium opens a Unix socket in its TMPDIR (at most 107 bytes): under a data home it would not start."""
    if not Path(binary).exists():
        pytest.skip(f"{binary} is not installed (Debian package chromium / chromium-headless-shell)")
    from api.pdf.params import parse_params
    from api.pdf.pool import BrowserPool
    from api.pdf.render import render
    from api.pdf.ssrf import Policy

    root = tmp_path / ("a-data-home-with-a-long-name-" * 3) / "run" / "chromium-tmp"
    with LocalServer() as page:
        page.routes["/p"] = static("<h1>P</h1>")
        policy = Policy([f"127.0.0.1:{page.port}"])

        async def go() -> None:
            pool = BrowserPool(Path(binary), policy, concurrency=1, queue=1, spares=0, tmp_dir=root)
            try:
                loop = asyncio.get_running_loop()
                result = await render(pool, policy, parse_params({"url": page.url("/p")}), loop.time() + 60)
                assert result.pdf.startswith(b"%PDF-")
                assert [d for d in root.iterdir() if d.is_dir()], "the pool made no directory of its own"
            finally:
                await pool.close()

        asyncio.run(go())
    assert [d for d in root.iterdir() if d.is_dir()] == []
