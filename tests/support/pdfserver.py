"""`cryptowire serve` as a real process for PDF tests that signal or kill it, and its key and usage."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from api.pdf import procmem
from tests.support.apiserver import free_port
from tests.support.httpserver import LocalServer, Reply, static
from tests.support.procs import cmdline, running, wait_for
from warehouse.config import Settings

PROJECT = Path(__file__).resolve().parent.parent.parent


def serve_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment on ``home``, without a shared metering store (SQLite in the data home)."""
    env = {**os.environ, "CRYPTOWIRE_HOME": str(home), **extra}
    for name in ("CRYPTOWIRE_REDIS_URL", "CRYPTOWIRE_DATABASE_URL", "CRYPTOWIRE_PLANS_FILE"):
        env.pop(name, None)
    return env


class ServeProcess:
    """`cryptowire serve` on ``home`` in a session of its own, rendering pages of ``page_port`` one at a time; its
    output is kept in a file. Started when /healthz answers."""

    def __init__(self, home: Path, page_port: int, *args: str, prewarm: bool = True, **env: str) -> None:
        self.port = free_port()
        self.log = home / f"serve-{self.port}.log"
        full_env = serve_env(home, **{"CRYPTOWIRE_PDF_PREWARM": str(prewarm).lower(), "CRYPTOWIRE_PDF_CONCURRENCY": "1",
                                      "CRYPTOWIRE_PDF_ALLOW_HOSTS": f'["127.0.0.1:{page_port}"]', **env})
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                 *args],
                cwd=PROJECT, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.browser: list[int] = []  # Chromium's processes (in a process group of their own)
        assert wait_for(lambda: self._answers() or self.proc.poll() is not None, 60), self.output()
        assert self.proc.poll() is None, self.output()

    def _answers(self) -> bool:
        try:
            return httpx.get(self.url("/healthz"), timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def find_browser(self) -> list[int]:
        def launched() -> bool:
            for pid in procmem.descendants(self.proc.pid):
                if any(a.startswith("--cryptowire-pdf-pool=") for a in cmdline(pid)):
                    self.browser = sorted({*self.browser, pid, *procmem.descendants(pid)})
            return bool(self.browser)

        assert wait_for(launched, 60), "no browser started"
        return self.browser

    def stop(self) -> None:
        """kill -9 of the server's process group (server, Playwright driver) and of whatever browser outlived it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        for pid in self.browser:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def kill9(self) -> None:
        """``stop``, and wait until Chromium (a group of its own) is gone too."""
        self.stop()
        assert wait_for(lambda: not any(running(pid) for pid in self.browser), 15), self.browser


def new_key(home: Path, name: str = "pdf test") -> tuple[str, str]:
    """A key of the pro plan for the PDF API, in the data home's SQLite store: (key id, key)."""
    from accounts import SqliteStore

    store = SqliteStore(Settings(home=home).platform_db)
    try:
        return store.create_key(name, "pro", ["pdf"])
    finally:
        store.close()


def used(home: Path, key_id: str, day: str | None = None) -> int:
    """CU the key used on ``day`` (UTC, today by default), as the SQLite store counts them."""
    from accounts import SqliteStore

    store = SqliteStore(Settings(home=home).platform_db)
    try:
        return store.used(key_id, day or dt.datetime.now(dt.UTC).date().isoformat())
    finally:
        store.close()


class Render:
    """A PDF request on its own thread; its answer (or transport error) once done."""

    def __init__(self, server: ServeProcess, key: str, url: str) -> None:
        self.answer: Any = None
        self.thread = threading.Thread(target=self._call, args=(server, key, url), daemon=True)
        self.thread.start()

    def _call(self, server: ServeProcess, key: str, url: str) -> None:
        try:
            self.answer = httpx.get(server.url(f"/api/html-to-pdf/{key}"), params={"url": url, "timeoutMs": 60000},
                                    timeout=90)
        except httpx.HTTPError as exc:
            self.answer = exc


def slow_page(page: LocalServer, name: str = "slow") -> threading.Event:
    """``/<name>`` loads an image that arrives only once the returned event is set: its render stays in flight."""
    hold = threading.Event()
    page.routes[f"/{name}"] = static(f"<h1>{name}</h1><img src='/{name}.png'>")
    page.routes[f"/{name}.png"] = lambda req: (hold.wait(60), Reply(404))[1]
    return hold
