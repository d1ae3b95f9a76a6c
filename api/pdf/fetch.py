"""HTTP fetches on the renderer's behalf: every hop checked by the policy and connected to its pinned address.

Chromium itself never opens a connection: each request it makes is intercepted and answered with the result of
``Fetcher.fetch``. Redirects are followed here, hop by hop, each hop checked like a fresh URL.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from dataclasses import dataclass, field
from urllib.parse import urljoin

import httpx

from api.errors import ApiError
from api.pdf.ssrf import BadUrl, Blocked, Pinned, Policy, Url, parse_url

MAX_REDIRECTS = 10
REDIRECTS = (301, 302, 303, 307, 308)
# Headers that describe one connection or one encoding, not the resource; never copied across.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
    "content-encoding",
    "accept-encoding",
}


class TooLarge(ApiError):
    def __init__(self, what: str, limit: int) -> None:
        super().__init__(502, "UPSTREAM_TOO_LARGE", f"{what} is larger than {limit // (1024 * 1024)} MB")


class Unreachable(ApiError):
    def __init__(self, url: str, detail: str) -> None:
        super().__init__(502, "UPSTREAM_UNREACHABLE", f"could not fetch {url}: {detail}")


class BadRedirect(ApiError):
    def __init__(self, url: str, location: str, detail: str) -> None:
        super().__init__(
            502, "UPSTREAM_BAD_REDIRECT",
            f"the page {url} redirects to {location[:200]!r}, which is not a valid URL ({detail}); the page's server "
            "must fix its redirect, or render the URL it meant",
        )


def redirect_target(url: Url, location: str) -> Url:
    """Where a redirect from ``url`` leads. The origin chose ``location``, not the client: an invalid one is a 502
    (not the client's 400), and one to a refused scheme (``file:``) is a blocked hop (403)."""
    try:
        joined = urljoin(url.url, location)
    except ValueError as exc:  # an unclosed or stray bracket: "http://[::1", "//[bad"
        raise BadRedirect(url.url, location, str(exc)) from None
    try:
        return parse_url(joined, "the redirect's URL")
    except BadUrl as exc:
        if exc.code == "UNSUPPORTED_SCHEME":
            raise Blocked(f"the redirect from {url.url} to {location[:200]!r} was refused: only http:// and "
                          "https:// pages are rendered") from None
        raise BadRedirect(url.url, location, exc.message) from None


@dataclass
class Fetched:
    url: Url  # the final URL, after redirects
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    hops: list[str] = field(default_factory=list)  # every URL fetched, in order

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


@dataclass
class Budget:
    """Limits for one render: bytes per response, bytes in total, number of requests."""

    max_response: int = 25 * 1024 * 1024
    max_total: int = 100 * 1024 * 1024
    max_requests: int = 1000
    used_bytes: int = 0
    requests: int = 0


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one loads the system's CA bundle, which took ~45 ms of CPU
    — more than half of the server's share of a conversion when every render built its own."""
    return ssl.create_default_context()


class Fetcher:
    """One per render: its own connections (nothing pooled across requests), closed with ``aclose``."""

    def __init__(self, policy: Policy, user_agent: str, budget: Budget | None = None) -> None:
        self.policy = policy
        self.user_agent = user_agent
        self.budget = budget or Budget()
        self._transport = httpx.AsyncHTTPTransport(verify=_tls_context(), retries=0, trust_env=False)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def fetch(
        self,
        method: str,
        target: str | Url,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30.0,
        what: str = "url",
    ) -> Fetched:
        """Fetch ``target`` following redirects; raises ``Blocked``/``BadUrl``/``DnsFailure``/``Unreachable``."""
        url = target if isinstance(target, Url) else parse_url(target, what)
        sent = {k.lower(): v for k, v in (headers or {}).items() if k.lower() not in HOP_BY_HOP}
        sent.setdefault("user-agent", self.user_agent)
        sent["accept-encoding"] = "gzip, deflate"  # what httpx can decode without extra packages
        hops: list[str] = []
        for _ in range(MAX_REDIRECTS + 1):
            try:
                pinned = await self.policy.pin(url, what)
            except Blocked as exc:
                if not hops:
                    raise
                raise Blocked(f"the redirect from {hops[-1]} to {url.url} was refused: {exc.message}") from None
            hops.append(url.url)
            status, reason, resp_headers, data = await self._once(pinned, method, sent, body, timeout)
            location = _first(resp_headers, "location")
            if status not in REDIRECTS or not location:
                return Fetched(url, status, reason, resp_headers, data, hops)
            nxt = redirect_target(url, location)
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", None
                sent = {k: v for k, v in sent.items() if k not in ("content-type",)}
            if nxt.origin != url.origin:  # credentials never follow a redirect to another origin
                sent = {k: v for k, v in sent.items() if k not in ("cookie", "authorization")}
            url = nxt
        raise Unreachable(url.url, f"more than {MAX_REDIRECTS} redirects")

    async def _once(
        self, pinned: Pinned, method: str, headers: dict[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        b = self.budget
        b.requests += 1
        if b.requests > b.max_requests:
            raise Unreachable(pinned.url.url, f"the page made more than {b.max_requests} requests")
        request = httpx.Request(
            method,
            pinned.connect_url,
            headers={**headers, "host": pinned.url.netloc},
            content=body,
            extensions={
                "sni_hostname": pinned.url.host,
                "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout},
            },
        )
        try:
            async with asyncio.timeout(timeout):
                response = await self._transport.handle_async_request(request)
                try:
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        b.used_bytes += len(chunk)
                        if size > b.max_response:
                            raise TooLarge(f"the response from {pinned.url.url}", b.max_response)
                        if b.used_bytes > b.max_total:
                            raise TooLarge("the page with all its resources", b.max_total)
                        chunks.append(chunk)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise Unreachable(pinned.url.url, f"no complete answer within {timeout:.1f} s") from None
        except httpx.HTTPError as exc:
            raise Unreachable(pinned.url.url, _describe(exc)) from None
        reason = response.extensions.get("reason_phrase", b"")
        reason_text = reason.decode("latin-1") if isinstance(reason, bytes) else str(reason)
        pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.headers.raw]
        return response.status_code, reason_text, pairs, b"".join(chunks)


def _first(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k == name), None)


def _describe(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed ({text})"
    return text
