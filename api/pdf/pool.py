"""A warm Chromium per worker process: bounded concurrency, a bounded queue, restarts that never block requests.

One browser serves every render through a fresh context each. The browser is retired (a new one takes new
requests, the old one closes once its pages finish) after ``restart_every`` conversions, above ``max_pss_mb`` of
memory, and replaced at once when it crashes or is killed.

With ``tmp_dir`` (the server's data home), the temp files of Playwright's driver and of Chromium (the browser
profile, artifacts) go to a directory of this process there, not /tmp: a kill -9 that takes the driver down leaves
them behind, and the next pool to start in any process removes the directories whose owner is gone. The full
browser's own TMPDIR must stay short (it puts its singleton socket there, at most 107 bytes): it is a directory of
this process in the system's temp directory (``cw-<pid>-…``), recorded in the data home's one, and removed with it.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import math
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from api.errors import ApiError
from api.pdf import procmem
from api.pdf.egress import EgressProxy
from api.pdf.ssrf import Policy

log = logging.getLogger("cryptowire.pdf")

BASE_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    # A popup is never printed: window.open fails, so a page opening hundreds costs no renderer time or memory.
    # (The headless shell honours this; the full browser does not, hence also NO_POPUPS in every context.)
    "--block-new-web-contents",
    # The full browser in new-headless mode (not the headless shell) opens WebUI omnibox popups (one renderer
    # process each) for every page, and keeps a spare renderer that a fresh context can never use: together they
    # doubled the CPU cost of a conversion.
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxFullPopup,OmniboxFullPopup,WebUIOmniboxAimPopup,"
    "SpareRendererForSitePerProcess",
    # Pages reach the network only through the egress proxy, set on each context; the browser's own traffic
    # (update checks, sign-in probes) goes to a dead proxy set at launch. Loopback is not exempt, Chromium
    # resolves no names itself (SOCKS5 hands them to the proxy), WebRTC may not send UDP around the proxy.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-bypass-list=<-loopback>",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)
# In every frame before the page's own scripts: window.open opens nothing (the full browser ignores the flag above).
# A plain assignment: a page's script that sets window.open itself keeps working (the native one stays out of reach).
NO_POPUPS = "window.open = () => null;"
MEMORY_CHECK_EVERY = 5  # conversions between memory readings (a reading walks /proc)
MAX_SPARES = 4
USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36 "
    "cryptowire-pdf/0.1"
)


class TabHandler(Protocol):
    async def on_route(self, route: Any) -> None: ...
    async def on_websocket(self, ws: Any) -> None: ...
    def on_crash(self) -> None: ...
    def on_request_failed(self, request: Any) -> None: ...
    def on_download(self, download: Any) -> None: ...


@dataclass(eq=False)
class Tab:
    """A fresh context with one page, used by exactly one request and then closed.

    Interception is installed before the page exists; the request's handler is attached when it takes the tab.
    Until then every request is refused (an unused about:blank page makes none).
    """

    context: Any
    page: Any = None
    handler: TabHandler | None = None
    media: str | None = None  # the CSS media type the page emulates now

    async def route(self, route: Any) -> None:
        if self.handler is None:
            await route.abort("blockedbyclient")
        else:
            await self.handler.on_route(route)

    async def websocket(self, ws: Any) -> None:
        if self.handler is None:
            await ws.close(code=1008, reason="blocked")
        else:
            await self.handler.on_websocket(ws)

    def crash(self, _page: Any) -> None:
        if self.handler is not None:
            self.handler.on_crash()

    def request_failed(self, request: Any) -> None:
        if self.handler is not None:
            self.handler.on_request_failed(request)

    def download(self, download: Any) -> None:
        if self.handler is not None:
            self.handler.on_download(download)


async def _dismiss(dialog: Any) -> None:
    try:
        await dialog.dismiss()
    except Exception:  # the page went away first
        pass


@dataclass(eq=False)
class Place:
    """A request's place in the queue, from before its page is fetched until a renderer takes it."""

    since: float  # time.monotonic() when taken
    held: bool = True
    queued: float = 0.0  # seconds spent waiting for a renderer


