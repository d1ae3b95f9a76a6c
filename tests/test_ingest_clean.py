"""Canonical URLs, HTML to text, dates: the normalisation rules, case by case."""

from __future__ import annotations

from datetime import datetime

import pytest

from pipeline.ingest.clean import canonical_url, clean_link, first_image, html_to_text, parse_date, text_field


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "https://cointelegraph.com/news/x?utm_source=rss_feed&utm_medium=rss&utm_campaign=rss_partner_inbound",
            "https://cointelegraph.com/news/x",
        ),
        (
            "HTTPS://WWW.CoinDesk.com/Markets/A?id=7&fbclid=abc#comments",
            "https://www.coindesk.com/Markets/A?id=7",
        ),
        ("https://a.com/p?ref=twitter&page=2&gclid=1&mc_cid=2&mc_eid=3&UTM_Term=x", "https://a.com/p?page=2"),
        (
            "\n     https://news.google.com/rss/articles/CBMi?oc=5\n    ",
            "https://news.google.com/rss/articles/CBMi?oc=5",
        ),
        ("https://a.com/some\n   /path", "https://a.com/some/path"),
        ("https://a.com/a b", "https://a.com/a%20b"),
        ("http://a.com:80/x", "http://a.com/x"),
        ("https://a.com:8443/x", "https://a.com:8443/x"),
        ("https://a.com", "https://a.com/"),
        ("https://a.com/x?q=a%20b&utm_x=1&z", "https://a.com/x?q=a%20b&z"),
        ("mailto:someone@example.com", None),
        ("javascript:alert(1)", None),
        ("", None),
        ("   ", None),
        ("https://a.com:notaport/x", None),
    ],
)
def test_canonical_url(raw: str, expected: str | None) -> None:
    assert canonical_url(raw) == expected


def test_relative_links_resolve_against_the_base() -> None:
    assert (
        canonical_url("/post/1?utm_source=x", "https://Example.com/feed.xml") == "https://example.com/post/1"
    )
    assert clean_link("img/a.png", "https://example.com/blog/feed") == "https://example.com/blog/img/a.png"
    assert clean_link("//cdn.example.com/a.png") == "https://cdn.example.com/a.png"


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("<p>Bitcoin <b>rose</b> 5%.</p><p>Ether fell.</p>", "Bitcoin rose 5%. Ether fell."),
        ("Line one<br/>line two", "Line one line two"),
        ("<![CDATA[Tether buys a club]]>", "Tether buys a club"),
        ("  \n\t <p>Tether,\u00a0already   a shareholder</p>\n  ", "Tether, already a shareholder"),
        ("A<script>alert('x')</script>B<style>p{}</style>C<!-- note -->D", "ABCD"),
        ("Price &lt; $50k &amp; falling", "Price < $50k & falling"),
        ("caf&eacute; &#8217;quoted&#8217; &#x2014;", "café ’quoted’ —"),
        # The XML parser has already decoded one layer; HTML entities are decoded once more, never twice:
        ("What&#039;s new", "What's new"),
        ("Tom &amp;amp; Jerry", "Tom &amp; Jerry"),
        ("BTC < 100k and ETH > 3k", "BTC < 100k and ETH > 3k"),
        ("zero\u200bwidth", "zerowidth"),
        ("", ""),
    ],
)
def test_html_to_text(html: str, expected: str) -> None:
    assert html_to_text(html) == expected


def test_titles_are_plain_text_unless_they_look_like_html() -> None:
    assert text_field(" Crypto for Advisors ") == "Crypto for Advisors"
    assert text_field("Kwon&#39;s fate") == "Kwon's fate"
    assert text_field("BTC <3 ETH") == "BTC <3 ETH"
    assert text_field("<b>Bold</b> move") == "Bold move"
    assert text_field("A &amp; B", is_html=False) == "A &amp; B"


def test_first_image_skips_data_urls_and_decodes_the_src_once() -> None:
    html = '<p><img src="data:image/gif;base64,AAA"><img alt="x" src="https://i.example.com/a.jpg?w=1&amp;h=2"></p>'
    assert first_image(html) == "https://i.example.com/a.jpg?w=1&h=2"
    assert first_image("<p>no image</p>") is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Fri, 12 Dec 2025 17:33:11 -0500", datetime(2025, 12, 12, 22, 33, 11)),
        ("Mon, 05 Feb 2024 19:00:00 GMT", datetime(2024, 2, 5, 19, 0, 0)),
        ("\n    Mon, 05 Feb 2024 19:00:00 GMT\n   ", datetime(2024, 2, 5, 19, 0, 0)),
        ("2025-12-02T20:24:36+00:00", datetime(2025, 12, 2, 20, 24, 36)),
        ("2023-03-13T10:13:51.231+00:00", datetime(2023, 3, 13, 10, 13, 51)),
        ("2025-06-01T12:00:00Z", datetime(2025, 6, 1, 12, 0, 0)),
        ("2025-06-01T14:00:00+02:00", datetime(2025, 6, 1, 12, 0, 0)),
        ("2025-06-01 12:00:00", datetime(2025, 6, 1, 12, 0, 0)),  # no zone: taken as UTC
        ("Sun, 1 Jun 2025 08:00:00 EDT", datetime(2025, 6, 1, 12, 0, 0)),
        # an RFC 822 date with an ISO-style offset, or a zone name RFC 822 lacks, was read as UTC
        ("Fri, 27 Nov 2026 01:30:00 +02:00", datetime(2026, 11, 26, 23, 30, 0)),
        ("27 Nov 2026 01:30 -05:30", datetime(2026, 11, 27, 7, 0, 0)),
        ("Fri, 27 Nov 2026 01:30:00 CET", datetime(2026, 11, 27, 0, 30, 0)),
        ("Fri, 27 Nov 2026 09:00:00 JST", datetime(2026, 11, 27, 0, 0, 0)),
        ("Fri, 27 Nov 2026 11:00:00 AEDT", datetime(2026, 11, 27, 0, 0, 0)),
        ("2025-06-01", datetime(2025, 6, 1, 0, 0, 0)),
        ("yesterday-ish", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_date_utc_to_the_second(raw: str | None, expected: datetime | None) -> None:
    assert parse_date(raw) == expected
