"""Fetching feeds concurrently: httpx for http(s), the disk for ``file:`` URLs.

Per run: at most ``fetch_concurrency`` feeds at once, connect/read timeouts, one total deadline, bodies
streamed and cut at ``fetch_max_bytes`` (what arrived is kept and marked ``truncated``), at most
``fetch_max_redirects`` redirects, an honest User-Agent, conditional GET with the validators remembered from
the last good fetch (a 304 is reported as ``not_modified`` and costs no parsing), and retries with
exponential backoff on timeouts and 5xx answers only (never on 4xx, refused connections or bad redirects),
waiting as long as a 5xx's Retry-After asks (up to ``RETRY_AFTER_MAX``).

Hostile answers: a body is decoded from at most one gzip/deflate layer, as it arrives, never past the cap; a
validator that is not a sane header value is neither sent nor kept; a redirect into a more private address
class than the configured URL's (public -> private -> loopback; link-local always) is refused; a local path
that is not a regular file (a FIFO, a device) is refused, and files are read off the event loop. Credentials
in a feed URL are used for the request only: every URL this module logs or reports is redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import os
import random
import socket
import ssl
import stat
import time
import zlib
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache
from typing import Any, TypeVar

import httpx

from pipeline.ingest.feeds import local_path, redact
from warehouse.config import Settings
from warehouse.db import utcnow

log = logging.getLogger(__name__)


class _Redacted(logging.Filter):
    """httpx logs each request's URL (at INFO), credentials included."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), ()
        return True


logging.getLogger("httpx").addFilter(_Redacted())

BACKOFF_SECONDS = 0.5  # first retry waits about this long, then doubles (plus jitter)
BACKOFF_MAX = 8.0
ACCEPT = "application/rss+xml, application/atom+xml, application/rdf+xml;q=0.9, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5"
ACCEPT_ENCODING = "gzip, deflate"  # the codings _Inflate reads
CHUNK = 64 * 1024
POOL_SIZE = 4  # connections per httpx client (see fetch_all)
MAX_VALIDATOR = 512  # longer ETag / Last-Modified values are not sent back (servers answer 431) nor kept
RETRY_AFTER_MAX = 30.0  # a 5xx asking for a longer wait is not retried in this run: the next poll tries again

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
    def shown_url(self) -> str:
        return redact(self.url)

    @property
    def nbytes(self) -> int | None:
        if self.body is not None:
            return len(self.body)
        return 0 if self.not_modified else None


class _Retryable(Exception):
    """An attempt that may succeed if tried again (timeout, 5xx); ``wait``: seconds its Retry-After asks for."""

    def __init__(self, message: str, wait: float | None = None, shown_wait: str = "") -> None:
        super().__init__(message)
        self.wait, self.shown_wait = wait, shown_wait


class _Refused(Exception):
    """An answer neither read nor retried: a redirect into a private network, a body compressed twice over."""


def _retry_after(value: str | None) -> tuple[float | None, str]:
    """The seconds a Retry-After asks for (None: absent or unreadable), and how to show them."""
    value = (value or "").strip()
    if value.isdigit():
        return float(value), f" {value} s"
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None, ""
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds()), f" until {when.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _header_value(value: str | None) -> str | None:
    """``value`` when it can be sent back as a header (printable ASCII, not too long), else None."""
    if value and len(value) <= MAX_VALIDATOR and value.isascii() and value.isprintable():
        return value
    return None


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
        return f"{error}: the publisher asks to wait{_retry_after(retry_after)[1]} (Retry-After); poll it less often"
    if status in (401, 403):
        return f"{error}: the publisher refuses this client; check the url, or set enabled: false"
    return error


def _redirected(resp: httpx.Response, error: str) -> str:
    """``error``, for an answer reached through redirects, naming the URL that gave it: the url in the feeds file
    still redirects, so it is that url (or the publisher's redirect) that needs fixing, not a missing feed there."""
    hops = ", ".join(str(r.status_code) for r in resp.history)
    via = f"redirected (HTTP {hops}) to {redact(str(resp.url))}, which answered"
    if resp.status_code in (404, 410):
        return (f"{via} {f'HTTP {resp.status_code} {resp.reason_phrase}'.strip()}: the redirect leads to no feed; "
                "fix the feed's url in the feeds file (or tell the publisher its redirect is broken), "
                "or set enabled: false")
    return f"{via} {error}"


# Address classes, from the most public: a redirect may not lead into a class above the configured URL's.
PUBLIC, PRIVATE, LOOPBACK, LINK_LOCAL = range(4)
_CLASS_NAMES = ("a public address", "a private-network address", "a loopback address (this machine)",
                "a link-local address (cloud metadata lives there)")


def _ip_class(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> int:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_link_local:
        return LINK_LOCAL
    if ip.is_loopback or ip.is_unspecified:  # 0.0.0.0 reaches this machine too
        return LOOPBACK
    return PUBLIC if ip.is_global and not ip.is_multicast else PRIVATE


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0].split("%", 1)[0] for info in infos]