@dataclass(eq=False)  # identity semantics: kept in sets
class Browser:
    """One launched browser and its bookkeeping."""

    browser: Any  # playwright.async_api.Browser
    pid: int | None
    generation: int
    conversions: int = 0
    inflight: int = 0
    retiring: bool = False
    crashed: bool = False
    closed: bool = field(default=False, repr=False)
    spares: list[Tab] = field(default_factory=list, repr=False)
    making: int = 0  # spares being made

    @property
    def alive(self) -> bool:
        return not self.crashed and self.browser.is_connected()


class BrowserPool:
    def __init__(
        self,
        chromium_path: Path,
        policy: Policy | None = None,
        concurrency: int = 0,
        queue: int = 16,
        restart_every: int = 200,
        max_pss_mb: int = 1024,
        spares: int | None = None,
        memory_check_every: int = MEMORY_CHECK_EVERY,
        tmp_dir: Path | None = None,
    ) -> None:
        self.chromium_path = chromium_path
        self.tmp_dir = tmp_dir  # None: the system's temp directory
        self._tmp: Path | None = None  # this process's directory under tmp_dir
        self._browser_tmp: Path | None = None  # the full browser's TMPDIR, short, in the system's temp directory
        self._tmp_lock: int | None = None  # held while this pool lives: the directory is in use
        self.concurrency = concurrency or os.cpu_count() or 1
        self.queue = max(0, queue)
        self.restart_every = restart_every
        self.max_pss_mb = max_pss_mb
        self.memory_check_every = max(1, memory_check_every)
        # Pages made ahead of requests take the renderer start (about half a conversion) off the critical path.
        self.spares = min(self.concurrency, MAX_SPARES) if spares is None else spares
        self._active = 0
        self._waiting = 0
        self._sem = asyncio.Semaphore(self.concurrency)
        self._lock = asyncio.Lock()
        self._current: Browser | None = None
        self._old: set[Browser] = set()
        self._playwright: Any = None
        self._pw_cm: Any = None
        self._generation = 0
        self._closing = False
        # Moving average of a request's own time, fetching its page included, queueing not: for Retry-After.
        self._request_seconds: float | None = None
        self.egress = EgressProxy(policy or Policy())
        self._dead = socket.socket()  # bound, never listening: a proxy address that refuses every connection
        self._dead.bind(("127.0.0.1", 0))
        self._closers: set[asyncio.Task[None]] = set()  # used tabs being closed
        self.stats: dict[str, int] = {"conversions": 0, "launches": 0, "restarts": 0, "crashes": 0, "rejected": 0}

    # --- lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        async with self._lock:
            await self._ensure()

    async def close(self) -> None:
        self._closing = True
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)
        async with self._lock:
            browsers = [b for b in (self._current, *self._old) if b is not None]
            self._current = None
            self._old.clear()
            for b in browsers:
                await self._close_browser(b)
            if self._pw_cm is not None:
                try:
                    await self._pw_cm.__aexit__(None, None, None)
                except Exception:  # the driver may already be gone
                    log.warning("playwright driver did not stop cleanly", exc_info=True)
                self._pw_cm = self._playwright = None
            await self.egress.close()
            if self._tmp is not None and self._tmp_lock is not None:
                remove_browser_tmp(self._tmp)
                shutil.rmtree(self._tmp, ignore_errors=True)
                os.close(self._tmp_lock)
                self._tmp = self._tmp_lock = None
                self._browser_tmp = None
        self._dead.close()

    async def _launch(self) -> Browser:
        from playwright.async_api import async_playwright  # lazy: the API starts without loading playwright

        if self.egress.server is None:
            await self.egress.start()
        if self.tmp_dir is not None and self._tmp is None:
            try:
                self._tmp, self._tmp_lock = await asyncio.to_thread(claim_tmp_dir, self.tmp_dir)
            except OSError as exc:  # renders matter more than where their temp files go
                log.warning("pdf: cannot use %s for the browser's temp files (%s); using the system's", self.tmp_dir, exc)
                self.tmp_dir = None
            else:
                if "headless-shell" not in self.chromium_path.name:  # the shell keeps nothing in its TMPDIR
                    self._browser_tmp = await asyncio.to_thread(claim_browser_tmp, self._tmp)
        if self._playwright is None:
            self._pw_cm = async_playwright()
            # The driver makes the profile and artifacts directories in its own TMPDIR, which it takes from ours.
            async with _tmpdir_env(self._tmp):
                self._playwright = await self._pw_cm.__aenter__()
        marker = f"--cryptowire-pdf-pool={uuid.uuid4().hex}"  # finds the browser's pid in /proc
        args = [*BASE_ARGS, f"--proxy-server=socks5://127.0.0.1:{self._dead.getsockname()[1]}", marker]
        # Never the driver's TMPDIR (under the data home): the full chromium binary puts a Unix socket in its TMPDIR,
        # whose path must stay under 107 bytes. It gets a short directory of this process, which a kill leaves for
        # the next pool to remove; the headless shell, which keeps nothing there, gets the server's own.
        env = None
        if self._tmp is not None:
            env = dict(os.environ)
            if self._browser_tmp is not None:
                env["TMPDIR"] = str(self._browser_tmp)
        browser = await self._playwright.chromium.launch(
            executable_path=str(self.chromium_path), args=args, headless=True, handle_sigint=False,
            handle_sigterm=False, handle_sighup=False, env=env,
        )
        self._generation += 1
        handle = Browser(browser=browser, pid=procmem.find_by_arg(marker), generation=self._generation)
        browser.on("disconnected", lambda _b: self._on_disconnected(handle))
        self.stats["launches"] += 1
        log.info("chromium started (generation %d, pid %s)", handle.generation, handle.pid)
        return handle

    async def _ensure(self) -> Browser:
        """The current browser, launched if there is none (call with ``_lock`` held)."""
        cur = self._current
        if cur is not None and cur.alive and not cur.retiring:
            return cur
        if cur is not None:
            self._retire(cur, "crashed" if not cur.alive else "retired")
        if self._closing:
            raise ApiError(503, "RENDERER_UNAVAILABLE", "the server is shutting down; retry shortly",
                           headers={"Retry-After": "5"})
        self.check_browser()
        try:
            self._current = await self._launch()
            self._refill(self._current)
        except Exception:
            log.exception("chromium (%s) failed to start", self.chromium_path)
            await self._reset_driver()
            # The reason stays in the log: it names paths and internals of this server.
            raise ApiError(
                503, "RENDERER_UNAVAILABLE", "the PDF renderer could not start; retry shortly",
                headers={"Retry-After": "5"},
            ) from None
        return self._current

    def check_browser(self) -> None:
        """503 when the browser binary is missing: a misconfigured server, which retrying does not help."""
        if browser_problem(self.chromium_path) is not None:
            raise ApiError(
                503, "RENDERER_UNAVAILABLE",
                "PDF rendering is not available on this server: its browser is not installed or not configured "
                "(operators: see the server log and CRYPTOWIRE_CHROMIUM_PATH)",
            )

    async def _reset_driver(self) -> None:
        if self._pw_cm is not None:
            try:
                await self._pw_cm.__aexit__(None, None, None)
            except Exception:
                pass
        self._pw_cm = self._playwright = None

    def _on_disconnected(self, handle: Browser) -> None:
        if handle.closed or self._closing:
            return
        handle.crashed = True
        self.stats["crashes"] += 1
        log.warning("chromium generation %d disconnected (crash or kill); the next request starts a new one",
                    handle.generation)
        if self._current is handle:
            self._current = None

    def _retire(self, handle: Browser, why: str) -> None:
        if handle is self._current:
            self._current = None
        if handle.closed:
            return
        handle.retiring = True
        if why == "retired":
            self.stats["restarts"] += 1
        log.info("chromium generation %d %s after %d conversions", handle.generation, why, handle.conversions)
        if handle.inflight == 0:
            asyncio.get_running_loop().create_task(self._close_browser(handle))
        else:
            self._old.add(handle)

    async def _close_browser(self, handle: Browser) -> None:
        if handle.closed:
            return
        handle.closed = True
        self._old.discard(handle)
        try:
            async with asyncio.timeout(10):
                await handle.browser.close()
        except Exception:
            log.warning("chromium generation %d did not close cleanly", handle.generation)
            if handle.pid:
                try:
                    os.kill(handle.pid, 9)
                except OSError:
                    pass

    # --- tabs --------------------------------------------------------------------
    async def new_tab(self, handle: Browser) -> Tab:
        """A never-used context and page in ``handle`` (a spare if one is ready)."""
        tab = handle.spares.pop() if handle.spares else await self._make_tab(handle)
        self._refill(handle)
        return tab

    def context_options(self) -> dict[str, Any]:
        """Options of every context: its traffic goes through the egress proxy, downloads and workers off."""
        return {
            "accept_downloads": False,
            "service_workers": "block",
            "java_script_enabled": True,
            "viewport": {"width": 1280, "height": 900},
            "user_agent": USER_AGENT,
            "proxy": {"server": self.egress.url, "bypass": "<-loopback>"},
        }

    async def _make_tab(self, handle: Browser) -> Tab:
        context = await handle.browser.new_context(**self.context_options())
        tab = Tab(context)
        try:
            await context.add_init_script(NO_POPUPS)
            await context.route("**/*", tab.route)
            await context.route_web_socket(lambda _url: True, tab.websocket)
            page = await context.new_page()
        except BaseException:
            await _close_quietly(context)
            raise
        page.on("dialog", lambda d: asyncio.ensure_future(_dismiss(d)))
        page.on("crash", tab.crash)
        page.on("requestfailed", tab.request_failed)
        page.on("download", tab.download)  # fired even with downloads off (the download itself is cancelled)
        tab.page = page
        try:  # the default (print) now, so that most requests need not set it
            await page.emulate_media(media="print")
        except BaseException:
            await _close_quietly(context)
            raise
        tab.media = "print"
        return tab

    def discard(self, handle: Browser, tab: Tab) -> None:
        """Close a used tab in the background: its PDF is ready, and its answer need not wait for the close."""
        task = asyncio.get_running_loop().create_task(self._close_tab(handle, tab))
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    async def _close_tab(self, handle: Browser, tab: Tab) -> None:
        try:
            async with asyncio.timeout(5):
                await tab.context.close()
        except Exception:
            if handle.alive and not handle.closed:
                log.warning("pdf: a browser context did not close; retiring the browser")
                self.retire(handle)

    def _refill(self, handle: Browser) -> None:
        loop = asyncio.get_running_loop()
        while handle.alive and not handle.retiring and len(handle.spares) + handle.making < self.spares:
            handle.making += 1
            loop.create_task(self._make_spare(handle))

    async def _make_spare(self, handle: Browser) -> None:
        try:
            tab = await self._make_tab(handle)
        except Exception as exc:  # the browser went away meanwhile
            log.debug("pdf: no spare page: %s", exc)
            return
        finally:
            handle.making -= 1
        if handle.alive and not handle.retiring and not handle.closed:
            handle.spares.append(tab)
        else:
            await _close_quietly(tab.context)

    # --- requests --------------------------------------------------------------
    def busy(self) -> ApiError:
        self.stats["rejected"] += 1
        # Each request ahead (and this one) needs a renderer for about the average request time.
        per_request = 1.0 if self._request_seconds is None else self._request_seconds
        wait = math.ceil(per_request * (self._waiting + 1) / self.concurrency)
        renderers = "the only renderer is" if self.concurrency == 1 else f"all {self.concurrency} renderers are"
        return ApiError(
            503, "BUSY",
            f"{renderers} busy and {_are(self._waiting, 'request')} waiting; "
            "retry after the number of seconds in Retry-After",
            headers={"Retry-After": str(max(1, wait))},
        )

    def take_place(self) -> Place:
        """A place in the queue, taken before the page is fetched (503 BUSY at once when every renderer and every
        place is taken): a request that will be refused must not download its page first."""
        self.check_browser()
        if self._active + self._waiting >= self.concurrency + self.queue:
            raise self.busy()
        self._waiting += 1
        return Place(time.monotonic())

    def leave(self, place: Place) -> None:
        """Give the place back (the request ended before a renderer took it); idempotent."""
        if place.held:
            place.held = False
            self._waiting -= 1

    @asynccontextmanager
    async def slot(self, deadline: float, place: Place | None = None) -> AsyncIterator[Browser]:
        """Wait (until ``deadline``, loop time) for a free renderer and yield the browser to render in. ``place``:
        the queue place the request already holds (see ``take_place``); a retry holds it again without a check."""
        if place is None:
            place = self.take_place()
        elif not place.held:
            place.held = True
            self._waiting += 1
        queued = time.monotonic()
        try:
            async with asyncio.timeout_at(deadline):
                await self._sem.acquire()
        except TimeoutError:
            raise self.busy() from None
        finally:
            self.leave(place)
        self._active += 1
        place.queued += time.monotonic() - queued
        handle: Browser | None = None
        try:
            async with self._lock:
                handle = await self._ensure()
            handle.inflight += 1
            yield handle
        finally:
            self._active -= 1
            self._sem.release()
            if handle is not None:
                handle.inflight -= 1
                self._done(handle, time.monotonic() - place.since - place.queued)

    def _done(self, handle: Browser, seconds: float) -> None:
        avg = self._request_seconds
        self._request_seconds = seconds if avg is None else 0.8 * avg + 0.2 * seconds
        handle.conversions += 1
        self.stats["conversions"] += 1
        if handle.retiring or not handle.alive:
            if handle.inflight == 0 and not handle.closed:
                asyncio.get_running_loop().create_task(self._close_browser(handle))
            return
        if self.restart_every and handle.conversions >= self.restart_every:
            self._retire(handle, "retired")
        elif handle.pid and handle.conversions % self.memory_check_every == 0:
            pss = procmem.tree_memory_mb(handle.pid)["pss_mb"]
            if pss > self.max_pss_mb:
                log.info("chromium uses %.0f MB (limit %d MB)", pss, self.max_pss_mb)
                self._retire(handle, "retired")

    def retire(self, handle: Browser) -> None:
        """Make the next request use a new browser (e.g. after a context failed to close)."""
        if not handle.retiring and not handle.closed:
            self._retire(handle, "retired")

    # --- introspection (tests, benchmark, health) -------------------------------
    def browser_pid(self) -> int | None:
        return self._current.pid if self._current is not None and self._current.alive else None

    def info(self) -> dict[str, Any]:
        cur = self._current
        mem = procmem.tree_memory_mb(cur.pid) if cur is not None and cur.pid else None
        return {
            **self.stats,
            "concurrency": self.concurrency,
            "queue": self.queue,
            "active": self._active,
            "waiting": self._waiting,
            "generation": cur.generation if cur else None,
            "browser_pid": cur.pid if cur else None,
            "browser_memory": mem,
            "spares": len(cur.spares) if cur else 0,
            "egress": dict(self.egress.stats),
        }


