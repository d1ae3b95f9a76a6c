"""Destination policy for the PDF renderer: which URLs it may fetch, resolved once and pinned.

Every request (the page, its redirects, subresources, frames, fetch/XHR) goes through ``Policy.pin``: the URL is
parsed strictly, the host is resolved exactly once, every resolved address is checked, and the caller connects to
the checked address (``Pinned.ip``) — never to a name resolved again later, so DNS rebinding cannot switch it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from api.errors import ApiError

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], Awaitable[list[IP]]]

MAX_URL_CHARS = 4096
DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_HOST_CHARS = re.compile(r"^[a-z0-9._\-]+$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_DOTTED_QUAD = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$")
_CANONICAL_V4 = re.compile(r"^(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}$")

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")


class BadUrl(ApiError):
    def __init__(self, message: str, code: str = "INVALID_PARAMETER") -> None:
        super().__init__(400, code, message)


class Blocked(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(403, "BLOCKED_DESTINATION", message)


class DnsFailure(ApiError):
    def __init__(self, host: str, detail: str) -> None:
        super().__init__(502, "DNS_FAILURE", f"could not resolve host {host!r} ({detail}); check the URL")


@dataclass(frozen=True)
class Url:
    scheme: str  # lower case: http or https
    host: str  # lower case, no brackets, no trailing dot; IDNA (punycode) for names
    port: int
    path_query: str  # "/path?query", never empty
    fragment: str
    ip: IP | None  # set when the host is an IP literal

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if isinstance(self.ip, ipaddress.IPv6Address) else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.netloc}"

    @property
    def url(self) -> str:
        """The canonical form, without fragment: what is fetched."""
        return f"{self.origin}{self.path_query}"


@dataclass(frozen=True)
class Pinned:
    url: Url
    ip: IP  # the checked address to connect to

    @property
    def connect_url(self) -> str:
        """The URL with the host replaced by the pinned address (send ``Host``/SNI = ``url.host``)."""
        host = f"[{self.ip}]" if isinstance(self.ip, ipaddress.IPv6Address) else str(self.ip)
        return f"{self.url.scheme}://{host}:{self.url.port}{self.url.path_query}"


def parse_url(raw: str, what: str = "url") -> Url:
    """Parse an absolute http(s) URL strictly; raise ``BadUrl`` (400) or ``Blocked`` (403, odd IP spellings)."""
    if not isinstance(raw, str) or not raw:
        raise BadUrl(f"`{what}` must be an absolute http:// or https:// URL")
    if len(raw) > MAX_URL_CHARS:
        raise BadUrl(f"`{what}` is longer than {MAX_URL_CHARS} characters")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in raw) or "\\" in raw:
        raise BadUrl(f"`{what}` contains whitespace, control characters or backslashes; percent-encode them")
    m = _SCHEME.match(raw)
    scheme = m.group(1).lower() if m else ""
    if scheme not in DEFAULT_PORTS:
        shown = f"`{scheme}:`" if scheme else "no scheme"
        raise BadUrl(
            f"`{what}` has {shown}; only absolute http:// and https:// URLs can be rendered "
            "(file:, data:, javascript:, view-source:, chrome: and others are refused)",
            code="UNSUPPORTED_SCHEME",
        )
    rest = raw[len(scheme) + 1 :]
    if not rest.startswith("//"):
        raise BadUrl(f"`{what}` must be absolute: {scheme}://host/path")
    try:
        parts = urlsplit(scheme + ":" + rest)
    except ValueError as exc:  # an unclosed or stray bracket: "http://[::1/", "http://]/"
        raise BadUrl(f"`{what}` is not a valid URL ({exc}); an IPv6 address goes in brackets: "
                     "http://[2001:db8::1]/") from None
    netloc = parts.netloc
    if "@" in netloc:
        raise BadUrl(f"`{what}` contains credentials (user@host); they are not allowed")
    try:
        port = parts.port
    except ValueError:
        raise BadUrl(f"`{what}` has an invalid port; use a number from 1 to 65535") from None
    if port == 0:
        raise BadUrl(f"`{what}` has an invalid port; use a number from 1 to 65535")
    host, ip = _parse_host(netloc, what)
    path_query = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Url(scheme, host, port or DEFAULT_PORTS[scheme], path_query, parts.fragment, ip)


def _parse_host(netloc: str, what: str) -> tuple[str, IP | None]:
    if netloc.startswith("["):
        end = netloc.find("]")
        literal = netloc[1:end] if end > 0 else ""
        if end > 0 and netloc[end + 1 :] and not netloc[end + 1 :].startswith(":"):
            raise BadUrl(f"`{what}` has characters after the IPv6 address {netloc!r}; only :port may follow ']'")
        if "%" in literal:
            raise BadUrl(f"`{what}` has an IPv6 zone id; it is not allowed")
        try:
            v6 = ipaddress.IPv6Address(literal)
        except ValueError:
            raise BadUrl(f"`{what}` has an invalid IPv6 address {literal!r}") from None
        return str(v6), v6
    host = netloc.rsplit(":", 1)[0] if ":" in netloc else netloc
    if not host:
        raise BadUrl(f"`{what}` has no host")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise BadUrl(f"`{what}` has a host name that is not a valid international domain name") from None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or not _HOST_CHARS.match(host) or ".." in host:
        raise BadUrl(f"`{what}` has an invalid host name {host!r}")
    _check_labels(host, what)
    # Browsers (WHATWG URL) read a host whose last label is numeric as an IPv4 address, also in decimal, octal
    # and hex spellings (2130706433, 0177.0.0.1, 0x7f.1, 127.1). Only the canonical dotted quad is accepted, so
    # that the address checked here is the address a browser or resolver would use.
    if _NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]):
        if _DOTTED_QUAD.match(host) and not _CANONICAL_V4.match(host) and not any(
                len(x) > 1 and x.startswith("0") for x in host.split(".")):
            raise BadUrl(f"`{what}` has an invalid IPv4 address {host!r}: each of its four numbers is 0 to 255")
        if not _CANONICAL_V4.match(host):
            raise Blocked(
                f"`{what}` spells an IP address in a non-canonical form ({host!r}); "
                "decimal, octal, hex and shortened IPv4 spellings are refused — use a host name"
            )
        v4 = ipaddress.IPv4Address(host)
        return str(v4), v4
    return host, None


def _check_labels(host: str, what: str) -> None:
    """Host names a resolver would refuse are the caller's mistake (400), not a DNS failure (502)."""
    if len(host) > 253:
        raise BadUrl(f"`{what}` has a host name longer than 253 characters")
    for label in host.split("."):
        if not 1 <= len(label) <= 63:
            raise BadUrl(f"`{what}` has a host name with a label of {len(label)} characters; each is 1 to 63")
        if label.startswith("-") or label.endswith("-"):
            raise BadUrl(f"`{what}` has a host name label that starts or ends with '-' ({label!r})")
        if label.startswith("xn--"):
            try:
                label.encode("ascii").decode("idna")
            except UnicodeError:
                raise BadUrl(f"`{what}` has an invalid punycode label {label!r}") from None


