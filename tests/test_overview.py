"""The overview page (``GET /``) on a real server over a real snapshot, rendered by real headless Chromium."""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
import httpx
import pytest
from starlette.applications import Starlette

import api.metrics
import api.overview
from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_events, write
from warehouse.config import Settings
from warehouse.db import connect
from warehouse.publish import publish_snapshot

NEWEST = datetime(2024, 12, 3, 18, 0)
EVIL_SOURCE = "<b>Evil</b> & Co"
EVIL_TITLE = "<script>alert(1)</script><img src=x onerror=alert(2)> Will BTC top $1?"
EVIL_TAG = "<i>tag</i>"
SOURCES = ["CoinDesk", "Decrypt", "The Block", EVIL_SOURCE]


def make_articles() -> list[dict[str, Any]]:
    """72 articles over 20 days from 4 sources; tickers with distinct frequencies; a few without a score."""
    out = []
    for i in range(72):
        tickers = [t for t, every in (("BTC", 2), ("ETH", 3), ("SOL", 4), ("XRP", 5), ("DOGE", 7), ("ADA", 11))
                   if i % every == 0]
        out.append({
            "id": f"a_{i:016x}",
            "source_name": SOURCES[(i * 7) % 4 if i % 5 else 0],
            "url": f"https://news.example/{i}",
            "title": f"Article {i}",
            "summary": f"Summary {i}.",
            "image_url": None,
            "published_at": NEWEST - timedelta(days=i % 20, hours=(i * 5) % 17),
            "sentiment": ("positive", "negative", "neutral")[i % 3],
            "sentiment_score": None if i % 13 == 6 else round(math.sin(i * 1.7), 4),
            "tickers": tickers,
            "topics": ["markets"],
        })
    return out


def make_test_events() -> list[dict[str, Any]]:
    events = make_events(12)
    events[0]["event_title"] = EVIL_TITLE
    events[0]["tags"] = ["BTC", EVIL_TAG]
    events[0]["source_url"] = "javascript:alert(3)"
    return events


@pytest.fixture(scope="module")
def data() -> Data:
    return Data(make_articles(), make_test_events())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data: Data) -> Iterator[ApiServer]:
    home = tmp_path_factory.mktemp("overview") / "home"
    build(home, data)
    app = create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys(["k"]))
    with ApiServer(app) as srv:
        srv.app = app  # type: ignore[attr-defined]
        yield srv


# --------------------------------------------------------------------------------------------- expectations


def expected_heatmap(data: Data) -> tuple[list[date], dict[str, list[int]]]:
    newest = max(a["published_at"] for a in data.articles).date()
    days = [newest - timedelta(days=i) for i in range(13, -1, -1)]
    counts: dict[str, Counter[date]] = defaultdict(Counter)
    for a in data.articles:
        if a["published_at"].date() >= days[0]:
            counts[a["source_name"]][a["published_at"].date()] += 1
    return days, {s: [c[d] for d in days] for s, c in counts.items()}


def expected_series(data: Data) -> list[tuple[str, dict[date, tuple[float, int]]]]:
    """The 5 most mentioned tickers over the last 30 days, with their daily mean score (scored articles only)."""
    newest = max(a["published_at"] for a in data.articles).date()
    start = newest - timedelta(days=29)
    recent = [a for a in data.articles if a["published_at"].date() >= start]
    mentions = Counter(t for a in recent for t in a["tickers"])
    top = sorted(mentions, key=lambda t: (-mentions[t], t))[:5]
    out = []
    for t in top:
        scores: dict[date, list[float]] = defaultdict(list)
        for a in recent:
            if t in a["tickers"] and a["sentiment_score"] is not None:
                scores[a["published_at"].date()].append(a["sentiment_score"])
        out.append((t, {d: (sum(v) / len(v), len(v)) for d, v in scores.items()}))
    return out


# --------------------------------------------------------------------------------------------- tests