async def _address_class(url: httpx.URL) -> int | None:
    """The most private class among the addresses ``url``'s host stands for; None when it does not resolve."""
    try:
        addresses = [url.host] if _is_ip(url.host) else await _resolve(url.host, url.port or 80)
    except OSError:
        return None
    return max((_ip_class(ipaddress.ip_address(a)) for a in addresses), default=None)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def _check_redirect(origin: httpx.URL, target: httpx.URL, hops: list[httpx.Response]) -> None:
    """Refuse a redirect into a more private address class than the configured URL's (SSRF): a public feed must
    not send the fetcher to this machine, the local network or the cloud metadata service. Known limit: the name
    is resolved again to connect (DNS rebinding can still switch it)."""
    if target.scheme not in ("http", "https"):
        return  # httpx refuses these itself
    to = await _address_class(target)
    if to is None:
        return  # unresolvable: the request fails on its own
    start = await _address_class(origin)
    start = PUBLIC if start is None else start
    if to == LINK_LOCAL or to > start:
        codes = ", ".join(str(r.status_code) for r in hops)
        raise _Refused(
            f"redirected (HTTP {codes}) to {redact(str(target))}, {_CLASS_NAMES[to]}, from {_CLASS_NAMES[start]}: "
            "refused, a redirect may not lead into a more private network (nor ever to a link-local address); if "
            "the feed really lives there, put that url in the feeds file")


async def _send(client: httpx.AsyncClient, url: str, headers: dict[str, str], max_redirects: int) -> httpx.Response:
    """GET ``url``, following redirects one by one so that each is checked before it is requested. The response
    is open (streamed, with ``history`` set as httpx sets it): the caller closes it."""
    request = client.build_request("GET", url, headers=headers)
    history: list[httpx.Response] = []
    while True:
        resp = await client.send(request, stream=True, follow_redirects=False)
        if resp.next_request is None:
            resp.history = history
            return resp
        await resp.aclose()  # a redirect's body is never read
        history.append(resp)
        if len(history) > max_redirects:
            raise httpx.TooManyRedirects("Exceeded maximum allowed redirects.", request=request)
        request = resp.next_request
        await _check_redirect(history[0].url, request.url, history)


class _Inflate:
    """One gzip or deflate layer, decoded as the body arrives and at most ``limit`` bytes per call: a few KB can
    expand to gigabytes, and httpx would decode a whole chunk at once."""

    def __init__(self, coding: str) -> None:
        self._z = zlib.decompressobj(zlib.MAX_WBITS | 16 if coding in ("gzip", "x-gzip") else zlib.MAX_WBITS)
        self._raw_deflate = coding == "deflate"  # some servers send deflate without its zlib header (as httpx)

    def decode(self, data: bytes, limit: int) -> bytes:
        try:
            out = self._z.decompress(data, limit)
        except zlib.error as exc:
            if not self._raw_deflate:
                raise httpx.DecodingError(str(exc)) from None
            self._z, self._raw_deflate = zlib.decompressobj(-zlib.MAX_WBITS), False
            return self.decode(data, limit)
        self._raw_deflate = False
        return out


