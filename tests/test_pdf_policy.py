"""HTML-to-PDF without a browser: URL parsing, address rules, allow entries, pinning, the fetcher, parameters and
the Content-Disposition header."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import re
from urllib.parse import unquote

import pytest

from api.errors import ApiError
from api.pdf.fetch import Fetcher
from api.pdf.filename import content_disposition, default_name
from api.pdf.params import PARAMETERS, parse_params
from api.pdf.ssrf import AllowEntry, Blocked, DnsFailure, Policy, address_problem, parse_url
from tests.support.httpserver import LocalServer, Reply, static
from warehouse.config import Settings

# --- URL parsing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "file:///etc/passwd",
        "FILE:///etc/passwd",
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,<h1>x</h1>",
        "view-source:http://example.com/",
        "chrome://settings",
        "ftp://example.com/",
        "gopher://127.0.0.1:6379/_INFO",
        "//example.com/",
        "example.com/page",
        "http:/example.com",
        "http://user:pw@example.com/",
        "http://example.com@169.254.169.254/",
        "http://example.com\\@169.254.169.254/",
        " http://example.com/",
        "http://exa mple.com/",
        "http://example.com:99999/",
        "http://example.com:0/",
        "http://[fe80::1%25eth0]/",
        "http:///path",
        # malformed hosts are the caller's mistake, never a 500 or a DNS failure
        "http://[::1/",
        "http://]/",
        "http://[zzz]/",
        "http://[2001:4860:4860::8888]x/",
        "http://256.1.1.1/",
        "http://-/",
        "http://xn--/",
        "http://" + "a" * 64 + ".example/",
        "http://" + "a." * 130 + "example/",
    ],
)
def test_malformed_or_foreign_urls_are_400(raw: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_url(raw)
    assert err.value.status == 400
    assert "`url`" in err.value.message


@pytest.mark.parametrize(
    "raw",
    ["http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://0x7f.0.0.1/", "http://127.1/",
     "http://0/", "http://1.2.3.4.5/", "http://169.254.43518/"],
)
def test_numeric_ip_spellings_are_refused(raw: str) -> None:
    with pytest.raises(Blocked) as err:
        parse_url(raw)
    assert err.value.status == 403


def test_canonical_forms() -> None:
    u = parse_url("HTTP://Example.COM.:80/a/b?x=1#frag")
    assert (u.scheme, u.host, u.port, u.path_query, u.fragment) == ("http", "example.com", 80, "/a/b?x=1", "frag")
    assert u.url == "http://example.com/a/b?x=1"
    v6 = parse_url("https://[::FFFF:127.0.0.1]:8443")
    assert v6.ip == ipaddress.ip_address("::ffff:7f00:1") and v6.url == "https://[::ffff:7f00:1]:8443/"
    idn = parse_url("http://bücher.example/")
    assert idn.host == "xn--bcher-kva.example"


# --- address rules ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.255.255.254", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "100.127.255.254", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
        "198.18.0.1", "192.0.0.170", "::1", "::", "fe80::1", "fc00::1", "ff02::1", "::ffff:127.0.0.1",
        "::ffff:8.8.8.8", "::127.0.0.1", "::8.8.8.8", "2002:7f00:1::", "2002:a9fe:a9fe::1", "64:ff9b::a9fe:a9fe",
        "64:ff9b::7f00:1", "64:ff9b:1::1", "2001:db8::1",
    ],
)
def test_internal_addresses_are_refused(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "1.1.1.1", "2606:4700:4700::1111",
                                     "2002:808:808::1", "64:ff9b::808:808"])
def test_public_addresses_pass(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None


def test_allow_entries() -> None:
    page = parse_url("http://127.0.0.1:8080/")
    secret = parse_url("http://127.0.0.1:9090/")
    ip = ipaddress.ip_address("127.0.0.1")
    entry = AllowEntry.parse("127.0.0.1:8080")
    assert entry.matches(page, ip) and not entry.matches(secret, ip)
    assert AllowEntry.parse("127.0.0.0/8").matches(secret, ip)
    assert AllowEntry.parse("[::1]:8080").matches(parse_url("http://[::1]:8080/"), ipaddress.ip_address("::1"))
    named = AllowEntry.parse("Intranet.Example:443")
    assert named.matches(parse_url("https://intranet.example/"), ipaddress.ip_address("10.0.0.5"))
    assert not named.matches(parse_url("http://intranet.example/"), ipaddress.ip_address("10.0.0.5"))
    for bad in ("127.0.0.1:99999", "[::1", "exa mple", "0x7f.1", "host:port", "[::ffff:7f00:1]:8080",
                "::ffff:0:0/96", "[::7f00:1]:8080"):
        with pytest.raises(ValueError, match="pdf_allow_hosts"):
            AllowEntry.parse(bad)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/x", "http://[::1]/", "https://intranet.test/"])
def test_blocked_message_gives_an_allow_setting_that_works(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def resolver(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address("10.1.2.3")]

    with pytest.raises(Blocked) as err:
        asyncio.run(Policy([], resolver=resolver).pin(url))
    found = re.search(r"with CRYPTOWIRE_PDF_ALLOW_HOSTS \(e\.g\. '(\[.+\])'\)$", err.value.message)
    assert found, err.value.message
    monkeypatch.setenv("CRYPTOWIRE_PDF_ALLOW_HOSTS", found.group(1))  # as the operator would set it
    allowed = Policy(Settings().pdf_allow_hosts, resolver=resolver)
    assert asyncio.run(allowed.pin(url)).url == parse_url(url)


def test_an_ipv4_address_spelled_as_ipv6_is_refused_even_when_its_ipv4_form_is_allowed() -> None:
    """The refusal used to suggest an allow entry of the mapped form, which then admitted it."""
    policy = Policy(["127.0.0.1:8080"])
    assert asyncio.run(policy.pin("http://127.0.0.1:8080/")).ip == ipaddress.ip_address("127.0.0.1")
    with pytest.raises(Blocked, match=r"always refused; use the IPv4 address 127\.0\.0\.1"):
        asyncio.run(policy.pin("http://[::ffff:127.0.0.1]:8080/"))


def test_policy_checks_every_resolved_address() -> None:
    async def resolver(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return {"mixed.test": [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.1")],
                "public.test": [ipaddress.ip_address("93.184.216.34")]}[host]

    policy = Policy([], resolver=resolver)
    with pytest.raises(Blocked, match="10.0.0.1"):
        asyncio.run(policy.pin("http://mixed.test/"))
    pinned = asyncio.run(policy.pin("http://public.test:8080/x"))
    assert pinned.connect_url == "http://93.184.216.34:8080/x"
    with pytest.raises(DnsFailure) as err:
        asyncio.run(Policy().pin("http://nonexistent.invalid/"))
    assert err.value.status == 502


# --- fetcher: pinned connections, redirects --------------------------------------------------------------------


def test_fetch_connects_to_the_pinned_address_and_resolves_once(local_server: LocalServer) -> None:
    """DNS rebinding: the name is resolved once per hop and the connection goes to the checked address."""
    local_server.routes["/"] = static("pinned")
    calls: list[str] = []

    async def rebinding(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        calls.append(host)
        # first answer: the allowed address; any later lookup would hand out a forbidden one
        return [ipaddress.ip_address("127.0.0.1" if len(calls) == 1 else "169.254.169.254")]

    policy = Policy([f"127.0.0.1:{local_server.port}"], resolver=rebinding)

    async def go() -> tuple[int, bytes]:
        fetcher = Fetcher(policy, "test")
        try:
            got = await fetcher.fetch("GET", f"http://rebind.test:{local_server.port}/")
            return got.status, got.body
        finally:
            await fetcher.aclose()

    assert asyncio.run(go()) == (200, b"pinned")
    assert calls == ["rebind.test"]
    assert local_server.seen[0].headers["host"] == f"rebind.test:{local_server.port}"


def test_fetch_refuses_a_redirect_to_a_blocked_server() -> None:
    with LocalServer() as page, LocalServer() as secret:
        secret.routes["/secret"] = static("secret")
        page.routes["/hop1"] = lambda req: Reply(302, b"", {"Location": "/hop2"})
        page.routes["/hop2"] = lambda req: Reply(307, b"", {"Location": secret.url("/secret")})
        page.routes["/ok"] = lambda req: Reply(301, b"", {"Location": "/final"})
        page.routes["/final"] = static("final")
        policy = Policy([f"127.0.0.1:{page.port}"])

        async def go(path: str) -> object:
            fetcher = Fetcher(policy, "test")
            try:
                return await fetcher.fetch("GET", page.url(path))
            finally:
                await fetcher.aclose()

        with pytest.raises(Blocked, match="redirect"):
            asyncio.run(go("/hop1"))
        final = asyncio.run(go("/ok"))
        assert final.url.url == page.url("/final") and final.body == b"final"  # type: ignore[attr-defined]
        assert secret.seen == []
        assert page.hits("/hop2") == 1


# --- parameters ------------------------------------------------------------------------------------------------


def test_query_and_json_parameters_mean_the_same() -> None:
    query = {"url": "https://example.com/", "landscape": "true", "scale": "0.8", "timeoutMs": "5000",
             "margin": "10mm", "format": "letter", "emulateMediaType": "SCREEN", "disposition": "attachment"}
    body = {"url": "https://example.com/", "landscape": True, "scale": 0.8, "timeoutMs": 5000,
            "margin": "10mm", "format": "Letter", "emulateMediaType": "screen", "disposition": "attachment"}
    a, b = parse_params(query), parse_params(body)
    assert a == b
    assert (a.landscape, a.scale, a.timeout_ms, a.margin, a.format) == (True, 0.8, 5000, ("10mm",) * 4, "Letter")
    defaults = parse_params({"url": "http://example.com"})
    assert (defaults.disposition, defaults.emulate_media_type, defaults.wait_until) == ("inline", "print", "load")


@pytest.mark.parametrize(
    ("raw", "param", "allowed"),
    [
        ({}, "url", "http"),
        ({"url": "https://e.com", "disposition": "download"}, "disposition", "inline, attachment"),
        ({"url": "https://e.com", "emulateMediaType": "tv"}, "emulateMediaType", "screen, print"),
        ({"url": "https://e.com", "format": "B5"}, "format", "A4"),
        ({"url": "https://e.com", "waitUntil": "never"}, "waitUntil", "networkidle"),
        ({"url": "https://e.com", "timeoutMs": "60001"}, "timeoutMs", "60000"),
        ({"url": "https://e.com", "timeoutMs": 1.5}, "timeoutMs", "whole number"),
        ({"url": "https://e.com", "scale": "3"}, "scale", "0.1 to 2.0"),
        ({"url": "https://e.com", "landscape": "yes"}, "landscape", "true or false"),
        ({"url": "https://e.com", "margin": "1em"}, "margin", "px, in, cm or mm"),
        ({"url": "https://e.com", "url2": "x"}, "url2", ", ".join(PARAMETERS)),
        ({"url": 5}, "url", "string"),
    ],
)
def test_invalid_parameters_name_the_parameter_and_the_allowed_values(raw: dict, param: str, allowed: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_params(raw)
    assert err.value.status == 400
    assert f"`{param}`" in err.value.message and allowed in err.value.message


@pytest.mark.parametrize(
    ("raw", "fits"),
    [
        ({"margin": "92mm"}, True),  # A4 is 8.27in wide: 2 × 92mm leaves just over 1in
        ({"margin": "93mm"}, False),
        ({"margin": "0 3.635in 0 3.635in"}, True),
        ({"margin": "5.35in 0 5.36in 0"}, False),  # 11.7in high: 1in must be left
        ({"margin": "4.2in 0 4.2in 0"}, True),
        ({"margin": "4.2in 0 4.2in 0", "landscape": True}, False),  # 8.27in high in landscape
        ({"margin": "0 4.2in 0 4.2in", "landscape": True}, True),
        ({"margin": "5cm", "format": "a6"}, False),  # 4.13in × 5.83in
        ({"margin": "5cm", "format": "Letter"}, True),
        ({"margin": 400, "format": "A5"}, False),  # JSON number: px
        ({"margin": "20in", "format": "A0"}, False),
    ],
)
def test_margins_must_leave_room_to_print_on_the_page_as_oriented(raw: dict, fits: bool) -> None:
    raw = {"url": "https://e.com", **raw}
    if fits:
        assert parse_params(raw).margin is not None
        return
    with pytest.raises(ApiError) as err:
        parse_params(raw)
    assert err.value.status == 400 and err.value.message.startswith("`margin`")
    assert "leaves too little to print" in err.value.message and "may be at most" in err.value.message


# --- Content-Disposition ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hostile",
    [
        '../../etc/passwd',
        'a"; filename="evil.exe',
        "report\r\nSet-Cookie: session=stolen",
        "..\\..\\windows\\system32",
        "\u202egnp.exe",
        "\x00\x07\x1b[31m",
        "x" * 500,
    ],
)
def test_hostile_filenames_cannot_break_the_header(hostile: str) -> None:
    value, name = content_disposition("attachment", hostile, "example.com")
    assert value.startswith("attachment; filename=\"")
    ascii_part = value.split('filename="', 1)[1].split('"', 1)[0]
    star = unquote(value.split("filename*=UTF-8''", 1)[1])
    for part in (ascii_part, star, name):
        assert not any(c in part for c in '"\r\n\\/\x00;\u202e'), part
        assert part.endswith(".pdf") and not part.startswith(".")
        assert len(part) <= 104
    assert value.count('"') == 2 and value.isascii()


def test_unicode_and_default_filenames() -> None:
    value, name = content_disposition("inline", "Bericht über Bitcoin € 2024.pdf", "example.com")
    assert name == "Bericht über Bitcoin _ 2024.pdf"
    assert 'filename="Bericht uber Bitcoin _ 2024.pdf"' in value
    assert "filename*=UTF-8''Bericht%20%C3%BCber%20Bitcoin%20_%202024.pdf" in value
    assert default_name("news.example.com", dt.date(2025, 3, 1)) == "news.example.com-2025-03-01"
    _, dflt = content_disposition("inline", None, "news.example.com")
    assert dflt.startswith("news.example.com-") and dflt.endswith(".pdf")