def test_overview_renders_in_chromium(server: ApiServer, browser: Any, data: Data, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    try:
        response = page.goto(server.url("/"), wait_until="load")
        assert response is not None and response.status == 200
        shot = tmp_path / "overview.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000

        # Nothing loaded from anywhere but this server (no CDN, no external asset).
        assert requested and all(u.startswith(server.url("/")) or u.startswith("data:") for u in requested), requested

        # Freshness cards: the row counts of this snapshot.
        cards = page.eval_on_selector_all(".card", "els => els.map(e => [e.querySelector('.k').textContent, "
                                          "e.querySelector('.v').textContent])")
        cards = dict(cards)
        assert cards["articles"] == str(len(data.articles))
        assert cards["prediction events"] == str(len(data.events))
        newest = max(a["published_at"] for a in data.articles).strftime("%Y-%m-%d %H:%M UTC")
        assert cards["newest dated article"] == newest
        assert cards["sources"] == str(len(SOURCES))

        # Articles per source per day: every cell as computed from the rows themselves.
        days, expected = expected_heatmap(data)
        header = page.eval_on_selector_all("table.heat thead th", "els => els.map(e => e.textContent)")
        assert header == ["source", *[f"{d:%m-%d}" for d in days], "total"]
        rows = page.eval_on_selector_all(
            "table.heat tbody tr",
            "rows => rows.map(r => [r.querySelector('th').textContent, [...r.querySelectorAll('td')].map(c => c.textContent)])",
        )
        assert {source for source, _ in rows} == set(expected)
        for source, cells in rows:
            want = [str(n) if n else "·" for n in expected[source]] + [str(sum(expected[source]))]
            assert cells == want, source

        # The chart: an inline SVG with a legend of the top 5 tickers, axis labels, and one point per scored day.
        series = expected_series(data)
        assert page.locator("svg.chart").count() == 1
        svg_text = page.eval_on_selector("svg.chart", "e => e.textContent")
        assert "day (UTC)" in svg_text and "mean sentiment_score" in svg_text
        legend = page.eval_on_selector_all("svg.chart > text", "els => els.map(e => e.textContent)")
        legend = [t for t in legend if "mention" in t]
        assert [t.split(" ")[0] for t in legend] == [t for t, _ in series]
        titles = page.eval_on_selector_all("svg.chart circle title", "els => els.map(e => e.textContent)")
        for ticker, by_day in series:
            got = sorted(t for t in titles if t.startswith(ticker + " "))
            assert len(got) == len(by_day), ticker
            for d, (mean, n) in by_day.items():
                plural = "s" if n != 1 else ""
                assert f"{ticker} {d:%Y-%m-%d}: {mean:+.3f} over {n} article{plural}" in got
        # Each ticker's points are joined in day order (dashed across days without articles).
        assert page.locator("svg.chart line.series").count() == sum(len(by_day) - 1 for _, by_day in series)

        # The latest 10 events, newest first, with status as of now and their tags.
        now = datetime.now(UTC).replace(tzinfo=None)
        latest = sorted(data.events, key=lambda e: e["created_at"], reverse=True)[:10]
        shown = page.eval_on_selector_all(
            "table.events tbody tr", "rows => rows.map(r => [...r.querySelectorAll('td')].map(c => c.textContent))"
        )
        assert [r[0] for r in shown] == [e["event_title"] for e in latest]
        assert [r[2] for r in shown] == ["CLOSED" if e["date"] <= now else "OPEN" for e in latest]
        assert {r[2] for r in shown} == {"OPEN", "CLOSED"}
        assert [r[3].split(" ") for r in shown] == [e["tags"] for e in latest]

        # Links: the explorer (with the key explained), metrics, docs.
        hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
        assert "/crypto-news/YOUR_KEY" in hrefs and "/metrics" in hrefs
        body = page.inner_text("body")
        assert "access key" in body and "README.md" in body
    finally:
        page.close()
    assert problems == []


def test_counts_of_one_are_singular() -> None:
    day = date(2024, 12, 3)
    rows = [(f"source {i:02d}", day, 100 - i) for i in range(api.overview.HEATMAP_SOURCES + 1)]
    assert ">1 other source<" in api.overview.render_heatmap([day], rows)
    chart = api.overview.render_chart([day - timedelta(days=1), day], [("BTC", 1, day, 0.5, 1), ("ETH", 2, day, 0.1, 2)])
    assert ">BTC (1 mention)<" in chart and ">ETH (2 mentions)<" in chart


def test_user_strings_are_escaped(server: ApiServer, browser: Any) -> None:
    r = httpx.get(server.url("/"), timeout=30)
    assert r.status_code == 200
    assert "<script" not in r.text and "<img" not in r.text and "<b>Evil" not in r.text and EVIL_TAG not in r.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    assert "default-src 'none'" in r.headers["content-security-policy"]
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.goto(server.url("/"), wait_until="load")
        # Shown as text, never as markup; a javascript: source URL is not made a link.
        assert page.evaluate("document.querySelectorAll('script, img, main b, main i, iframe').length") == 0
        assert page.evaluate("document.querySelectorAll('a[href^=\"javascript\"]').length") == 0
        body = page.inner_text("body")
        assert EVIL_TITLE in body and EVIL_SOURCE in body and EVIL_TAG in body
    finally:
        page.close()
    assert dialogs == []


def test_aggregates_are_computed_once_per_snapshot(server: ApiServer) -> None:
    state = server.app.state.cw  # type: ignore[attr-defined]
    for _ in range(3):
        assert httpx.get(server.url("/"), timeout=30).status_code == 200
    first = state.extras["overview"]._facts
    assert httpx.get(server.url("/"), timeout=30).status_code == 200
    assert state.extras["overview"]._facts is first
    assert first.name == state.extras["news"].snapshots.current.name
    # The overview reads through the news component's snapshot manager: no second one was opened.
    assert "snapshots" not in state.extras


def test_new_snapshot_replaces_the_page(tmp_path: Path, data: Data) -> None:
    home = tmp_path / "home"
    build(home, data)
    app = create_app(Settings(home=home, pdf_prewarm=False, snapshot_poll_seconds=0.1), access=StaticKeys(["k"]))
    with ApiServer(app) as srv:
        before = httpx.get(srv.url("/"), timeout=30)
        assert before.status_code == 200 and "A brand new question?" not in before.text
        con = connect(home / "warehouse.duckdb")
        try:
            extra = make_events(13)[12]
            extra.update(event_title="A brand new question?", created_at=datetime(2025, 1, 1, 0, 0, 0))
            write(con, Data([], [extra]))
            published = publish_snapshot(con, home / "snapshots")
        finally:
            con.close()
        deadline = time.monotonic() + 10
        while httpx.get(srv.url("/readyz"), timeout=30).json().get("snapshot") != published.name:
            assert time.monotonic() < deadline, "the server did not switch to the new snapshot"
            time.sleep(0.05)
        after = httpx.get(srv.url("/"), timeout=30)
        assert after.status_code == 200 and "A brand new question?" in after.text
        assert published.name in after.text


CARD = re.compile(r"<div class=card><div class=k>(.*?)</div><div class=v>(.*?)</div><div class=s>(.*?)</div></div>")


def _cards(srv: ApiServer) -> dict[str, tuple[str, str]]:
    r = httpx.get(srv.url("/"), timeout=30)
    assert r.status_code == 200
    return {k: (v, sub) for k, v, sub in CARD.findall(r.text)}


def test_newest_article_leaves_out_undated_items(tmp_path: Path, data: Data) -> None:
    """An undated item carries its fetch time: it must not make the feeds look fresh (as `cryptowire status`)."""
    home = tmp_path / "home"
    home.mkdir()
    articles = data.articles[:10]
    undated = {**articles[0], "id": f"a_{999:016x}", "published_at": NEWEST + timedelta(days=3)}
    con = connect(home / "warehouse.duckdb")
    try:
        write(con, Data([*articles, undated], []))
        con.execute("UPDATE articles SET date_inferred = true WHERE id = ?", [undated["id"]])
        snapshot = publish_snapshot(con, home / "snapshots")
    finally:
        con.close()
    newest_dated = max(a["published_at"] for a in articles)
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys(["k"]))) as srv:
        cards = _cards(srv)
    assert cards["newest dated article"][0] == f"{newest_dated:%Y-%m-%d %H:%M} UTC", cards
    assert cards["articles"][0] == "11"

    # A snapshot published before news had date_inferred: the figure is labelled for what it is.
    with duckdb.connect(str(snapshot)) as old:
        old.execute("DROP INDEX news_id")
        old.execute("ALTER TABLE news DROP COLUMN date_inferred")
        old.execute("CREATE UNIQUE INDEX news_id ON news (id)")
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys(["k"]))) as srv:
        cards = _cards(srv)
    assert "newest dated article" not in cards
    assert cards["newest item (fetch time if undated)"][0] == f"{undated['published_at']:%Y-%m-%d %H:%M} UTC"