def _decoder(resp: httpx.Response) -> _Inflate | None:
    codings = [c.strip().lower() for c in resp.headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if len(codings) > 1:
        raise _Refused(
            f"the body is compressed {len(codings)} times over (Content-Encoding: {', '.join(codings)}): refused, "
            "a few KB stacked so can expand to gigabytes; one layer of gzip or deflate is read (tell the publisher, "
            "or set enabled: false)")
    if not codings or codings[0] not in ("gzip", "x-gzip", "deflate", "br", "zstd", "compress"):
        return None  # none, or a label that is no compression ("utf-8"): the body as it is, as httpx reads it
    if codings[0] in ("br", "zstd", "compress"):
        raise _Refused(f"the body is compressed with {codings[0]}, which was not asked for (Accept-Encoding: "
                       f"{ACCEPT_ENCODING}) and is not read; tell the publisher, or set enabled: false")
    return _Inflate(codings[0])


async def _read_body(resp: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """The decoded body up to ``cap`` bytes, and whether more followed (then it is cut there)."""
    inflate = _decoder(resp)
    buf = bytearray()
    async for raw in resp.aiter_raw(CHUNK):
        buf += inflate.decode(raw, cap + 1 - len(buf)) if inflate else raw
        if len(buf) > cap:
            break
    return bytes(buf[:cap]), len(buf) > cap


async def _http_once(
    client: httpx.AsyncClient, out: Fetched, validators: Validators | None, settings: Settings
) -> None:
    headers: dict[str, str] = {}
    if validators:  # a value no server would take back (non-ASCII, huge) is dropped: it failed every later run
        etag, last_modified = (_header_value(v) for v in validators)
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
    resp = await _send(client, out.url, headers, settings.fetch_max_redirects)
    try:
        out.status = resp.status_code
        out.final_url = redact(str(resp.url), "")  # the base of relative links: without credentials
        if resp.status_code == 304:
            out.not_modified = True
            out.body = None
            await resp.aread()  # empty; reading it hands the connection back to the pool for reuse
            return
        if resp.status_code >= 500:
            error = f"HTTP {resp.status_code} {resp.reason_phrase}".strip()
            wait, shown = _retry_after(resp.headers.get("retry-after"))
            raise _Retryable(_redirected(resp, error) if resp.history else error, wait, shown)
        if not 200 <= resp.status_code < 300:
            out.error = _http_error(resp.status_code, resp.reason_phrase, resp.headers.get("retry-after"))
            if resp.history:  # the url in the feeds file redirects: name where to, and who answered the error
                out.error = _redirected(resp, out.error)
            return
        out.body, out.truncated = await _read_body(resp, settings.fetch_max_bytes)
        out.etag = _header_value(resp.headers.get("etag"))
        out.last_modified = _header_value(resp.headers.get("last-modified"))
        out.content_type = resp.headers.get("content-type")
    finally:
        await resp.aclose()


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
        asked: _Retryable | None = None
        try:
            await _http_once(client, out, validators, settings)
            return
        except _Retryable as exc:
            out.error, asked = str(exc), exc
        except httpx.TimeoutException as exc:
            out.error = f"{_timeout_kind(exc)} timeout"
        except httpx.TooManyRedirects:
            out.error = f"more than {settings.fetch_max_redirects} redirects (a redirect loop?)"
            return
        except _Refused as exc:
            out.error = str(exc)
            return
        except httpx.HTTPError as exc:  # refused, reset, bad URL, protocol errors: not retried
            out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return
        if attempt == settings.fetch_retries:
            break
        pause = min(BACKOFF_SECONDS * 2**attempt, BACKOFF_MAX) * (1 + random.random() / 4)
        if asked is not None and asked.wait is not None:  # the publisher said how long: not sooner
            if asked.wait > RETRY_AFTER_MAX or time.monotonic() + asked.wait >= deadline:
                out.error += f": the publisher asks to wait{asked.shown_wait} (Retry-After); not retried in this run"
                break
            pause = max(pause, asked.wait)
        if time.monotonic() + pause >= deadline:
            break
        log.info("retrying %s in %.1fs after: %s", out.shown_url, pause, out.error)
        await asyncio.sleep(pause)
    if out.attempts > 1:
        out.error = f"{out.error} (after {out.attempts} attempts)"


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a device"),
               (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _read_file(url: str, known: str | None, cap: int) -> tuple[bytes | None, str | None, str | None]:
    """A local feed: ``(body, validator, error)``, the body up to ``cap`` + 1 bytes, or None when the file is unchanged
    since ``known``. Its validator is ``file:mtime_ns:size``. Only a regular file is read: opened without blocking
    and checked once open, a FIFO or a device would hang the run or never end."""
    path = local_path(url)
    assert path is not None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, None, f"no such file: {path}"
    except OSError as exc:
        return None, None, f"cannot read {path}: {exc.strerror or exc}"
    with open(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a file")
            return None, None, f"cannot read {path}: it is {kind}, not a regular file; point the feed at a file"
        stamp = f"file:{st.st_mtime_ns}:{st.st_size}"
        if known == stamp:
            return None, stamp, None
        try:
            return fh.read(cap + 1), stamp, None
        except OSError as exc:
            return None, None, f"cannot read {path}: {exc.strerror or exc}"


async def _fetch_file(out: Fetched, validators: Validators | None, cap: int) -> None:
    out.attempts = 1
    # In a thread: a slow disk must not stop the event loop, or the run deadline could never fire.
    data, stamp, out.error = await asyncio.to_thread(_read_file, out.url, validators[1] if validators else None, cap)
    out.last_modified = stamp
    if data is None:
        out.not_modified = out.error is None
        return
    out.truncated = len(data) > cap
    out.body = data[:cap]


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
    headers = {"User-Agent": settings.user_agent, "Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING}
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
                    follow_redirects=False,  # followed one by one, each checked (_send)
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
                        await _fetch_file(out, validators.get(url), settings.fetch_max_bytes)
                    else:
                        await _fetch_http(client, out, validators.get(url), settings, deadline)
                except Exception as exc:  # e.g. httpx.InvalidURL: whatever it is, it stays with this feed
                    # the traceback only when it cannot hold the feed's credentials (exception texts quote URLs)
                    log.error("fetching %s failed: %s", out.shown_url, redact(f"{type(exc).__name__}: {exc}"),
                              exc_info=out.shown_url == url)
                    out.error, out.body = f"{type(exc).__name__}: {exc}", None
                finally:
                    out.duration_ms = (time.perf_counter() - t0) * 1000
                    free[shard] += 1
                    if out.error is not None:
                        out.error = redact(out.error)
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