def browser_problem(path: Path) -> str | None:
    """Why ``path`` cannot be the browser binary, or None when it may be."""
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_file() or not os.access(path, os.X_OK):
        return f"{path} is not an executable file"
    return None


OWNER = ".owner"  # in each process's directory: flocked by its pool while it lives


def claim_tmp_dir(root: Path) -> tuple[Path, int]:
    """A new directory of this process under ``root`` and the fd of its held lock, after removing the directories
    whose owner is gone (killed: nothing else removes them)."""
    root.mkdir(parents=True, exist_ok=True)
    guard = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        # One sweep or claim at a time: a directory just made is not locked yet, and must not look abandoned.
        fcntl.flock(guard, fcntl.LOCK_EX)
        for entry in root.iterdir():
            if entry.is_dir() and not _owned(entry):
                log.info("pdf: removing %s, left by a process that is gone", entry)
                remove_browser_tmp(entry)
                shutil.rmtree(entry, ignore_errors=True)
        mine = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        lock = os.open(mine / OWNER, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited: only this process holds it
        fcntl.flock(lock, fcntl.LOCK_EX)
    finally:
        os.close(guard)
    return mine, lock


BROWSER_TMP = "browser-tmp"  # in each process's directory: the path of its browser's TMPDIR
BROWSER_TMP_PREFIX = "cw-"
# What full Chromium adds under its TMPDIR: org.chromium.Chromium.XXXXXX/SingletonSocket (sun_path: 107 bytes).
SOCKET_TAIL = len("/org.chromium.Chromium.XXXXXX/SingletonSocket")
SOCKET_MAX = 107


def claim_browser_tmp(mine: Path) -> Path | None:
    """A short directory for Chromium's TMPDIR in the system's temp directory, named after ``mine`` (this process's
    directory, which records it first: a kill at any point leaves nothing unrecorded). None when there is no room
    under the socket limit or it cannot be made: Chromium then gets the server's TMPDIR, as it would anyway."""
    path = Path(tempfile.gettempdir()) / f"{BROWSER_TMP_PREFIX}{mine.name}"
    if len(os.fsencode(path)) + SOCKET_TAIL > SOCKET_MAX:
        log.info("pdf: the system temp directory %s is too long for a browser directory of its own", path.parent)
        return None
    try:
        (mine / BROWSER_TMP).write_text(str(path))
        path.mkdir(mode=0o700)  # never an existing one: it would be another program's
    except OSError as exc:
        log.warning("pdf: cannot make %s for the browser's temp files (%s); it gets the server's TMPDIR", path, exc)
        return None
    return path


def remove_browser_tmp(mine: Path) -> None:
    """Remove the browser TMPDIR recorded in ``mine`` (a directory whose owner is gone, or this process's own at
    close). Only a directory of this user, named as claim_browser_tmp names it after ``mine``, is removed."""
    try:
        path = Path((mine / BROWSER_TMP).read_text())
    except (OSError, ValueError):
        return
    try:
        st = path.lstat()
    except OSError:
        return
    if path.name != f"{BROWSER_TMP_PREFIX}{mine.name}" or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        log.warning("pdf: leaving %s, recorded in %s but not a browser directory of this server", path, mine)
        return
    shutil.rmtree(path, ignore_errors=True)


def _owned(directory: Path) -> bool:
    """Whether a live process (this one included) holds the directory's lock."""
    try:
        fd = os.open(directory / OWNER, os.O_RDONLY)
    except FileNotFoundError:  # its process was killed before it took the lock
        return False
    except OSError as exc:  # another user's, say: not ours to remove
        log.warning("pdf: leaving %s, its owner cannot be checked (%s)", directory, exc)
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


_env_lock = threading.Lock()  # TMPDIR is one per process: one driver start at a time may change it


@asynccontextmanager
async def _tmpdir_env(path: Path | None) -> AsyncIterator[None]:
    """TMPDIR set to ``path`` while a Playwright driver starts (it copies our environment)."""
    if path is None:
        yield
        return
    while not _env_lock.acquire(blocking=False):  # polled: the holder may run on another thread's loop
        await asyncio.sleep(0.02)
    tempfile.gettempdir()  # Python's own temp directory stays where it is (read from TMPDIR once, then cached)
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        _env_lock.release()


def _are(n: int, noun: str) -> str:
    """``1 request is`` / ``3 requests are``."""
    return f"{n} {noun} is" if n == 1 else f"{n} {noun}s are"


async def _close_quietly(context: Any) -> None:
    try:
        async with asyncio.timeout(5):
            await context.close()
    except Exception:
        pass
