"""A snapshot published by an older cryptowire, served until the first publish after an upgrade (the review in
/work/review/s42-upgrade kept one, made on 11-23: news without per-asset sentiment or stories, events without
withdrawals or change times, no `stories` nor `sentiment` table). A field it has no data for at all is refused and
free (`assetSentiment`), or keeps the answer the docs promised older snapshots, says so in `extensions.notes`, and
costs nothing when it serves none of its data (`stories`); `cryptowire plot sentiment` says the snapshot predates
sentiment. After a publish every field answers, and is charged, as usual (the advice works).

Each test rewrites a real single-file snapshot into that older form, and serves it with the real metering on
127.0.0.1; the publish after it follows CRYPTOWIRE_TEST_SNAPSHOTS (a single file or a set)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest
from typer.testing import CliRunner

from api.app import create_app
from pipeline.cli import app as cli
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_articles, make_events, republish
from warehouse.config import Settings
from warehouse.published import current_snapshot

CODE = "SNAPSHOT_PREDATES_FIELD"
OLD_NAME = "snapshot-20261123T120000000000Z-0a1d23.duckdb"  # published on 11-23, before this version
# What the 11-23 snapshot's tables lacked (the review's home1q), against a current single file.
NEWS_LATER = ("ticker_sentiments", "story_id", "story_title", "story_articles", "story_sources", "story_first_seen",
              "story_first", "story_prev_at", "story_prior_tickers", "story_prior_topics", "story_prior_sources",
              "story_prior_sentiments")
EVENTS_LATER = ("withdrawn_reason", "updated_at", "withdrawn_at")
SENTIMENT = '{ assetSentiment(ticker: "BTC") { ticker since until buckets { start articles } } }'
STORIES = "{ stories(first: 30) { pageInfo { hasNextPage } edges { node { id title } } } }"
USED = "{ usage { cuUsedToday } }"


def make_older(home: Path, date_inferred: bool = True) -> str:
    """Replace ``home``'s single-file snapshot by the same rows as an older cryptowire published them, and point
    CURRENT at it; ``date_inferred`` false: as the oldest, which did not tell undated articles apart."""
    snapshots = home / "snapshots"
    src = current_snapshot(snapshots)
    assert src is not None and src.suffix == ".duckdb"
    dropped = NEWS_LATER + (() if date_inferred else ("date_inferred",))
    con = duckdb.connect(str(snapshots / OLD_NAME))
    try:
        con.execute(f"ATTACH '{src}' AS s (READ_ONLY)")
        con.execute(f"CREATE TABLE news AS SELECT * EXCLUDE ({', '.join(dropped)}) FROM s.news ORDER BY pos")
        con.execute(f"CREATE TABLE events AS SELECT * EXCLUDE ({', '.join(EVENTS_LATER)}) FROM s.events ORDER BY pos")
        for table in ("filter_values", "snapshot_info"):
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM s.{table}")
        con.execute("CREATE UNIQUE INDEX news_id ON news (id)")
        con.execute("CREATE UNIQUE INDEX events_created_at ON events (created_at)")
        con.execute("DETACH s")
    finally:
        con.close()
    src.unlink()
    (snapshots / "CURRENT").write_text(OLD_NAME + "\n")
    return OLD_NAME


@dataclass
class Served:
    home: Path
    srv: ApiServer
    key_id: str
    key: str

    def post(self, query: str, variables: dict[str, Any] | None = None) -> httpx.Response:
        return httpx.post(self.srv.url(f"/crypto-news/{self.key}"), json={"query": query, "variables": variables or {}},
                          timeout=30)

    def used(self) -> int:
        return int(self.post(USED).json()["data"]["usage"]["cuUsedToday"])

    def publish(self) -> None:
        """What the errors advise (`cryptowire materialize` publishes a snapshot): the API moves to it by itself."""
        republish(self.home)
        deadline = time.monotonic() + 30
        while httpx.get(self.srv.url("/readyz"), timeout=30).json().get("snapshot") == OLD_NAME:
            assert time.monotonic() < deadline, "the API did not move to the new snapshot"
            time.sleep(0.1)


@contextmanager
def serving(tmp_path: Path, date_inferred: bool = True) -> Iterator[Served]:
    home = tmp_path / "home"
    articles = make_articles(60, 0)
    for a in articles[::7]:  # a few undated items: their fetch time is their date
        a["date_inferred"] = True
    build(home, Data(articles, make_events(12)), parts=False)
    make_older(home, date_inferred)
    app = create_app(Settings(home=home, pdf_prewarm=False, snapshot_poll_seconds=0.1))  # the real metering
    key_id, key = app.state.cw.access.store.create_key("old", "pro", ["news", "events"])
    with ApiServer(app) as srv:
        yield Served(home, srv, key_id, key)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path) as s:
        yield s


def _code(r: httpx.Response) -> str:
    return r.json()["errors"][0]["extensions"]["code"]


def _notes(r: httpx.Response) -> dict[str, str]:
    body = r.json()
    assert "errors" not in body, r.text
    # 2.4 days of news: trending also notes its short baseline (SHORT_BASELINE), whatever the snapshot's age
    notes = [n for n in body.get("extensions", {}).get("notes", []) if n["code"] != "SHORT_BASELINE"]
    assert all(n["code"] == CODE for n in notes), notes
    return {n["field"]: n["message"] for n in notes}


def test_asset_sentiment_over_a_snapshot_before_sentiment_is_refused_free_until_a_publish(served: Served) -> None:
    """The review: `buckets: []` at 31 CU, though the snapshot holds dated BTC articles."""
    r = served.post(SENTIMENT)
    assert r.status_code == 503 and _code(r) == CODE, r.text
    assert r.json()["data"] is None
    message = r.json()["errors"][0]["message"]
    assert OLD_NAME in message and "older cryptowire" in message and "no sentiment buckets" in message, message
    assert "`assetSentiment`" in message and "run `cryptowire materialize` to publish a new one" in message, message
    assert r.headers["X-CU-Cost"] == "0" and r.headers["Retry-After"] == "60"
    # asked with other fields: the whole request is refused, free (the message says to ask them without it)
    both = served.post("{ cryptoNews(first: 5) { edges { node { id } } } " + SENTIMENT[1:])
    assert both.status_code == 503 and _code(both) == CODE and both.headers["X-CU-Cost"] == "0", both.text
    # input that is wrong whatever the snapshot holds is still the caller's mistake, first
    bad = served.post('{ assetSentiment(ticker: "B;B") { ticker } }')
    assert bad.status_code == 400 and _code(bad) == "BAD_USER_INPUT", bad.text
    assert served.used() == 0
    plain = served.post("{ cryptoNews(first: 5) { edges { node { id title } } } }")  # what the snapshot has
    assert plain.status_code == 200 and plain.headers["X-CU-Cost"] == "6" and "extensions" not in plain.json()
    assert served.used() == 6

    served.publish()
    after = served.post(SENTIMENT)
    assert after.status_code == 200 and "extensions" not in after.json(), after.text
    assert sum(b["articles"] for b in after.json()["data"]["assetSentiment"]["buckets"]) > 0
    assert after.headers["X-CU-Cost"] == "31" and served.used() == 6 + 31


def test_stories_over_a_snapshot_before_stories_are_empty_free_and_noted(served: Served) -> None:
    r = served.post(STORIES)
    assert r.status_code == 200 and r.json()["data"]["stories"]["edges"] == [], r.text  # as the docs promise
    assert r.headers["X-CU-Cost"] == "0"
    notes = _notes(r)
    assert list(notes) == ["Query.stories"], notes
    assert OLD_NAME in notes["Query.stories"] and "has no stories" in notes["Query.stories"]
    assert "`stories` answers an empty list, not charged" in notes["Query.stories"]
    assert "run `cryptowire materialize` to publish a new one" in notes["Query.stories"]
    # with the news: the page of articles is charged, the stories are not
    q = "{ cryptoNews(first: 5) { edges { node { id story { id } } } } " + STORIES[1:]
    r = served.post(q)
    assert r.status_code == 200 and r.headers["X-CU-Cost"] == "6", r.text
    assert all(e["node"]["story"] is None for e in r.json()["data"]["cryptoNews"]["edges"])
    assert set(_notes(r)) == {"Query.stories", "News.story"}
    assert served.used() == 6

    served.publish()
    r = served.post(STORIES)
    # this warehouse grouped no stories: the empty list is now the data's own answer, charged as any page
    assert r.status_code == 200 and "extensions" not in r.json(), r.text
    assert r.headers["X-CU-Cost"] == "31" and served.used() == 6 + 31


def test_fields_with_a_documented_answer_for_older_snapshots_keep_it_noted_and_charged_as_usual(served: Served) -> None:
    news = ("{ cryptoNews(first: 4, collapseStories: true) { edges { node { id story { id } tickers "
            "tickerSentiments { ticker } } } } }")
    r = served.post(news)
    assert r.status_code == 200 and r.headers["X-CU-Cost"] == "5", r.text
    nodes = [e["node"] for e in r.json()["data"]["cryptoNews"]["edges"]]
    assert len(nodes) == 4 and all(n["story"] is None and n["tickerSentiments"] == [] for n in nodes)
    notes = _notes(r)
    assert list(notes) == ["Query.cryptoNews(collapseStories:)", "News.story", "News.tickerSentiments"], notes
    assert "every article for itself" in notes["Query.cryptoNews(collapseStories:)"]
    assert "per-asset sentiment" in notes["News.tickerSentiments"]

    events = ('{ predictionEvents(first: 3, updatedSince: "2000-01-01") { edges { node { id status updatedAt '
              "withdrawnAt withdrawnReason } } } }")
    r = served.post(events)
    assert r.status_code == 200 and r.headers["X-CU-Cost"] == "4", r.text
    nodes = [e["node"] for e in r.json()["data"]["predictionEvents"]["edges"]]
    assert len(nodes) == 3 and all(n["updatedAt"] is None and n["withdrawnReason"] is None for n in nodes)
    notes = _notes(r)
    assert set(notes) == {"Query.predictionEvents(updatedSince:)", "PredictionEvent.updatedAt",
                          "PredictionEvent.withdrawnAt", "PredictionEvent.withdrawnReason"}, notes
    assert "selects on `createdAt`" in notes["Query.predictionEvents(updatedSince:)"]
    r = served.post("{ predictionEvents(status: WITHDRAWN) { edges { node { id } } } }")
    assert r.status_code == 200 and list(_notes(r)) == ["Query.predictionEvents(status:)"], r.text

    # fragments and aliases are followed as executed; what the snapshot has carries no note
    r = served.post("{ a: cryptoNews(first: 2) { edges { node { ...N } } } } fragment N on News { id title "
                    "story @include(if: true) { id } dateInferred }")
    assert r.status_code == 200 and list(_notes(r)) == ["News.story"], r.text
    r = served.post("{ cryptoNews(first: 2) { edges { node { id dateInferred } } } trendingTickers { items { name } } }")
    assert r.status_code == 200 and _notes(r) == {}, r.text  # this snapshot tells undated items apart
    assert served.used() == 5 + 4 + 11 + 3 + 13


def test_a_snapshot_that_cannot_tell_undated_articles_says_so(tmp_path: Path) -> None:
    with serving(tmp_path, date_inferred=False) as served:
        r = served.post("{ cryptoNews(first: 3) { edges { node { id dateInferred } } } "
                        "trendingTopics(window: DAY, first: 5) { items { name } } }")
        assert r.status_code == 200 and r.headers["X-CU-Cost"] == "9", r.text
        notes = _notes(r)
        assert set(notes) == {"News.dateInferred", "Query.trendingTopics"}, notes
        assert "does not tell undated articles apart" in notes["News.dateInferred"]
        assert "`dateInferred` is false for every article" in notes["News.dateInferred"]
        assert "counts undated articles too" in notes["Query.trendingTopics"]


def test_plot_sentiment_on_a_snapshot_before_sentiment_says_so_and_what_to_do(
    data_home: Path, tmp_path: Path
) -> None:
    """The review: "no dated article mentions BTC ... widen --since/--until", and a query on a missing table."""
    build(data_home, Data(make_articles(60, 0), []), parts=False)
    make_older(data_home)
    out = tmp_path / "btc.png"
    runner = CliRunner()
    res = runner.invoke(cli, ["plot", "sentiment", "--ticker", "BTC", "--out", str(out)])
    assert res.exit_code == 1, res.output  # as plot's other errors that depend on the snapshot
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    assert OLD_NAME in res.output and "published by an older cryptowire" in res.output, res.output
    assert "no sentiment buckets" in res.output and "run `cryptowire materialize`" in res.output, res.output
    assert "widen" not in res.output and "FROM sentiment" not in res.output, res.output
    assert not out.exists()

    republish(data_home)  # what the error advises
    res = runner.invoke(cli, ["plot", "sentiment", "--ticker", "BTC", "--out", str(out)])
    assert res.exit_code == 0 and out.read_bytes()[:4] == b"\x89PNG", res.output