def embedded_v4(ip: IP) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped (``::ffff:a.b.c.d``) or IPv4-compatible (``::a.b.c.d``) address spells."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _V4_COMPATIBLE and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_problem(ip: IP) -> str | None:
    """Why an address must not be reached, or None if it is a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        if ip in _V4_COMPATIBLE and int(ip) > 1:
            return "an IPv4-compatible IPv6 address"
        if ip.sixtofour is not None:
            inner = address_problem(ip.sixtofour)
            return f"a 6to4 address embedding {ip.sixtofour} ({inner})" if inner else None
        if ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
            inner = address_problem(embedded)
            return f"a NAT64 address embedding {embedded} ({inner})" if inner else None
        if ip in _NAT64_LOCAL:
            return "a local-use NAT64 address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address (cloud metadata lives here)"
    if ip.is_multicast:
        return "a multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "a carrier-grade NAT (100.64.0.0/10) address"
    if ip.is_private:
        return "a private-network address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "not a public address"
    return None


@dataclass(frozen=True)
class AllowEntry:
    """``host``, ``host:port``, ``IP``, ``IP:port``, ``[IPv6]:port`` or ``CIDR`` from ``pdf_allow_hosts``."""

    text: str
    name: str | None = None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> AllowEntry:
        t = text.strip().lower()
        port: int | None = None
        if t.startswith("["):
            end = t.find("]")
            host, tail = t[1:end], t[end + 1 :]
            if end < 0 or (tail and not tail.startswith(":")):
                raise ValueError(f"pdf_allow_hosts entry {text!r}: expected [IPv6] or [IPv6]:port")
            if tail:
                port = _port(tail[1:], text)
        elif t.count(":") == 1:
            host, p = t.split(":")
            port = _port(p, text)
        else:
            host = t
        try:
            network = ipaddress.ip_network(host, strict=False)
        except ValueError:
            network = None
        if network is not None:
            v4 = embedded_v4(network.network_address)
            if v4 is not None:
                raise ValueError(f"pdf_allow_hosts entry {text!r}: IPv4-mapped and IPv4-compatible IPv6 addresses "
                                 f"are always refused; allow the IPv4 address ({v4}) instead")
            return cls(text, network=network, port=port)
        if not host or not _HOST_CHARS.match(host) or _NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]):
            raise ValueError(
                f"pdf_allow_hosts entry {text!r}: expected a host name, IP, CIDR, host:port or [IPv6]:port"
            )
        return cls(text, name=host.rstrip("."), port=port)

    def matches(self, url: Url, ip: IP) -> bool:
        if self.port is not None and self.port != url.port:
            return False
        if self.network is not None:
            return ip.version == self.network.version and ip in self.network
        return url.host == self.name


def _port(p: str, text: str) -> int:
    if not p.isdigit() or not 0 < int(p) < 65536:
        raise ValueError(f"pdf_allow_hosts entry {text!r}: invalid port {p!r}")
    return int(p)


async def system_resolver(host: str) -> list[IP]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    seen: list[IP] = []
    for info in infos:
        ip = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if ip not in seen:
            seen.append(ip)
    return seen


class Policy:
    """Parse, resolve once, check, pin. ``allow`` entries open chosen internal destinations on purpose."""

    def __init__(self, allow: Iterable[str] = (), resolver: Resolver = system_resolver) -> None:
        self.allow = [AllowEntry.parse(a) for a in allow if a.strip()]
        self._resolve = resolver

    def allowed(self, url: Url, ip: IP) -> bool:
        return any(a.matches(url, ip) for a in self.allow)

    def check_address(self, url: Url, ip: IP) -> None:
        v4 = embedded_v4(ip)
        if v4 is not None:  # before the allow list: an entry never admits these spellings (docs/pdf.md)
            raise Blocked(
                f"{url.origin} resolves to {ip}, {address_problem(ip)}: such spellings of an IPv4 address are always "
                f"refused; use the IPv4 address {v4} (an internal one must be allowed as {v4}:{url.port} in "
                "CRYPTOWIRE_PDF_ALLOW_HOSTS)"
            )
        if self.allowed(url, ip):
            return
        problem = address_problem(ip)
        if problem:
            entry = f"[{url.host}]:{url.port}" if ":" in url.host else f"{url.host}:{url.port}"
            raise Blocked(
                f"{url.origin} resolves to {ip}, {problem}; the renderer only reaches public addresses unless the "
                f"operator allows a destination on purpose with CRYPTOWIRE_PDF_ALLOW_HOSTS (e.g. '[\"{entry}\"]')"
            )

    async def pin(self, target: str | Url, what: str = "url") -> Pinned:
        url = target if isinstance(target, Url) else parse_url(target, what)
        if url.ip is not None:
            self.check_address(url, url.ip)
            return Pinned(url, url.ip)
        try:
            addresses = await self._resolve(url.host)
        except (socket.gaierror, UnicodeError) as exc:
            raise DnsFailure(url.host, str(exc)) from None
        if not addresses:
            raise DnsFailure(url.host, "no addresses")
        for ip in addresses:  # one bad address is enough to refuse: a rebinding name may mix them
            self.check_address(url, ip)
        return Pinned(url, addresses[0])

    async def pin_endpoint(self, host: str, port: int) -> Pinned:
        """Check a raw TCP destination (what the egress proxy is asked for) like the host of a URL."""
        h, ip = _parse_host(f"[{host}]" if ":" in host else host, "destination")
        return await self.pin(Url("https" if port == 443 else "http", h, port, "/", "", ip), "destination")
