"""Reading sentiment and trending after an analyst's review (/work/review/s43-sentiment, REPORT.md):

1. A renamed asset: news is tagged with the symbol of its day (MATIC before 2024-09-04, POL since), and a
   ticker's buckets stay that ticker's. A range reaching across the rename says what to ask instead (the answer's
   notes, `cryptowire plot sentiment` on stderr), from the snapshot's `assets` table, copied at publish from the
   warehouse's `crypto_assets` (the registry); a snapshot without that table answers as before.
2. Trending counts no time before the snapshot's oldest dated article as zero mentions: the baseline is the
   windows the data covers (`baselineWindows`, `baselineStart`), noted when short, and nothing is ranked below a
   day of hours or two days.
3. The chart's mean-score line breaks where buckets are missing.
4. Errors: a data home that does not exist says so (and CRYPTOWIRE_HOME); a name (`bitcoin`) is answered with its
   symbol.

Real warehouses and snapshots (DuckDB files: single files and sets), the API on a real server."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from api.access import StaticKeys
from api.app import create_app
from api.gql_documents import DocumentCache
from api.gql_exec import Context, Outcome, coerce_variables, execute_plan, plan_operation
from models.tagging import load_registry
from pipeline.cli import app as cli
from pipeline.enrich import load_crypto_assets
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, open_reader, publish, write
from tests.test_sentiment_trends import KEY, SENTIMENT, TRENDING, gql, ok
from warehouse.config import Settings, get_settings
from warehouse.db import connect
from warehouse.parts import connect_snapshot
from warehouse.published import current_snapshot
from warehouse.sentiment import refresh_asset_sentiment

ANCHOR = datetime(2024, 12, 10, 12, 0)  # the newest dated article of every home here
runner = CliRunner()


def _article(i: int, ticker: str, at: datetime, score: float = 0.5) -> dict[str, Any]:
    return {
        "id": f"c_{i:016x}", "source_name": "Wire", "url": f"https://news.example/c{i}", "title": f"{ticker} {i}",
        "summary": "s", "image_url": None, "published_at": at, "sentiment": "positive" if score > 0 else "negative",
        "sentiment_score": score, "tickers": [ticker], "topics": ["markets"],
    }


def _articles(rows: list[tuple[str, datetime]]) -> list[dict[str, Any]]:
    return [_article(i, t, at, round(0.9 - 0.1 * (i % 15), 2)) for i, (t, at) in enumerate(rows)]


def _build(home: Path, rows: list[tuple[str, datetime]], parts: bool, registry: bool = True) -> Path:
    """A real warehouse with ``rows`` (and the shipped registry in `crypto_assets`, as the pipeline's
    `crypto_assets` asset loads it), published as the pipeline does after `asset_sentiment`."""
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, Data(_articles(rows), []))
        con.execute("COMMIT")
        if registry:
            load_crypto_assets(con, load_registry())
        refresh_asset_sentiment(con)
        return publish(con, home / "snapshots", parts=parts)
    finally:
        con.close()


def _run(snapshot: Path, query: str, variables: dict[str, Any] | None = None) -> Outcome:
    """The API's executor on a real snapshot, with the notes it makes for the response's `extensions.notes`."""
    con, reader = open_reader(snapshot)
    try:
        prepared = DocumentCache().get(query)
        operation = prepared.operation(None)
        coerced = coerce_variables(operation, variables or {}, prepared.fragments)
        return execute_plan(plan_operation(prepared, operation, coerced, variables or {}), Context(reader=reader))
    finally:
        con.close()


@pytest.fixture
def cli_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def use(home: Path) -> None:
        monkeypatch.setenv("CRYPTOWIRE_HOME", str(home))
        get_settings.cache_clear()

    yield use
    get_settings.cache_clear()


def plot(*args: str) -> Any:
    return runner.invoke(cli, ["plot", "sentiment", *args])


# --------------------------------------------------------------------------------------------- renames, names

# MATIC until the rename (2024-09-04), POL after; RENDER (RNDR until 2024-07-15) and FTM (S since 2025-01-13) with
# only one of their symbols in the news; BTC on days with gaps between them.
BTC_DAYS = (1, 2, 3, 7, 8, 10)
RENAME_ROWS = (
    [("MATIC", datetime(2021, 6, d, 9)) for d in (3, 10, 17)]
    + [("MATIC", datetime(2024, 8, 20, 9)), ("MATIC", datetime(2024, 9, 2, 9))]
    + [("POL", datetime(2024, 9, 10, 9)), ("POL", datetime(2024, 10, 1, 9)), ("POL", datetime(2024, 11, 15, 9))]
    + [("RENDER", datetime(2024, 11, 20, 9)), ("FTM", datetime(2024, 11, 21, 9)), ("ETH", ANCHOR)]
    + [("BTC", datetime(2024, 12, d, h)) for d in BTC_DAYS for h in (8, 9)]
)


@pytest.fixture(scope="module", params=[False, True], ids=["single-file", "set"])
def renames(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("renames") / "home"
    _build(home, RENAME_ROWS, parts=request.param)
    return home


@pytest.fixture(scope="module")
def renames_server(renames: Path) -> Iterator[ApiServer]:
    with ApiServer(create_app(Settings(home=renames, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        yield srv


def _snapshot(home: Path) -> Path:
    path = current_snapshot(home / "snapshots")
    assert path is not None
    return path


def test_the_snapshot_carries_the_assets_it_needs(renames: Path) -> None:
    con = connect_snapshot(_snapshot(renames))
    try:
        row = con.execute("SELECT symbol, name, former_symbols, renamed FROM assets WHERE symbol = 'POL'").fetchall()
        count = con.execute("SELECT count(*) FROM assets").fetchall()[0][0]
    finally:
        con.close()
    assert row == [("POL", "Polygon", ["MATIC"], date(2024, 9, 4))]
    assert count == len(load_registry())


def _sentiment(ticker: str, since: str, until: str, interval: str = "DAY") -> tuple[str, dict[str, Any]]:
    return SENTIMENT, {"t": ticker, "i": interval, "since": since, "until": until}


def test_a_ticker_asked_before_its_rename_is_told_its_former_symbol(renames: Path) -> None:
    got = _run(_snapshot(renames), *_sentiment("POL", "2021-06-01", "2021-06-30"))
    assert got.errors == [] and got.data is not None
    assert got.data["assetSentiment"]["buckets"] == []  # the ticker's own series: nothing merged in
    assert got.notes == [{
        "code": "TICKER_RENAMED", "field": "Query.assetSentiment",
        "message": 'POL was MATIC until 2024-09-04: news before then counts under MATIC; '
                   'ask assetSentiment(ticker: "MATIC")',
    }]
    matic = _run(_snapshot(renames), *_sentiment("MATIC", "2021-06-01", "2021-06-30"))
    assert [b["start"][:10] for b in matic.data["assetSentiment"]["buckets"]] == [  # type: ignore[index]
        "2021-06-03", "2021-06-10", "2021-06-17"]
    assert matic.notes == []  # MATIC then was MATIC


def test_a_former_symbol_asked_after_the_rename_is_told_the_new_one(renames: Path) -> None:
    got = _run(_snapshot(renames), *_sentiment("MATIC", "2024-06-03", "2024-12-08", "WEEK"))
    assert [b["articles"] for b in got.data["assetSentiment"]["buckets"]] == [1, 1]  # type: ignore[index]
    assert [n["message"] for n in got.notes] == [
        'MATIC became POL on 2024-09-04: news from then on counts under POL; ask assetSentiment(ticker: "POL")']
    # A range on one side of the rename needs no note; POL's series across it is POL's news alone.
    pol = _run(_snapshot(renames), *_sentiment("POL", "2024-09-04", "2024-12-10"))
    assert pol.notes == []
    assert [b["start"][:10] for b in pol.data["assetSentiment"]["buckets"]] == [  # type: ignore[index]
        "2024-09-10", "2024-10-01", "2024-11-15"]
    across = _run(_snapshot(renames), *_sentiment("POL", "2024-08-01", "2024-12-10"))
    assert [n["code"] for n in across.notes] == ["TICKER_RENAMED"]


def test_a_symbol_the_news_never_uses_names_the_one_it_does(renames_server: ApiServer) -> None:
    # RENDER's news (all after its rename) is RENDER's; FTM's (before Sonic's) is FTM's: asking the other symbol
    # is refused, free, as any ticker no article names, and says which symbol to ask.
    for asked, hint in (("RNDR", 'RNDR became RENDER on 2024-07-15: news from then on counts under RENDER; '
                                 'ask assetSentiment(ticker: "RENDER")'),
                        ("s", 'S was FTM until 2025-01-13: news before then counts under FTM; '
                              'ask assetSentiment(ticker: "FTM")')):
        r = gql(renames_server, SENTIMENT, {"t": asked})
        assert r.status_code == 400 and "X-CU-Cost" not in r.headers, r.text
        assert hint in r.json()["errors"][0]["message"], r.text


def test_a_name_is_answered_with_its_symbol(renames_server: ApiServer) -> None:
    r = gql(renames_server, SENTIMENT, {"t": "bitcoin"})
    assert r.status_code == 400 and "X-CU-Cost" not in r.headers, r.text
    message = r.json()["errors"][0]["message"]
    assert "'BITCOIN' is Bitcoin's name, not its symbol: ask assetSentiment(ticker: \"BTC\")" in message, message
    r = gql(renames_server, SENTIMENT, {"t": "Polygon"})
    assert ('is Polygon\'s name, not its symbol: ask assetSentiment(ticker: "POL") (MATIC for news before '
            "2024-09-04)") in r.json()["errors"][0]["message"], r.text
    # the advice works
    assert ok(renames_server, SENTIMENT, {"t": "BTC"})["assetSentiment"]["ticker"] == "BTC"


def test_the_response_carries_the_notes(renames_server: ApiServer, short: dict[str, Any]) -> None:
    r = gql(renames_server, *_sentiment("POL", "2021-06-01", "2021-06-30"))
    assert r.status_code == 200 and r.json()["data"]["assetSentiment"]["buckets"] == [], r.text
    assert r.json()["extensions"]["notes"] == [{
        "code": "TICKER_RENAMED", "field": "Query.assetSentiment",
        "message": 'POL was MATIC until 2024-09-04: news before then counts under MATIC; '
                   'ask assetSentiment(ticker: "MATIC")',
    }]
    assert "extensions" not in gql(renames_server, *_sentiment("POL", "2024-09-05", "2024-12-10")).json()
    notes = gql(short["one"], TRENDING, {"w": "DAY"}).json()["extensions"]["notes"]
    assert [n["code"] for n in notes] == ["SHORT_BASELINE"] * 2, notes


def test_a_snapshot_without_the_assets_table_answers_as_before(renames: Path, tmp_path: Path) -> None:
    """As one published by an older cryptowire (or before the warehouse had its registry)."""
    if _snapshot(renames).suffix != ".duckdb":
        pytest.skip("a single file's table is dropped; a set of an older cryptowire's has no `assets` view")
    older = tmp_path / _snapshot(renames).name
    shutil.copy(_snapshot(renames), older)
    con = duckdb.connect(str(older))
    try:
        con.execute("DROP TABLE assets")
    finally:
        con.close()
    got = _run(older, *_sentiment("POL", "2021-06-01", "2021-06-30"))
    assert got.errors == [] and got.data["assetSentiment"]["buckets"] == [] and got.notes == []  # type: ignore[index]
    refused = _run(older, SENTIMENT, {"t": "bitcoin"})
    assert refused.bad_input and "check the symbol" in refused.errors[0]["message"], refused.errors


def test_plot_prints_the_rename_hint(renames: Path, cli_home: Any, tmp_path: Path) -> None:
    cli_home(renames)
    hint = ("note: POL was MATIC until 2024-09-04: news before then counts under MATIC; plot it with "
            "`--ticker MATIC`")
    done = plot("--ticker", "POL", "--out", str(tmp_path / "p.png"), "--since", "2024-08-01", "--until", "2024-12-10")
    assert done.exit_code == 0 and hint in done.stderr and "wrote" in done.stdout, done.output
    empty = plot("--ticker", "POL", "--out", str(tmp_path / "q.png"), "--since", "2021-06-01", "--until", "2021-06-30")
    assert empty.exit_code == 1 and hint in empty.stderr and "no dated article mentions POL from" in empty.stderr
    named = plot("--ticker", "bitcoin", "--out", str(tmp_path / "b.png"))
    assert named.exit_code == 1 and "plot it with `--ticker BTC`" in named.stderr, named.output
    after = plot("--ticker", "POL", "--out", str(tmp_path / "r.png"), "--since", "2024-09-05", "--until", "2024-12-10")
    assert after.exit_code == 0 and "note:" not in after.stderr, after.output


# --------------------------------------------------------------------------------------------- the chart


def test_the_score_line_breaks_where_buckets_are_missing(renames: Path) -> None:
    import matplotlib.pyplot as plt

    from pipeline.commands.plot import sentiment_figure
    from warehouse.cursors import parse_instant
    from warehouse.trends import SentimentRequest, sentiment_series

    con = connect_snapshot(_snapshot(renames))
    try:
        series = sentiment_series(con, SentimentRequest("BTC", "DAY", parse_instant("2024-12-01"),
                                                        parse_instant("2024-12-10")))
    finally:
        con.close()
    means = [b["meanScore"] for b in series["buckets"]]
    assert [int(b["start"][8:10]) for b in series["buckets"]] == list(BTC_DAYS) and None not in means
    fig = sentiment_figure(series)
    try:
        (line,) = [x for x in fig.axes[0].get_lines() if x.get_marker() == "o"]
        ys = [float(y) for y in line.get_ydata()]
    finally:
        plt.close(fig)
    runs: list[list[float]] = [[]]
    for y in ys:
        if math.isnan(y):
            runs.append([])
        else:
            runs[-1].append(y)
    # days 1-3 joined, then 7-8, then 10 alone: no line across 4-6 nor across 9
    assert [len(r) for r in runs] == [3, 2, 1], ys
    assert [y for r in runs for y in r] == pytest.approx(means)


# --------------------------------------------------------------------------------------------- errors


def test_plot_on_a_data_home_that_does_not_exist(cli_home: Any, tmp_path: Path) -> None:
    cli_home(tmp_path / "nohome")
    done = plot("--ticker", "BTC", "--out", str(tmp_path / "x.png"))
    assert done.exit_code == 1, done.output
    assert f"the data home {tmp_path / 'nohome'} does not exist: check CRYPTOWIRE_HOME" in done.stderr, done.output
    assert "doctor" not in done.stderr and not (tmp_path / "nohome").exists()


# --------------------------------------------------------------------------------------------- trending

# One day of news (the review's `oneday` home): nothing has a baseline yet.
ONE_DAY = [("BTC", ANCHOR - timedelta(hours=h)) for h in (0, 1, 2, 3, 4)] + [
    ("ETH", ANCHOR - timedelta(hours=h)) for h in (6, 10, 20)]
# Four days: the baseline holds 3 whole days (the 4th began before the oldest article, DOGE's, and is left out).
# ETH: 2 a day in the baseline, 5 in the latest day: mean 2, std 0, z 3 (over 7 windows, mean 6/7: z 4.14).
# SOL: 4 in the latest day (and hour), none before: z 4.
FOUR_DAYS = ([("DOGE", ANCHOR - timedelta(days=4, hours=1))] * 3
             + [("ETH", ANCHOR - timedelta(days=k, hours=2)) for k in (1, 2, 3) for _ in range(2)]
             + [("ETH", ANCHOR - timedelta(minutes=m)) for m in (5, 10, 15, 20, 25)]
             + [("SOL", ANCHOR - timedelta(minutes=m)) for m in (0, 2, 4, 6)])


@pytest.fixture(scope="module", params=[False, True], ids=["single-file", "set"])
def short(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("short")
    homes = {"one": root / "one", "four": root / "four", "backlog": root / "backlog"}
    _build(homes["one"], ONE_DAY, parts=request.param, registry=False)
    _build(homes["four"], FOUR_DAYS, parts=request.param, registry=False)
    # A new home's first fetch often brings a backlog item of weeks ago: the empty days between are no history.
    _build(homes["backlog"], [*ONE_DAY, ("ETH", ANCHOR - timedelta(days=40))], parts=request.param, registry=False)
    with ApiServer(create_app(Settings(home=homes["one"], pdf_prewarm=False), access=StaticKeys([KEY]))) as one, \
            ApiServer(create_app(Settings(home=homes["four"], pdf_prewarm=False), access=StaticKeys([KEY]))) as four, \
            ApiServer(create_app(Settings(home=homes["backlog"], pdf_prewarm=False),
                                 access=StaticKeys([KEY]))) as backlog:
        yield {"one": one, "four": four, "backlog": backlog, "homes": homes}


def test_one_day_of_news_ranks_nothing(short: dict[str, Any]) -> None:
    for window, home in (("DAY", "one"), ("HOUR", "one"), ("DAY", "backlog"), ("HOUR", "backlog")):
        got = ok(short[home], TRENDING, {"w": window})
        tickers, topics = got["trendingTickers"], got["trendingTopics"]
        assert tickers["items"] == [] and topics["items"] == [], got  # BTC was ranked with zScore 5.0
        assert tickers["windowEnd"] == "2024-12-10T12:00:00.000Z"
    day = ok(short["one"], TRENDING, {"w": "DAY"})["trendingTickers"]
    assert day["baselineWindows"] == 0 and day["baselineStart"] == day["windowStart"], day
    hour = ok(short["one"], TRENDING, {"w": "HOUR"})["trendingTickers"]
    assert hour["baselineWindows"] == 19 and hour["baselineStart"] == "2024-12-09T16:00:00.000Z", hour  # < 24
    got = _run(_snapshot(short["homes"]["one"]), TRENDING, {"w": "DAY"})
    assert [(n["code"], n["field"]) for n in got.notes] == [("SHORT_BASELINE", "Query.trendingTickers"),
                                                          ("SHORT_BASELINE", "Query.trendingTopics")]
    assert ("the snapshot's dated news runs without a day's gap from 2024-12-09T16:00:00.000Z: the baseline has 0 of its 7 days of "
            "data, and trending needs at least 2: nothing is ranked") in got.notes[0]["message"]


def test_the_baseline_is_the_days_the_data_covers(short: dict[str, Any]) -> None:
    got = ok(short["four"], TRENDING, {"w": "DAY"})["trendingTickers"]
    assert (got["baselineWindows"], got["baselineStart"]) == (3, "2024-12-06T12:00:00.000Z"), got
    assert got["items"] == [
        {"name": "SOL", "count": 4, "baselineMean": 0.0, "baselineStd": 0.0, "ratio": None, "zScore": 4.0},
        {"name": "ETH", "count": 5, "baselineMean": 2.0, "baselineStd": 0.0, "ratio": 2.5, "zScore": 3.0},
    ]
    hour = ok(short["four"], TRENDING, {"w": "HOUR"})["trendingTickers"]
    assert hour["baselineWindows"] == 96 and [i["name"] for i in hour["items"]] == ["ETH", "SOL"], hour
    notes = _run(_snapshot(short["homes"]["four"]), TRENDING, {"w": "DAY"}).notes
    assert [n["field"] for n in notes] == ["Query.trendingTickers", "Query.trendingTopics"]
    assert "the baseline has 3 of its 7 days of data (from `baselineStart`)" in notes[0]["message"], notes
