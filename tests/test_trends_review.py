"""Sentiment series and trending after a review: an article dated in the near future does not anchor trending or
the default ranges (API and `plot sentiment`), an unknown ticker is refused free of charge while a quiet one is
not, the advice for a range too wide names values that work, `plot sentiment` checks its arguments as the API
does (exit 2 with the usage), and the chart's x-axis spans the range its title names."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.access import StaticKeys
from api.app import create_app
from pipeline.cli import app as cli
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build
from tests.test_sentiment_trends import ANCHOR, KEY, SENTIMENT, TRENDING, gql, ok, trending_articles
from warehouse.config import Settings, get_settings
from warehouse.parts import connect_snapshot
from warehouse.published import current_snapshot

runner = CliRunner()
# What trendingTickers(window: DAY) answers on trending_articles() (tests/test_sentiment_trends.py).
DAY_ITEMS = [("SOL", 5, 5.0), ("XRP", 4, 1.4491), ("BTC", 3, 1.0)]


def _extra(i: int, ticker: str, at: datetime, inferred: bool) -> dict[str, Any]:
    return {
        "id": f"b_{i:016x}", "source_name": "Other", "url": f"https://other.example/{i}", "title": f"{ticker} {i}",
        "summary": "s", "image_url": None, "published_at": at, "sentiment": "positive", "sentiment_score": 0.5,
        "tickers": [ticker], "topics": ["markets"], "date_inferred": inferred,
    }


@pytest.fixture(scope="module", params=[False, True], ids=["single-file", "set"])
def home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trending_articles(), plus a BTC article dated (really, not inferred) 20 hours after the snapshot is
    published, as ingest accepts up to a day ahead, and ADA named by an undated article only."""
    home = tmp_path_factory.mktemp("review") / "home"
    future = datetime.now(UTC).replace(tzinfo=None, microsecond=0) + timedelta(hours=20)
    extra = [_extra(1, "BTC", future, False), _extra(2, "ADA", ANCHOR - timedelta(days=2), True)]
    build(home, Data(trending_articles() + extra, []), parts=request.param)
    return home


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[ApiServer]:
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        yield srv


@pytest.fixture
def cli_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("CRYPTOWIRE_HOME", str(home))
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


def plot(*args: str) -> tuple[int, str]:
    result = runner.invoke(cli, ["plot", "sentiment", *args])
    return result.exit_code, result.output


# --------------------------------------------------------------------------------------------- 1: the anchor


def test_a_future_dated_article_does_not_anchor_trending_or_the_default_range(server: ApiServer) -> None:
    got = ok(server, TRENDING, {"w": "DAY"})["trendingTickers"]
    assert got["windowEnd"] == "2024-12-10T12:00:00.000Z", got  # not the article 20 hours after publication
    assert [(i["name"], i["count"], i["zScore"]) for i in got["items"]] == DAY_ITEMS
    assert ok(server, TRENDING, {"w": "HOUR"})["trendingTickers"]["windowEnd"] == "2024-12-10T12:00:00.000Z"
    series = ok(server, SENTIMENT, {"t": "BTC"})["assetSentiment"]
    assert (series["since"], series["until"]) == ("2024-11-11T00:00:00.000Z", "2024-12-11T00:00:00.000Z")
    # The article itself is still served, and counted in its own bucket when a range names it.
    future = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=20)
    day = ok(server, SENTIMENT, {"t": "BTC", "since": future.date().isoformat(), "until": future.date().isoformat()})
    assert [b["articles"] for b in day["assetSentiment"]["buckets"]] == [1]


def test_the_anchor_is_capped_by_the_publication_and_by_now(home: Path) -> None:
    from warehouse.trends import newest_dated, published

    con = connect_snapshot(current_snapshot(home / "snapshots"))
    try:
        created = published(con)
        assert created is not None and ANCHOR < created <= datetime.now(UTC).replace(tzinfo=None)
        assert newest_dated(con) == ANCHOR
        # The command line also caps it at its clock: the newest dated article at or before it.
        assert newest_dated(con, now=ANCHOR - timedelta(minutes=1)) == ANCHOR - timedelta(minutes=10)
    finally:
        con.close()


