"""Fetching feeds concurrently: httpx for http(s), the disk for ``file:`` URLs.

Per run: at most ``fetch_concurrency`` feeds at once, connect/read timeouts, one total deadline, bodies
streamed and cut at ``fetch_max_bytes`` (what arrived is kept and marked ``truncated``), at most
``fetch_max_redirects`` redirects, an honest User-Agent, conditional GET with the validators remembered from
the last good fetch (a 304 is reported as ``not_modified`` and costs no parsing), and retries with
exponential backoff on timeouts and 5xx answers only (never on 4xx, refused connections or bad redirects).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import ssl
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

import httpx

from pipeline.ingest.feeds import local_path
from warehouse.config import Settings
from warehouse.db import utcnow

log = logging.getLogger(__name__)

BACKOFF_SECONDS = 0.5  # first retry waits about this long, then doubles (plus jitter)
BACKOFF_MAX = 8.0
ACCEPT = "application/rss+xml, application/atom+xml, application/rdf+xml;q=0.9, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5"
CHUNK = 64 * 1024
POOL_SIZE = 4  # connections per httpx client (see fetch_all)

# (etag, last_modified) remembered from the last good fetch of a feed URL.
Validators = tuple[str | None, str | None]


@dataclass
class Fetched:
    """What fetching one feed gave: a body, a 304, or an error (never an exception)."""

    url: str
    started_at: datetime
    duration_ms: float = 0.0
    status: int | None = None
    body: bytes | None = None
    not_modified: bool = False
    truncated: bool = False
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None
    final_url: str | None = None
    attempts: int = 0
    error: str | None = None

    @property
    def nbytes(self) -> int | None:
        if self.body is not None:
            return len(self.body)
        return 0 if self.not_modified else None


class _Retryable(Exception):
    """An attempt that may succeed if tried again (timeout, 5xx)."""


def _timeout_kind(exc: httpx.TimeoutException) -> str:
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect"
    if isinstance(exc, httpx.ReadTimeout):
        return "read"
    if isinstance(exc, httpx.WriteTimeout):
        return "write"
    return "pool"


def _http_error(status: int, reason: str, retry_after: str | None) -> str:
    """The feed's error as `status` shows it, with what to do for the answers a feed's owner can act on."""
    error = f"HTTP {status} {reason}".strip()
    if status in (404, 410):
        return f"{error}: the feed is no longer at this url; fix it in the feeds file or set enabled: false"
    if status == 429:
        wait = f" {retry_after.strip()} s" if retry_after and retry_after.strip().isdigit() else ""
        return f"{error}: the publisher asks to wait{wait} (Retry-After); poll it less often"
    if status in (401, 403):
        return f"{error}: the publisher refuses this client; check the url, or set enabled: false"
    return error


def _redirected(resp: httpx.Response, error: str) -> str:
    """``error``, for an answer reached through redirects, naming the URL that gave it: the url in the feeds file
    still redirects, so it is that url (or the publisher's redirect) that needs fixing, not a missing feed there."""
    hops = ", ".join(str(r.status_code) for r in resp.history)
    via = f"redirected (HTTP {hops}) to {resp.url}, which answered"
    if resp.status_code in (404, 410):
        return (f"{via} {f'HTTP {resp.status_code} {resp.reason_phrase}'.strip()}: the redirect leads to no feed; "
                "fix the feed's url in the feeds file (or tell the publisher its redirect is broken), "
                "or set enabled: false")
    return f"{via} {error}"


async def _http_once(
    client: httpx.AsyncClient, out: Fetched, validators: Validators | None, cap: int
) -> None:
    headers: dict[str, str] = {}
    if validators:
        etag, last_modified = validators
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
    async with client.stream("GET", out.url, headers=headers) as resp:
        out.status = resp.status_code
        out.final_url = str(resp.url)
        if resp.status_code == 304:
            out.not_modified = True
            out.body = None
            await resp.aread()  # empty; reading it hands the connection back to the pool for reuse
            return
        if resp.status_code >= 500:
            error = f"HTTP {resp.status_code} {resp.reason_phrase}".strip()
            raise _Retryable(_redirected(resp, error) if resp.history else error)
        if not 200 <= resp.status_code < 300:
            out.error = _http_error(resp.status_code, resp.reason_phrase, resp.headers.get("retry-after"))
            if resp.history:  # the url in the feeds file redirects: name where to, and who answered the error
                out.error = _redirected(resp, out.error)
            return
        buf = bytearray()
        chunks = resp.aiter_bytes(CHUNK)
        async for chunk in chunks:
            room = cap - len(buf)
            if len(chunk) > room:
                buf += chunk[:room]
                out.truncated = True
                break
            buf += chunk
            if len(buf) == cap:  # exactly at the cap: truncated only if anything follows
                async for rest in chunks:
                    if rest:
                        out.truncated = True
                        break
                break
        out.body = bytes(buf)
        out.etag = resp.headers.get("etag")
        out.last_modified = resp.headers.get("last-modified")
        out.content_type = resp.headers.get("content-type")


async def _fetch_http(
    client: httpx.AsyncClient,
    out: Fetched,
    validators: Validators | None,
    settings: Settings,
    deadline: float,
) -> None:
    for attempt in range(settings.fetch_retries + 1):
        out.attempts = attempt + 1
        out.status, out.error, out.truncated = None, None, False
        try:
            await _http_once(client, out, validators, settings.fetch_max_bytes)
            return
        except _Retryable as exc:
            out.error = str(exc)
        except httpx.TimeoutException as exc:
            out.error = f"{_timeout_kind(exc)} timeout"
        except httpx.TooManyRedirects:
            out.error = f"more than {settings.fetch_max_redirects} redirects (a redirect loop?)"
            return
        except httpx.HTTPError as exc:  # refused, reset, bad URL, protocol errors: not retried
            out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return
        if attempt == settings.fetch_retries:
            break
        pause = min(BACKOFF_SECONDS * 2**attempt, BACKOFF_MAX) * (1 + random.random() / 4)
        if time.monotonic() + pause >= deadline:
            break
        log.info("retrying %s in %.1fs after: %s", out.url, pause, out.error)
        await asyncio.sleep(pause)
    if out.attempts > 1:
        out.error = f"{out.error} (after {out.attempts} attempts)"


def _read_file(out: Fetched, validators: Validators | None, cap: int) -> None:
    """A local feed; its validator is ``mtime_ns:size`` kept as last_modified (unchanged file: not modified)."""
    path = local_path(out.url)
    assert path is not None
    out.attempts = 1
    try:
        st = path.stat()
        stamp = f"file:{st.st_mtime_ns}:{st.st_size}"
        if validators and validators[1] == stamp:
            out.not_modified = True
            return
        with path.open("rb") as fh:
            data = fh.read(cap + 1)
    except FileNotFoundError:
        out.error = f"no such file: {path}"
        return
    except OSError as exc:
        out.error = f"cannot read {path}: {exc.strerror or exc}"
        return
    out.truncated = len(data) > cap
    out.body = data[:cap]
    out.last_modified = stamp


async def fetch_all(
    urls: list[str],
    settings: Settings,
    validators: dict[str, Validators] | None = None,
    on_done: Callable[[Fetched], None] | None = None,
) -> dict[str, Fetched]:
    """Fetch every URL (each once); ``on_done`` runs as each one finishes, so work overlaps the network."""
    validators = validators or {}
    loop_start = time.monotonic()
    deadline = loop_start + settings.fetch_deadline
    sem = asyncio.Semaphore(max(1, settings.fetch_concurrency))
    results: dict[str, Fetched] = {}
    timeout = httpx.Timeout(
        connect=settings.fetch_connect_timeout,
        read=settings.fetch_read_timeout,
        write=settings.fetch_read_timeout,
        pool=settings.fetch_deadline,
    )
    headers = {"User-Agent": settings.user_agent, "Accept": ACCEPT}
    # Several small connection pools rather than one big one: httpcore checks every pooled connection
    # on each request, so per-request cost grows with pool size (measured: 4 pools of 4 use about half
    # the CPU of 1 pool of 16). The semaphore bounds the total; each fetch takes the least busy pool.
    concurrency = max(1, settings.fetch_concurrency)
    n_clients = math.ceil(concurrency / POOL_SIZE)
    per_client = math.ceil(concurrency / n_clients)
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)

    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    verify=_ssl_context(),
                    timeout=timeout,
                    limits=limits,
                    headers=headers,
                    follow_redirects=True,
                    max_redirects=settings.fetch_max_redirects,
                    trust_env=False,  # feeds are fetched directly; a stray HTTP_PROXY must not reroute them
                )
            )
            for _ in range(n_clients)
        ]

        free = [per_client] * n_clients  # open slots per pool; the semaphore guarantees one is free

        async def one(url: str) -> None:
            async with sem:
                shard = max(range(n_clients), key=free.__getitem__)
                client = clients[shard]
                free[shard] -= 1
                out = Fetched(url=url, started_at=utcnow())
                results[url] = out
                t0 = time.perf_counter()
                try:
                    if local_path(url) is not None:
                        _read_file(out, validators.get(url), settings.fetch_max_bytes)
                    else:
                        await _fetch_http(client, out, validators.get(url), settings, deadline)
                except Exception as exc:  # e.g. httpx.InvalidURL: whatever it is, it stays with this feed
                    log.exception("fetching %s failed", url)
                    out.error, out.body = f"{type(exc).__name__}: {exc}", None
                finally:
                    out.duration_ms = (time.perf_counter() - t0) * 1000
                    free[shard] += 1
            if on_done is not None:
                on_done(out)

        tasks = [asyncio.create_task(one(u)) for u in dict.fromkeys(urls)]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            for task in tasks:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]  # a bug in on_done, not a feed fault

    for url in urls:
        out = results.get(url)
        if out is None:
            results[url] = Fetched(
                url=url,
                started_at=utcnow(),
                error=f"not fetched: run deadline of {settings.fetch_deadline:g}s reached",
            )
        elif out.body is None and not out.not_modified and out.error is None:
            out.error = f"run deadline of {settings.fetch_deadline:g}s reached"
            out.status = None
    return results


@lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle takes ~50 ms; a run that gets only 304s should not pay it every time.
    return httpx.create_ssl_context()


T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even when the caller already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
