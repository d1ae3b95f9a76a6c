"""Sentiment over time and trending: the incremental asset_sentiment table against a recount, `assetSentiment`,
`trendingTickers` and `trendingTopics` over a real server on constructed data whose answers are known, their
errors and costs, and `cryptowire plot sentiment` writing a real PNG."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest
from typer.testing import CliRunner

from api.access import StaticKeys
from api.app import create_app
from api.cost import query_cost
from api.gql_documents import DocumentCache
from api.gql_exec import coerce_variables
from pipeline.cli import app as cli
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build
from warehouse.config import Settings, get_settings
from warehouse.db import connect
from warehouse.parts import connect_snapshot
from warehouse.published import current_snapshot
from warehouse.sentiment import refresh_asset_sentiment

KEY = "k"
ANCHOR = datetime(2024, 12, 10, 12, 0)  # the newest dated article
TOPIC = {"BTC": "markets", "SOL": "etf", "XRP": "regulation", "ETH": "defi", "DOGE": "memes"}
LABELS = ("positive", "negative", "neutral")


def _article(i: int, ticker: str, at: datetime, inferred: bool = False) -> dict[str, Any]:
    return {
        "id": f"a_{i:016x}", "source_name": "Wire", "url": f"https://news.example/{i}", "title": f"{ticker} {i}",
        "summary": "s", "image_url": None, "published_at": at, "sentiment": LABELS[i % 3],
        "sentiment_score": None if i % 11 == 5 else round(((i * 37) % 200 - 100) / 100, 2),
        "tickers": [ticker], "topics": [TOPIC[ticker]], "date_inferred": inferred,
    }


def trending_articles() -> list[dict[str, Any]]:
    """Mentions per day window (k = 0 the latest day (ANCHOR - 1 day, ANCHOR], k = 1..7 the baseline):

    - SOL: 5 in the latest hour, none before: z = 5 (std floored at 1), ratio null.
    - XRP: 4 in the latest day; baseline 1, 0, 0, 0, 0, 0, 6: mean 1, std sqrt(37/7 - 1): z = 3 / 2.0702 = 1.4491.
    - BTC: 3 in the latest day (one at ANCHOR itself); baseline 2 a day (one exactly at ANCHOR - 1 day: k = 1):
      mean 2, std 0: z = 1, ratio 1.5.
    - ETH: 4 in the latest day; baseline 10, 0, 10, 0, 10, 0, 10: below its mean, not trending.
    - DOGE: 2 in the latest day, none before: under the minimum count (3).
    - 10 undated SOL items after ANCHOR: they count nowhere and do not move the anchor.
    """
    rows: list[tuple[str, datetime, bool]] = []
    rows += [("SOL", ANCHOR - timedelta(minutes=10), False)] * 5
    rows += [("XRP", ANCHOR - timedelta(hours=2), False)] * 4
    rows += [("XRP", ANCHOR - timedelta(days=1, hours=1), False)]
    rows += [("XRP", ANCHOR - timedelta(days=7, hours=1), False)] * 6
    rows += [("BTC", ANCHOR, False), ("BTC", ANCHOR - timedelta(hours=3), False), ("BTC", ANCHOR - timedelta(hours=5), False)]
    rows += [("BTC", ANCHOR - timedelta(days=1), False), ("BTC", ANCHOR - timedelta(days=1, hours=6), False)]
    for k in range(2, 8):
        rows += [("BTC", ANCHOR - timedelta(days=k, hours=2), False)] * 2
    rows += [("ETH", ANCHOR - timedelta(hours=7), False)] * 4
    for k in (1, 3, 5, 7):
        rows += [("ETH", ANCHOR - timedelta(days=k, hours=4), False)] * 10
    rows += [("DOGE", ANCHOR - timedelta(hours=1, minutes=30), False)] * 2
    rows += [("SOL", ANCHOR + timedelta(hours=3), True)] * 10
    # Older history for the sentiment series: BTC every 5 hours over 40 days before the baseline.
    rows += [("BTC", ANCHOR - timedelta(days=8) - timedelta(hours=5 * j), j % 9 == 4) for j in range(200)]
    return [_article(i, t, at, inferred) for i, (t, at, inferred) in enumerate(rows)]


@pytest.fixture(scope="module")
def data() -> Data:
    return Data(trending_articles(), [])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, data: Data) -> Path:
    home = tmp_path_factory.mktemp("trends") / "home"
    build(home, data)
    return home


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[ApiServer]:
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        yield srv


def gql(srv: ApiServer, query: str, variables: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.post(srv.url(f"/crypto-news/{KEY}"), json={"query": query, "variables": variables or {}}, timeout=30)


def ok(srv: ApiServer, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    r = gql(srv, query, variables)
    assert r.status_code == 200 and "errors" not in r.json(), r.text
    return r.json()["data"]


def refused(srv: ApiServer, query: str, variables: dict[str, Any] | None = None) -> tuple[str, str]:
    r = gql(srv, query, variables)
    assert r.status_code == 400, r.text
    error = r.json()["errors"][0]
    return error["extensions"]["code"], error["message"]


TRENDING = """query T($w: TrendWindow, $n: Int) {
  trendingTickers(window: $w, first: $n) { window windowStart windowEnd baselineStart baselineWindows minCount
    items { name count baselineMean baselineStd ratio zScore } }
  trendingTopics(window: $w, first: $n) { items { name count zScore } }
}"""
SENTIMENT = """query S($t: String!, $i: SentimentInterval, $since: DateTime, $until: DateTime) {
  assetSentiment(ticker: $t, interval: $i, since: $since, until: $until) {
    ticker interval since until buckets { start end articles positive neutral negative scored meanScore }
  }
}"""


# --------------------------------------------------------------------------------------------- trending


def test_trending_tickers_by_day_on_known_data(server: ApiServer) -> None:
    got = ok(server, TRENDING, {"w": "DAY"})["trendingTickers"]
    assert got["windowEnd"] == "2024-12-10T12:00:00.000Z" and got["windowStart"] == "2024-12-09T12:00:00.000Z"
    assert got["baselineStart"] == "2024-12-02T12:00:00.000Z"
    assert (got["window"], got["baselineWindows"], got["minCount"]) == ("DAY", 7, 3)
    assert got["items"] == [
        {"name": "SOL", "count": 5, "baselineMean": 0.0, "baselineStd": 0.0, "ratio": None, "zScore": 5.0},
        {"name": "XRP", "count": 4, "baselineMean": 1.0, "baselineStd": 2.0702, "ratio": 4.0, "zScore": 1.4491},
        {"name": "BTC", "count": 3, "baselineMean": 2.0, "baselineStd": 0.0, "ratio": 1.5, "zScore": 1.0},
    ]


def test_trending_topics_follow_the_same_rule(server: ApiServer) -> None:
    got = ok(server, TRENDING, {"w": "DAY", "n": 2})
    assert [(i["name"], i["count"], i["zScore"]) for i in got["trendingTopics"]["items"]] == [
        ("etf", 5, 5.0), ("regulation", 4, 1.4491),
    ]
    assert [i["name"] for i in got["trendingTickers"]["items"]] == ["SOL", "XRP"]  # `first` cuts the list


def test_trending_by_hour(server: ApiServer) -> None:
    got = ok(server, TRENDING, {"w": "HOUR"})["trendingTickers"]
    assert got["windowStart"] == "2024-12-10T11:00:00.000Z" and got["baselineWindows"] == 168
    # Only SOL has 3 or more mentions in (11:00, 12:00]; BTC has 1 there, XRP and DOGE none.
    assert got["items"] == [
        {"name": "SOL", "count": 5, "baselineMean": 0.0, "baselineStd": 0.0, "ratio": None, "zScore": 5.0}
    ]


def test_trending_on_a_snapshot_without_dated_articles(tmp_path: Path) -> None:
    home = tmp_path / "home"
    build(home, Data([_article(1, "BTC", ANCHOR, inferred=True)], []))
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        got = ok(srv, TRENDING, {"w": "DAY"})["trendingTickers"]
        assert got["items"] == [] and got["windowEnd"] is None
        series = ok(srv, SENTIMENT, {"t": "BTC"})["assetSentiment"]
        assert series["buckets"] == [] and series["since"] is None


# --------------------------------------------------------------------------------------------- sentiment


def _sql_counts(home: Path, ticker: str, start: str, end: str) -> tuple[int, int, int, int]:
    """A plain count on the warehouse: dated articles mentioning the ticker in [start, end)."""
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(
            """SELECT count(*), count(*) FILTER (WHERE a.sentiment = 'positive'),
                      count(*) FILTER (WHERE a.sentiment = 'negative'), count(a.sentiment_score)
               FROM articles a JOIN article_tickers t ON t.article_id = a.id
               WHERE t.ticker = ? AND NOT a.date_inferred AND a.published_at >= ? AND a.published_at < ?""",
            [ticker, start, end],
        ).fetchall()[0]
    finally:
        con.close()


@pytest.mark.parametrize("interval,since,until", [
    ("HOUR", "2024-12-01T00:00:00Z", "2024-12-10T23:59:59Z"),
    ("DAY", "2024-10-20", "2024-12-10"),
    ("WEEK", "2024-09-01", "2024-12-31"),
])
def test_buckets_sum_to_a_plain_count(server: ApiServer, home: Path, interval: str, since: str, until: str) -> None:
    series = ok(server, SENTIMENT, {"t": "btc", "i": interval, "since": since, "until": until})["assetSentiment"]
    assert series["ticker"] == "BTC" and series["interval"] == interval
    buckets = series["buckets"]
    assert buckets and all(b["articles"] > 0 for b in buckets)
    starts = [b["start"] for b in buckets]
    assert starts == sorted(starts) and series["since"] <= starts[0] and buckets[-1]["end"] <= series["until"]
    total = _sql_counts(home, "BTC", series["since"][:-1], series["until"][:-1])
    assert (sum(b["articles"] for b in buckets), sum(b["positive"] for b in buckets),
            sum(b["negative"] for b in buckets), sum(b["scored"] for b in buckets)) == total
    for b in buckets:  # and bucket by bucket
        n, pos, neg, scored = _sql_counts(home, "BTC", b["start"][:-1], b["end"][:-1])
        assert (b["articles"], b["positive"], b["negative"], b["scored"]) == (n, pos, neg, scored), b
        assert b["positive"] + b["neutral"] + b["negative"] == b["articles"]
    if interval == "WEEK":
        assert all(datetime.fromisoformat(s[:-1]).weekday() == 0 for s in starts)


def test_week_means_are_weighted_by_scored_articles(home: Path, server: ApiServer) -> None:
    week = ok(server, SENTIMENT, {"t": "BTC", "i": "WEEK", "since": "2024-11-04", "until": "2024-11-10"})
    (bucket,) = week["assetSentiment"]["buckets"]
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        mean = con.execute(
            """SELECT avg(a.sentiment_score) FROM articles a JOIN article_tickers t ON t.article_id = a.id
               WHERE t.ticker = 'BTC' AND NOT a.date_inferred AND a.published_at >= '2024-11-04'
                 AND a.published_at < '2024-11-11'"""
        ).fetchall()[0][0]
    finally:
        con.close()
    assert bucket["start"] == "2024-11-04T00:00:00.000Z" and bucket["meanScore"] == pytest.approx(mean, abs=1e-6)


def test_default_range_ends_at_the_newest_dated_article(server: ApiServer) -> None:
    series = ok(server, SENTIMENT, {"t": "SOL"})["assetSentiment"]
    assert series["interval"] == "DAY" and series["until"] == "2024-12-11T00:00:00.000Z"
    assert series["since"] == "2024-11-11T00:00:00.000Z"  # 30 days
    # The undated SOL items (after the anchor) are not counted.
    assert [(b["start"], b["articles"]) for b in series["buckets"]] == [("2024-12-10T00:00:00.000Z", 5)]
    assert refused(server, SENTIMENT, {"t": "NOPE"})[0] == "BAD_USER_INPUT"  # no article names it


@pytest.mark.parametrize("variables,what", [
    ({"t": "BTC", "since": "2024-12-05", "until": "2024-12-01"}, "is after `until`"),
    ({"t": "BTC", "i": "HOUR", "since": "2024-01-01", "until": "2024-12-01"}, "at most 744 buckets"),
    ({"t": "BTC", "i": "DAY", "since": "2010-01-01", "until": "2024-12-01"}, "or interval WEEK"),
    ({"t": "BTC", "i": "HOUR", "since": "2024-01-01"}, "at most 744 buckets"),  # until: the newest article
    ({"t": "BTC", "i": "WEEK", "since": "9999-12-01", "until": "9999-12-31"}, "between the years"),
    ({"t": "BTC", "i": "WEEK", "until": "0001-01-02"}, "between the years"),  # 26 weeks before it
    ({"t": "", "i": "DAY"}, "`ticker` must be a symbol"),
    ({"t": "BTC; DROP", "i": "DAY"}, "`ticker` must be a symbol"),
])
def test_bad_sentiment_arguments_are_explained(server: ApiServer, variables: dict[str, Any], what: str) -> None:
    code, message = refused(server, SENTIMENT, variables)
    assert code == "BAD_USER_INPUT" and what in message, message


def test_unknown_interval_or_window(server: ApiServer) -> None:
    code, message = refused(server, SENTIMENT, {"t": "BTC", "i": "MONTH"})
    assert code == "BAD_USER_INPUT" and "SentimentInterval" in message
    code, message = refused(server, '{ assetSentiment(ticker: "BTC", interval: MONTH) { ticker } }')
    assert code == "GRAPHQL_VALIDATION_FAILED" and "MONTH" in message
    code, message = refused(server, TRENDING, {"w": "WEEK"})
    assert code == "BAD_USER_INPUT" and "TrendWindow" in message
    code, message = refused(server, TRENDING, {"w": "DAY", "n": 101})
    assert code == "BAD_USER_INPUT" and "limit of 100" in message


def _cost(query: str, variables: dict[str, Any] | None = None) -> int:
    prepared = DocumentCache().get(query)
    op = prepared.operation(None)
    return query_cost(op, prepared.fragments, coerce_variables(op, variables or {}))


def test_costs() -> None:
    q = '{{ assetSentiment(ticker: "BTC"{args}) {{ buckets {{ articles }} }} }}'
    assert _cost(q.format(args="")) == 1 + 30  # the default: 30 days
    assert _cost(q.format(args=", interval: HOUR")) == 1 + 168
    assert _cost(q.format(args=", interval: WEEK")) == 1 + 26
    assert _cost(q.format(args=', since: "2024-12-01", until: "2024-12-07"')) == 1 + 7
    assert _cost(q.format(args=', interval: HOUR, since: "2024-12-01T10:30:00Z", until: "2024-12-01T12:00:00Z"')) == 1 + 3
    assert _cost(q.format(args=', interval: WEEK, since: "2024-12-02", until: "2024-12-15"')) == 1 + 2
    assert _cost(q.format(args=', since: "2024-12-01"')) == 1 + 732  # no snapshot to end it: the limit
    prepared = DocumentCache().get(q.format(args=', since: "2024-12-01"'))
    op = prepared.operation(None)  # up to the snapshot's newest dated article:
    assert query_cost(op, prepared.fragments, {}, datetime(2024, 12, 7, 12)) == 1 + 7
    assert _cost("{ trendingTickers { items { name } } }") == 11
    assert _cost("{ trendingTickers(first: 3) { items { name } } trendingTopics(window: HOUR, first: 5) { window } }") == 9


def test_the_cost_is_charged(server: ApiServer) -> None:
    r = gql(server, SENTIMENT, {"t": "BTC", "i": "DAY", "since": "2024-12-01", "until": "2024-12-10"})
    assert r.status_code == 200 and r.headers["X-CU-Cost"] == "11"
    # `since` alone: the range the answer covers, up to the newest dated article (2024-12-10), not the limit
    r = gql(server, SENTIMENT, {"t": "BTC", "i": "DAY", "since": "2024-12-01"})
    assert r.status_code == 200 and r.json()["data"]["assetSentiment"]["until"] == "2024-12-11T00:00:00.000Z"
    assert r.headers["X-CU-Cost"] == "11", r.headers["X-CU-Cost"]


# --------------------------------------------------------------------------------------------- the asset


def test_incremental_refresh_equals_a_rebuild(tmp_path: Path, data: Data) -> None:
    """Re-score, re-date, re-tag, date-correct and delete articles: the incremental table equals one rebuilt from
    nothing, and only the buckets touched were recomputed."""
    home = tmp_path / "home"
    build(home, data)
    con = connect(home / "warehouse.duckdb")
    try:
        before = con.execute("SELECT * FROM asset_sentiment ORDER BY ALL").fetchall()
        assert refresh_asset_sentiment(con).changed == 0
        assert con.execute("SELECT * FROM asset_sentiment ORDER BY ALL").fetchall() == before  # nothing rewritten
        ids = [a["id"] for a in data.articles]
        con.execute("UPDATE articles SET sentiment = 'negative', sentiment_score = -0.9 WHERE id = ?", [ids[0]])
        con.execute("UPDATE articles SET published_at = published_at - INTERVAL 3 DAY WHERE id = ?", [ids[1]])
        con.execute("UPDATE article_tickers SET ticker = 'ETH' WHERE article_id = ?", [ids[2]])
        undated = next(a["id"] for a in data.articles if a["date_inferred"] and a["tickers"] == ["BTC"])
        con.execute("UPDATE articles SET date_inferred = false WHERE id = ?", [undated])  # a later fetch found the date
        con.execute("DELETE FROM article_tickers WHERE article_id = ?", [ids[3]])
        report = refresh_asset_sentiment(con)
        assert report.changed == 8 and 0 < report.hours <= 8 and 0 < report.days <= 8
        # a mean summed in another order may differ in its last bits: compare it to 1e-9
        rows = "SELECT * EXCLUDE (updated_at) REPLACE (round(mean_score, 9) AS mean_score) FROM asset_sentiment ORDER BY ALL"
        incremental = con.execute(rows).fetchall()
        con.execute("DELETE FROM asset_sentiment; DELETE FROM asset_sentiment_inputs")
        refresh_asset_sentiment(con)
        rebuilt = con.execute(rows).fetchall()
    finally:
        con.close()
    assert incremental == rebuilt


# --------------------------------------------------------------------------------------------- the chart


def test_plot_sentiment_writes_a_png(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    monkeypatch.setenv("CRYPTOWIRE_HOME", str(home))
    get_settings.cache_clear()
    try:
        out = tmp_path / "btc.png"
        runner = CliRunner()
        result = runner.invoke(cli, ["plot", "sentiment", "--ticker", "BTC", "--out", str(out), "--since",
                                     "2024-10-01", "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["buckets"] > 30 and report["out"] == str(out)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(out) as img:
            assert img.format == "PNG" and img.size == (1000, 600)
            assert len(img.getcolors(maxcolors=1 << 16) or []) > 4  # drawn, not blank
        hourly = runner.invoke(cli, ["plot", "sentiment", "--ticker", "btc", "--out", str(tmp_path / "h.png"),
                                     "--interval", "hour"])
        assert hourly.exit_code == 0 and "per hour" in hourly.output, hourly.output
        for args, what, code in ((["--ticker", "NOPE"], "no dated article mentions NOPE", 1),
                                 (["--ticker", "BTC", "--interval", "month"], "unknown --interval", 2),
                                 (["--ticker", "BTC", "--since", "yesterday"], "Invalid value for '--since'", 2),
                                 (["--ticker", "BTC", "--since", "2030-01-01"], "--since 2030-01-01 is after the "
                                                                              "newest dated article (2024-12-", 1)):
            bad = runner.invoke(cli, ["plot", "sentiment", "--out", str(tmp_path / "x.png"), *args])
            assert bad.exit_code == code and what in bad.output, bad.output
        assert not (tmp_path / "x.png").exists()
    finally:
        get_settings.cache_clear()


def test_snapshot_carries_the_sentiment_table(home: Path) -> None:
    con = connect_snapshot(current_snapshot(home / "snapshots"))
    try:
        grains = dict(con.execute("SELECT grain, sum(articles) FROM sentiment GROUP BY ALL").fetchall())
    finally:
        con.close()
    assert grains["hour"] == grains["day"] > 0


def test_overview_chart_reads_the_daily_buckets(server: ApiServer, home: Path) -> None:
    """GET /: the legend counts dated articles only (the 10 undated SOL items after the anchor are not SOL's)."""
    page = httpx.get(server.url("/"), timeout=30).text
    start = "2024-11-11"  # 30 days up to the newest item's day (an undated one, 2024-12-10)
    for ticker in ("BTC", "SOL"):
        n = _sql_counts(home, ticker, start, "2024-12-11")[0]
        assert f">{ticker} ({n} mentions)<" in page


def test_a_snapshots_anchor_is_asked_once(home: Path) -> None:
    from warehouse import trends

    con = connect_snapshot(current_snapshot(home / "snapshots"))
    try:
        facts: dict[str, Any] = {}
        first = trends.trending(con, "tickers", "DAY", 10, facts)
        assert first["items"] and facts["newest_dated"] is not None
        assert trends.trending(con, "tickers", "DAY", 10, facts) == first
        assert trends.trending(con, "tickers", "DAY", 1, facts)["items"] == first["items"][:1]
        facts["newest_dated"] = None  # what the memo says is what the next request uses: it is not asked again
        assert trends.trending(con, "tickers", "HOUR", 10, facts)["items"] == []
        assert trends.sentiment_series(con, trends.SentimentRequest("BTC", "DAY"), facts)["buckets"] == []
        # the day's ranking was kept whole: the anchor is not asked again for it either
        assert trends.trending(con, "tickers", "DAY", 10, facts) == first
    finally:
        con.close()