def test_plot_default_range_ends_at_the_capped_anchor(cli_home: Path, tmp_path: Path) -> None:
    code, text = plot("--ticker", "BTC", "--out", str(tmp_path / "b.png"), "--json")
    assert code == 0, text
    report = json.loads(text)
    assert (report["since"], report["until"]) == ("2024-11-11T00:00:00.000Z", "2024-12-11T00:00:00.000Z")


# --------------------------------------------------------------------------------------------- 2: unknown ticker


def test_an_unknown_ticker_is_refused_free_of_charge(server: ApiServer) -> None:
    r = gql(server, SENTIMENT, {"t": "notacoin"})
    assert r.status_code == 400, r.text
    error = r.json()["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "'NOTACOIN'" in error["message"] and "`tickers` field" in error["message"], error
    assert "X-CU-Cost" not in r.headers
    r = gql(server, '{ assetSentiment(ticker: "NOTACOIN", interval: WEEK) { buckets { start } } }')
    assert r.status_code == 400 and "X-CU-Cost" not in r.headers, r.text


def test_an_unknown_ticker_is_refused_before_the_other_fields_run(server: ApiServer) -> None:
    # A security review: the ticker was judged while executing, after the request's other root fields had run (and
    # again, as the fast executor fell back): their work was done, and all of it refunded.
    cache = server.server.config.app.state.cw.extras["news"].snapshots.current.cache
    before = (cache.hits, cache.misses)
    query = ('query($q: String) { a: cryptoNews(first: 100, search: $q) { edges { node { id } } } '
             'b: cryptoNews(first: 100, search: $q, tickers: ["BTC"]) { edges { node { id } } } '
             's: assetSentiment(ticker: "ZZZQ") { buckets { start } } }')
    r = gql(server, query, {"q": "refused before it runs"})
    assert r.status_code == 400 and "X-CU-Cost" not in r.headers, r.text
    assert "'ZZZQ'" in r.json()["errors"][0]["message"], r.text
    assert (cache.hits, cache.misses) == before  # no page was read or computed for the news fields


def test_a_known_but_quiet_ticker_still_gets_its_empty_series(server: ApiServer) -> None:
    # DOGE: dated articles, none in the range; ADA: named by an undated article only (which is never counted).
    for ticker, since, until in (("DOGE", "2024-06-01", "2024-06-30"), ("ADA", None, None)):
        r = gql(server, SENTIMENT, {"t": ticker, "since": since, "until": until})
        assert r.status_code == 200 and "errors" not in r.json(), r.text
        assert r.json()["data"]["assetSentiment"]["buckets"] == [] and int(r.headers["X-CU-Cost"]) > 1


# --------------------------------------------------------------------------------------------- 3: range advice


def _suggested(message: str, flag: str, interval_flag: str) -> list[tuple[str, str]]:
    """(interval, since) pairs a message suggests, the first one for the interval asked (``""``)."""
    found = [("", m) for m in re.findall(rf"pass {flag} (\S+) or later", message)]
    found += re.findall(rf"{interval_flag} (\w+) with {flag} (\S+) or later", message)
    return found


@pytest.mark.parametrize("interval,since,until", [
    ("HOUR", "2018-01-01", None),  # none fits: neither DAY nor WEEK covers 2018 to 2024-12-10
    ("DAY", "2010-01-01", "2024-12-01"),  # WEEK does not fit either
    ("WEEK", "2010-01-01", None),
])
def test_the_advice_for_a_range_too_wide_works(server: ApiServer, interval: str, since: str,
                                               until: str | None) -> None:
    variables = {"t": "BTC", "i": interval, "since": since, "until": until}
    r = gql(server, SENTIMENT, variables)
    assert r.status_code == 400, r.text
    message = r.json()["errors"][0]["message"]
    assert "fits this range" not in message, message
    suggested = _suggested(message, "`since`", "interval")
    assert suggested and suggested[0][0] == "" and len(suggested) == 3 - ["HOUR", "DAY", "WEEK"].index(interval)
    for other, earliest in suggested:
        ok(server, SENTIMENT, {**variables, "i": other or interval, "since": earliest})


def test_the_advice_names_a_coarser_interval_only_when_it_fits(server: ApiServer) -> None:
    variables = {"t": "BTC", "i": "DAY", "since": "2022-06-01", "until": "2024-12-10"}  # 924 days, 132 weeks
    r = gql(server, SENTIMENT, variables)
    assert r.status_code == 400, r.text
    message = r.json()["errors"][0]["message"]
    assert "interval WEEK fits this range, or pass `since` 2022-12-10 or later" in message, message
    ok(server, SENTIMENT, {**variables, "i": "WEEK"})
    ok(server, SENTIMENT, {**variables, "since": "2022-12-10"})


def test_plot_gives_the_same_advice(cli_home: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "c.png")
    code, text = plot("--ticker", "BTC", "--out", out, "--since", "2018-01-01", "--interval", "hour")
    assert code == 1 and "interval HOUR returns at most 744 buckets" in text, text
    suggested = _suggested(text, "--since", "--interval")
    assert [i for i, _ in suggested] == ["", "day", "week"], text
    for other, earliest in suggested:
        code, done = plot("--ticker", "BTC", "--out", out, "--since", earliest, "--interval", other or "hour")
        assert code == 0, done


# --------------------------------------------------------------------------------------------- 4: plot arguments


@pytest.mark.parametrize("args,what", [
    (["--ticker", "BTC$"], "must be a symbol such as BTC"),
    (["--ticker", "BTC; DROP"], "must be a symbol such as BTC"),
    (["--ticker", "BTC", "--interval", "month"], "choose hour, day or week"),
    (["--ticker", "BTC", "--since", "yesterday"], "is not a date or timestamp of the form"),
    (["--ticker", "BTC", "--until", "2024-13-01"], "is not a date or timestamp of the form"),
])
def test_plot_refuses_bad_arguments_as_usage_errors(cli_home: Path, tmp_path: Path, args: list[str],
                                                    what: str) -> None:
    code, text = plot(*args, "--out", str(tmp_path / "x.png"))
    assert code == 2 and "Usage: " in text and what in text, text
    assert not (tmp_path / "x.png").exists()


def test_plot_tells_an_unknown_ticker_from_a_quiet_one(cli_home: Path, tmp_path: Path) -> None:
    code, text = plot("--ticker", "NOTACOIN", "--out", str(tmp_path / "x.png"))
    assert code == 1 and "nor does any undated one" in text and "widen" not in text, text
    code, text = plot("--ticker", "DOGE", "--out", str(tmp_path / "x.png"), "--since", "2024-06-01", "--until",
                      "2024-06-30")
    assert code == 1 and "widen --since/--until" in text, text


# --------------------------------------------------------------------------------------------- 5: the x-axis


def test_the_x_axis_spans_the_range_the_title_names(tmp_path: Path) -> None:
    """Buckets only in the last third of the range: their bars start two thirds across the chart, not at its
    left edge (where the first bucket with data used to be)."""
    from PIL import Image

    from pipeline.commands.plot import render_sentiment_chart

    start = datetime(2024, 10, 1)
    buckets = [{"start": f"{d:%Y-%m-%d}T00:00:00.000Z", "end": f"{d + timedelta(days=1):%Y-%m-%d}T00:00:00.000Z",
                "articles": 2, "positive": 2, "neutral": 0, "negative": 0, "scored": 2, "meanScore": 0.5}
               for d in (start + timedelta(days=k) for k in range(20, 30))]
    series = {"ticker": "BTC", "interval": "DAY", "since": "2024-10-01T00:00:00.000Z",
              "until": "2024-10-31T00:00:00.000Z", "buckets": buckets}
    out = tmp_path / "c.png"
    render_sentiment_chart(series, out)
    with Image.open(out) as img:
        rgb = img.convert("RGB")
        # The positive bars (#009e73), in rows below the legend (upper left) and above the tick labels.
        green = [x for x in range(rgb.width) for y in range(int(rgb.height * 0.75), int(rgb.height * 0.85), 4)
                 if rgb.getpixel((x, y)) == (0, 158, 115)]
    assert green, "no bars drawn"
    assert min(green) > rgb.width * 0.55, (min(green), rgb.width)