def test_no_snapshot_yet_is_a_503_page(tmp_path: Path) -> None:
    app = create_app(Settings(home=tmp_path / "empty", pdf_prewarm=False), access=StaticKeys(["k"]))
    with ApiServer(app) as srv:
        r = httpx.get(srv.url("/"), timeout=30)
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("text/html")
    assert "No data published yet" in r.text and "cryptowire materialize" in r.text
    assert str(tmp_path) not in r.text  # no server paths on a public page


def test_works_without_the_news_component(tmp_path: Path, data: Data) -> None:
    """Overview and metrics alone open one snapshot manager of their own, and close it."""
    home = tmp_path / "home"
    build(home, Data(data.articles[:10], data.events[:3]))
    state = SimpleNamespace(settings=Settings(home=home, pdf_prewarm=False), extras={})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await api.overview.startup(state)
        await api.metrics.startup(state)
        yield
        await api.metrics.shutdown(state)
        await api.overview.shutdown(state)

    app = Starlette(routes=[*api.overview.routes(state), *api.metrics.routes(state)], lifespan=lifespan)
    with ApiServer(app) as srv:
        manager = state.extras["snapshots"]
        r = httpx.get(srv.url("/"), timeout=30)
        assert r.status_code == 200 and manager.current is not None
        assert ">10<" in r.text and ">3<" in r.text  # the articles and events cards
        assert "cryptowire_snapshot_age_seconds" in httpx.get(srv.url("/metrics"), timeout=30).text
    assert "snapshots" not in state.extras and manager.current is None


def test_an_empty_snapshot_renders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    build(home, Data([], []))
    app = create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys(["k"]))
    with ApiServer(app) as srv:
        r = httpx.get(srv.url("/"), timeout=30)
        head = httpx.head(srv.url("/"), timeout=30)
    assert r.status_code == 200 and head.status_code == 200
    assert "No articles yet" in r.text and "No prediction events in this snapshot" in r.text
    assert "<svg" not in r.text
