"""Feed documents to entries: the fast reader agrees with feedparser, and the mapping rules hold."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import feedparser
import pytest

from pipeline.ingest.parse import FeedParseError, _read_feedparser, parse_feed, to_utf8
from tests.conftest import FEED_FIXTURES
from tests.support.feedgen import atom, atom_entry, item, rss

FIXTURES = sorted(FEED_FIXTURES.glob("*.xml"))
BASE = "http://127.0.0.1:1/feed.xml"


def test_the_repository_has_its_feed_fixtures() -> None:
    assert len(FIXTURES) >= 9


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fast_reader_agrees_with_feedparser(path: Path) -> None:
    assert_readers_agree(path)


def assert_readers_agree(path: Path) -> None:
    body = path.read_bytes()
    fast = parse_feed(body, base_url=BASE)
    slow, _ = _read_feedparser(to_utf8(body)[0], BASE)
    assert slow is not None
    assert fast.reader == "xml"  # every fixture, even coindesk-4 (newline before <?xml), is read fast
    assert len(fast.entries) == len(feedparser.parse(body).entries) == len(slow.entries) > 0
    for a, b in zip(fast.entries, slow.entries, strict=True):
        assert a.url == b.url
        assert a.title == b.title
        assert a.published == b.published
        assert a.image_url == b.image_url
        assert a.authors == b.authors
        # feedparser also files media:keywords as tags, and lets an empty <dc:description/> that follows
        # <description> blank the summary (coindesk); otherwise both readers give the same text.
        assert set(a.categories) <= set(b.categories)
        if b.summary:
            assert a.summary == b.summary
        assert (a.content_html is None) == (b.content_html is None)


def test_rss_item_mapping() -> None:
    doc = rss(
        item(
            " Bitcoin &#039;breaks&#039; $100k ",  # in the XML: &amp;#039; (a double-escaped quote)
            "https://news.example.com/btc?utm_source=rss&id=1#top",
            guid="g-1",
            pub="Tue, 04 Mar 2025 09:30:15 +0100",
            description="<p>Bitcoin <b>crossed</b> $100,000.</p>",
            content='<p>Full story <img src="https://img.example.com/in-body.jpg"></p><script>x()</script>',
            creators=("Ann Lee", "Bo Chan", "Ann Lee"),
            categories=("Markets", "", "  ", "Bitcoin"),
            raw='<enclosure url="https://img.example.com/enc.jpg" type="image/jpeg" length="0"/>'
            '<media:thumbnail url="https://img.example.com/thumb.jpg"/>',
        )
    )
    (e,) = parse_feed(doc.encode(), base_url=BASE).entries
    assert e.url == "https://news.example.com/btc?id=1"
    assert e.guid == "g-1"
    assert e.title == "Bitcoin 'breaks' $100k"
    assert e.summary == "Bitcoin crossed $100,000."
    assert e.content_html == '<p>Full story <img src="https://img.example.com/in-body.jpg"></p>'
    assert e.authors == ["Ann Lee", "Bo Chan"]
    assert e.categories == ["Markets", "Bitcoin"]
    assert e.image_url == "https://img.example.com/enc.jpg"  # enclosure before thumbnail and <img>
    assert e.published == datetime(2025, 3, 4, 8, 30, 15)


@pytest.mark.parametrize(
    ("extra", "content", "expected"),
    [
        ('<media:content url="https://i.example.com/m.jpg" medium="image"/>', None, "https://i.example.com/m.jpg"),
        (
            '<media:group><media:content url="https://i.example.com/v.mp4" type="video/mp4"/>'
            '<media:content url="https://i.example.com/g.png" type="image/png"/></media:group>',
            None,
            "https://i.example.com/g.png",
        ),
        ('<enclosure url="https://i.example.com/a.mp3" type="audio/mpeg"/>', None, None),
        ('<media:thumbnail url="/t.jpg"/>', None, "http://127.0.0.1:1/t.jpg"),
        ("", '<p><img src="https://i.example.com/first.webp"><img src="https://i.example.com/2.webp"></p>',
         "https://i.example.com/first.webp"),
    ],
)  # fmt: skip
def test_image_sources_in_order(extra: str, content: str | None, expected: str | None) -> None:
    doc = rss(item("t", "https://a.example.com/1", content=content, raw=extra))
    assert parse_feed(doc.encode(), base_url=BASE).entries[0].image_url == expected


def test_guid_is_the_link_only_when_it_is_a_permalink() -> None:
    doc = rss(
        item("a", None, guid="https://a.example.com/post/1?utm_medium=x", permalink=True),
        item("b", None, guid="https://a.example.com/post/2", permalink=False),
        item("c", None, guid="tag:a.example.com,2025:3", permalink=True),
    )
    a, b, c = parse_feed(doc.encode(), base_url=BASE).entries
    assert a.url == "https://a.example.com/post/1"
    assert b.url is None and b.guid == "https://a.example.com/post/2"
    assert c.url is None and c.guid == "tag:a.example.com,2025:3"


def test_summary_falls_back_to_shortened_content() -> None:
    words = " ".join(f"word{i}" for i in range(400))
    doc = rss(item("t", "https://a.example.com/1", description=None, content=f"<p>{words}</p>"))
    (e,) = parse_feed(doc.encode(), base_url=BASE).entries
    assert e.summary.startswith("word0 word1") and e.summary.endswith("…")
    assert len(e.summary) <= 600
    assert e.content_html == f"<p>{words}</p>"


def test_atom_mapping() -> None:
    doc = atom(
        atom_entry(
            "Ether & friends",
            "https://a.example.com/eth?fbclid=1",
            id="urn:1",
            published="2025-05-06T07:08:09-04:00",
            summary="<p>Up <em>10%</em></p>",
        ),
        atom_entry("No link", None, id="urn:2", published=None),
    )
    feed = parse_feed(doc.encode(), base_url=BASE)
    assert feed.language == "en"
    a, b = feed.entries
    assert (a.url, a.guid, a.title, a.summary) == (
        "https://a.example.com/eth",
        "urn:1",
        "Ether & friends",
        "Up 10%",
    )
    assert a.published == datetime(2025, 5, 6, 11, 8, 9)
    assert (b.url, b.guid, b.published) == (None, "urn:2", None)


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        # Declared UTF-8, really windows-1252.
        (rss(item("Café “crème”", "https://a.example.com/1")).encode("cp1252"), None),
        # No declaration at all, windows-1252 bytes, charset only in the HTTP header.
        (rss(item("Café “crème”", "https://a.example.com/1"), declaration="").encode("cp1252"),
         "application/rss+xml; charset=windows-1252"),
        # Declared ISO-8859-1, really UTF-8.
        (rss(item("Café “crème”", "https://a.example.com/1"),
             declaration='<?xml version="1.0" encoding="ISO-8859-1"?>').encode("utf-8"), None),
        # UTF-8 with a BOM and blank lines before the declaration.
        (b"\xef\xbb\xbf\n\n" + rss(item("Café “crème”", "https://a.example.com/1")).encode("utf-8"), None),
        # UTF-16 with a BOM.
        (rss(item("Café “crème”", "https://a.example.com/1"),
             declaration='<?xml version="1.0" encoding="UTF-16"?>').encode("utf-16"), None),
    ],
)  # fmt: skip
def test_wrong_or_missing_encoding_declarations(body: bytes, content_type: str | None) -> None:
    (e,) = parse_feed(body, base_url=BASE, content_type=content_type).entries
    assert e.title == "Café “crème”"


def test_undeclared_html_entities_go_to_the_lenient_reader() -> None:
    doc = rss(item("x", "https://a.example.com/1")).replace(
        "<title>x</title>", "<title>A&nbsp;B &mdash; C</title>"
    )
    feed = parse_feed(doc.encode(), base_url=BASE)
    assert feed.reader == "feedparser"
    assert "malformed XML" in (feed.warning or "")
    assert feed.entries[0].title == "A B — C"


def test_cut_body_keeps_the_complete_items() -> None:
    doc = rss(*(item(f"Story {i}", f"https://a.example.com/{i}") for i in range(5))).encode()
    cut = doc[: doc.index(b"Story 3")]
    feed = parse_feed(cut, base_url=BASE, truncated=True)
    assert feed.reader == "xml-partial"
    assert [e.title for e in feed.entries] == ["Story 0", "Story 1", "Story 2"]
    assert "cut at the size cap" in (feed.warning or "")


def _cdata_feed() -> bytes:
    return rss(*(item(f"Story {i} — “quoted”", f"https://a.example.com/{i}",
                      description=f"<![CDATA[<p>Summary {i}, with <b>markup</b> and ünïcode.</p>]]>")
                 for i in range(4))).replace("&lt;![CDATA[", "<![CDATA[").replace("]]&gt;", "]]>") \
        .replace("&lt;p&gt;", "<p>").replace("&lt;/p&gt;", "</p>").replace("&lt;b&gt;", "<b>") \
        .replace("&lt;/b&gt;", "</b>").encode()


@pytest.mark.parametrize("where", ["in CDATA", "in a multi-byte character", "in a comment", "in a tag"])
def test_a_document_cut_anywhere_keeps_its_complete_items_intact(where: str) -> None:
    """Cut inside CDATA, the document went to feedparser (the cut item with a blank summary); cut inside a UTF-8
    character, the whole document was decoded as cp1252 (every title garbled, then stored as an update)."""
    doc = _cdata_feed()
    whole = parse_feed(doc, base_url=BASE)
    assert [e.summary for e in whole.entries][0].startswith("Summary 0")
    start = doc.index(b"Story 2")
    at = {
        "in CDATA": doc.index(b"markup", start),
        "in a multi-byte character": doc.index("“".encode(), start) + 1,
        "in a comment": None,
        "in a tag": doc.index(b"<link>", start) + 3,
    }[where]
    cut = doc[:at] if at is not None else doc[:start] + b"<!-- a comment that never ends"
    feed = parse_feed(cut, base_url=BASE)
    assert feed.reader == "xml-partial", feed.warning
    assert [(e.title, e.summary) for e in feed.entries] == [(e.title, e.summary) for e in whole.entries[:2]]
    assert "the document ends in the middle" in (feed.warning or "")


def test_a_fault_inside_a_one_line_document_is_not_taken_for_a_cut() -> None:
    """On one line every error is on the last line: a stray processing instruction in the middle of a minified feed
    is a fault to read leniently (keeping the items after it), not the end of the document."""
    doc = rss(*(item(f"T{i}", f"https://a.example.com/{i}") for i in range(5))).replace("\n", "")
    broken = doc.replace("<title>T2</title>", "<title>T2 <?php echo 1 </title>").encode()
    feed = parse_feed(broken, base_url=BASE)
    assert feed.reader != "xml-partial"
    assert {"T0", "T1", "T3", "T4"} <= {e.title for e in feed.entries}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty body"),
        (b"  \n\t ", "empty body"),
        (
            b"<!DOCTYPE html><html><head><title>Hi</title></head><body><p>x</p></body></html>",
            "got an HTML page",
        ),
        (b"<html><body>hello</body></html>", "got an HTML page"),
        (b"\x00\x01\x02 binary junk \xff\xfe", "not a feed"),
        (b"just some text, not xml", "not a feed"),
        (b'<?xml version="1.0"?><note><to>T</to></note>', "not a feed"),
    ],
)
def test_documents_that_are_not_feeds(body: bytes, message: str) -> None:
    with pytest.raises(FeedParseError, match=message):
        parse_feed(body, base_url=BASE, content_type="text/html")


def test_stored_content_html_loses_scripts_handlers_and_comments() -> None:
    content = (
        '<p onclick="steal()" class="lead">Based on = data</p><!-- tracking -->'
        '<script>evil()</script><a href="javascript:evil()">x</a><iframe src="https://ads.example"></iframe>'
    )
    (e,) = parse_feed(
        rss(item("t", "https://a.example.com/1", content=content)).encode(), base_url=BASE
    ).entries
    assert e.content_html == '<p class="lead">Based on = data</p><a href="#">x</a>'
    assert e.summary == "A summary."
