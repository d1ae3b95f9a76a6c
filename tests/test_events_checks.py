"""The wording-independent checks on derived events (issue: events that hold on unseen news), on invented
headlines of each failure class, and withdrawal of published events the rules no longer derive."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from api.access import StaticKeys
from api.app import create_app
from pipeline.events import ArticleIn, derive_events
from pipeline.events.reference import REFERENCE_PATH, AssetFacts, Reference, default_reference
from pipeline.prices import fetch_prices
from tests.support.apiserver import ApiServer
from tests.support.httpserver import LocalServer, Reply, static
from warehouse.config import Settings
from warehouse.db import connect
from warehouse.events import WITHDRAWN_DEFAULT, merge_events, run_checks
from warehouse.prices import load_prices, store_prices
from warehouse.publish import publish_snapshot

NAMES = {
    "BTC": "Bitcoin", "ETH": "Ethereum", "SOL": "Solana", "ADA": "Cardano", "DOT": "Polkadot", "AVAX": "Avalanche",
    "POL": "Polygon", "XRP": "XRP", "SUI": "Sui", "ZZZ": "Zedcoin",
}
PUBLISHED = datetime(2026, 10, 7, 9, 30)


def article(title: str, summary: str = "", tickers: tuple[str, ...] | None = None, aid: str = "a1",
            published: datetime = PUBLISHED) -> ArticleIn:
    if tickers is None:
        text = f"{title} {summary}".lower()
        tickers = tuple(t for t, n in NAMES.items() if n.lower() in text or t.lower() in text.split())
    return ArticleIn(aid, title, summary, f"https://news.example/{aid}", None, "Test Wire", published, tickers, ())


def derive(title: str, summary: str = "", reference: Reference | None = None, **kw) -> tuple[list[str], dict[str, str]]:
    refused: dict[str, str] = {}
    events = derive_events([article(title, summary, **kw)], NAMES, reference=reference, refused=refused)
    return [e.event_title for e in events], refused


# Class 1: a count, holding, market cap or raise read as a price (invented headlines).
COUNTS = [
    "Listed Miner's Bitcoin Treasury Set to Pass 80,000 by Spring",
    "Staking Firm Eyes 4 Million ETH in Holdings by Year-End",
    "Solana Treasury Company Could Reach 12 Million SOL Next Year",
    "Cardano Market Cap Could Hit $40 Billion by December",
    "Ethereum Could Top 7 Million Before the Merge Anniversary",
    "Avalanche Foundation Targets $250 Million Raise by Q1",
    "Polkadot Could See 2,000,000 Validators Nominate by Year-End",
]
# Class 2: a deadline for something else read as the question's date, and a long-live mainnet "launching".
DEADLINES = [
    "Polygon Sidechain to Shut Down; Users Must Withdraw to Ethereum Mainnet Before Nov. 14",
    "Zedcoin Bridge Sunset: Move Funds Back to the Ethereum Mainnet by December 2",
    "Cardano Airdrop Claims Close December 5 as Mainnet Migration Ends",
    "Solana Mainnet Goes Live on December 1",
    "Bitcoin Mainnet Launch Scheduled for Q1 2027",
]
# Class 3: the headline's verb taken into the name.
VERB_NAMES = [
    "Polkadot Gets Upgrade Warning: Validators Must Act by October 20",
    "Avalanche Receives Hard Fork Notice Ahead of Q4",
    "Sui Sees Upgrade Scheduled for November 3",
    "Cardano Announces Upgrade Set for December 10",
]
# Second round, worded afresh (review of 2026-11-27): counts with no currency sign beyond a price's band,
# coins counted after the number, verbs and particles named as upgrades, deadlines in another clause, an asset's
# own network "launching".
COUNTS_2 = [
    "Ethereum Staking Queue Could Swell to 40,000 Next Month",
    "Solana Validator Count Eyes 3,000 by Year-End",
    "Bitcoin Lightning Nodes Could Fall Below 15,000 in December",
    "Ethereum Treasury Firm Could Reach 60,000 by Year-End",
    "Bitcoin Whale Wallets Could Climb to 3 Million in 2027",
    "Saylor's Firm Eyes 800,000 BTC by Year-End",
    "Court-Appointed Trustee Sells 12 BTC for a Total of $1.3M Before Christmas",
]
VERB_NAMES_2 = [
    "Cardano Rounds Up Hard Fork for December 11",
    "Polkadot Steps Up Upgrade Push for December 14",
    "Avalanche Grabs Upgrade Slot on December 8",
    "Solana Clears Upgrade Review on December 6",
    "Sui Wraps Upgrade Tests, Mainnet Switch on December 12",
]
DEADLINES_2 = [
    "Binance to List Zedcoin (ZZZ) — Customers Must Verify Accounts by October 30",
    "Avalanche Fee Upgrade Coming; Stake AVAX Before October 25 to Earn Rewards",
    "Polkadot's Ember Hard Fork Confirmed: Validators Should Rotate Keys Before October 22",
    "Ethereum Could Hit $6,000 as Holders Rush to Swap Old Tokens Before October 20",
    "Cardano to Roll Out Cardano Network on December 2",
    "Polkadot to Debut Polkadot Chain by November 5",
]
# Third round (a blind tester's headlines of 2026-11-27, reworded): units after a number, a vote's own close,
# a spaced hyphen between clauses, hyphenated verbs, base-form verbs and generic words as names.
TRAPS_3 = [
    "Ethereum Eyes 10,000 TPS by Year-End After the Gas Limit Rise",
    "Cardano Voltaire Upgrade Poll Closes December 9; No Activation Date Yet",
    "Cardano Fast-Tracks Upgrade: Launch Tipped for December 8",
    "Avalanche Readies Launch of Next-Gen Upgrade on December 11",
    "Solana Gears Up for Amendment Launch December 8",
]
CONTROLS_2 = [
    ("Solana Wins Upgrade Vote, Firedancer Activation Set for December 14",
     "Will the Solana Firedancer upgrade go live on mainnet by December 14, 2026?"),
    ("Avalanche's Octane Upgrade: Mainnet Activation Set for November 20",
     "Will the Avalanche Octane upgrade go live on mainnet by November 20, 2026?"),
    ("Cardano Rewards v2 Upgrade to Go Live on November 12",
     "Will the Cardano Rewards v2 upgrade go live on mainnet by November 12, 2026?"),
    ("Bitcoin Could Hit $150,000 by December 15 as ETF Inflows Grow",
     "Will Bitcoin close above $150,000 on December 15, 2026?"),
    ("Ethereum Eyes $6,000 by November 20; Analysts Point to Rising Fees",
     "Will Ethereum close above $6,000 on November 20, 2026?"),
    ("Ethereum Could Hit $6,000 - Staking Queue Clears by March 3, 2027",
     "Will Ethereum close above $6,000 on October 31, 2026?"),
]


@pytest.mark.parametrize("title", TRAPS_3)
def test_units_a_votes_close_and_generic_or_verb_names_give_nothing(title: str) -> None:
    events, refused = derive(title)
    assert events == [], (title, refused)


@pytest.mark.parametrize("title", COUNTS_2)
def test_a_number_without_a_currency_far_from_the_price_is_a_count(title: str) -> None:
    events, _ = derive(title)
    assert events == [], title


@pytest.mark.parametrize("title", VERB_NAMES_2)
def test_a_headline_verb_or_its_particle_is_never_a_name(title: str) -> None:
    events, _ = derive(title)
    assert events == [], title


@pytest.mark.parametrize("title", DEADLINES_2)
def test_a_date_in_another_clause_or_the_assets_own_network_gives_nothing(title: str) -> None:
    events, refused = derive(title)
    assert not any(day in e for e in events for day in ("October 2", "October 30", "December 2,", "November 5")), (
        events, refused)


@pytest.mark.parametrize(("title", "question"), CONTROLS_2)
def test_names_and_dates_the_new_checks_leave_alone(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


def test_a_price_question_reads_the_close_of_the_day_an_exact_time_names() -> None:
    events, _ = derive("Bitcoin Could Hit $150,000 by 16:00 UTC on December 31")
    assert events == ["Will Bitcoin close above $150,000 on December 31, 2026?"]


def test_a_local_time_is_read_in_its_zone_and_asked_in_utc() -> None:
    (question,), refused = derive("Cardano's Node 12 Hard Fork Set for November 18 at 11:30 p.m. PT")
    assert question == "Will the Cardano Node 12 hard fork go live on mainnet by 07:30 UTC on November 19, 2026?"
    (question,), _ = derive("Ethereum's Fusaka Upgrade Set for December 3 at 9:00 a.m. ET")
    assert question == "Will the Ethereum Fusaka upgrade go live on mainnet by 14:00 UTC on December 3, 2026?"



# Left by the blind tester of 2026-11-27 (invented headlines): a level settled the day it is asked, often a count
# in the price band; a long-live asset's own chain "launching"; a local time after "tomorrow" or a weekday.
SETTLED = [
    "Ethereum Could Slide Below 12,000 This Month",
    "Solana Could Drop Below 1,500 by Year-End",
    "Bitcoin Could Close Above $25,000 by Year-End, Bulls Say",
]
# Prices of the articles' time, as the `asset_reference_prices` asset fetches them online (the shipped table's
# newest are of July 2025, too old to tell what is settled in October 2026).
CURRENT = default_reference().with_prices([("ETH", date(2026, 10, 1), 2500.0), ("SOL", date(2026, 10, 1), 150.0),
                                           ("BTC", date(2026, 10, 1), 107000.0)])


@pytest.mark.parametrize("title", SETTLED)
def test_a_level_settled_the_day_it_is_asked_is_no_question(title: str) -> None:
    events, refused = derive(title, reference=CURRENT)
    assert events == [], title
    assert any("all but certain" in why for why in refused.values()), refused


def test_the_settled_check_reads_the_prices_around_the_day_and_skips_days_before_the_table() -> None:
    # XRP went from $0.47 (2024-07-01) to $2.10 (2025-01-01): below $2 in late December was a live question.
    events, refused = derive("XRP Drops Toward $2 as Traders Take Profit", published=datetime(2024, 12, 30, 9))
    assert events == ["Will XRP close below $2 on January 31, 2025?"], refused
    # The table starts in 2024: it says nothing of a 2023 price, so nothing is refused for it.
    events, refused = derive("Solana Rockets Toward $25 After a Strong Week", published=datetime(2023, 10, 2, 10))
    assert events == ["Will Solana close above $25 on October 31, 2023?"], refused


@pytest.mark.parametrize("title", ["Avalanche C-Chain Launch Set for December 3",
                                   "Avalanche X-Chain Launch Set for December 3"])
def test_a_long_live_assets_own_chain_does_not_launch(title: str) -> None:
    events, refused = derive(title)
    assert events == [], (title, refused)
    assert any("is already live" in why for why in refused.values()), refused


def test_tomorrow_or_a_weekday_with_a_local_time_counts_from_that_zones_date() -> None:
    # 02:00 UTC on Thursday October 8 is 22:00 on Wednesday October 7 in New York.
    late = datetime(2026, 10, 8, 2, 0)
    (question,), _ = derive("Cardano Node 12 Hard Fork Goes Live Tomorrow at 4 PM ET", published=late)
    assert question == "Will the Cardano Node 12 hard fork go live on mainnet by 20:00 UTC on October 8, 2026?"
    (question,), _ = derive("Ethereum Fusaka Upgrade Activates on Friday at 9 p.m. PT", published=late)
    assert question == "Will the Ethereum Fusaka upgrade go live on mainnet by 04:00 UTC on October 10, 2026?"


def test_hours_date_a_launch_not_a_daily_close() -> None:
    (question,), _ = derive("Ethereum Fusaka Upgrade to Activate Within 48 Hours")
    assert question == "Will the Ethereum Fusaka upgrade go live on mainnet by October 9, 2026?"
    (question,), _ = derive("Exchange XRP Futures Launch in 24 Hours, Will It Send XRP to $4?")
    assert question == "Will XRP close above $4 on October 31, 2026?"
    events, _ = derive("Bitcoin Could Hit $150,000 Within 48 Hours, Trader Says")  # not the month's end
    assert events == []


# Controls: the same shapes, legitimately settle-able; the checks must leave them alone.
CONTROLS = [
    ("Bitcoin Could Hit $150,000 by Year-End, Analyst Says", "Will Bitcoin close above $150,000 on December 31, 2026?"),
    ("Ethereum Eyes $6,000 as Treasury Buying Picks Up", "Will Ethereum close above $6,000 on October 31, 2026?"),
    ("Solana Slides Toward $120 Support", "Will Solana close below $120 on October 31, 2026?"),
    ("Ethereum's Fusaka Upgrade Set for December 3", "Will the Ethereum Fusaka upgrade go live on mainnet by December 3, 2026?"),
    ("Cardano's Node 12 Hard Fork Scheduled for November 18",
     "Will the Cardano Node 12 hard fork go live on mainnet by November 18, 2026?"),
]


@pytest.mark.parametrize("title", COUNTS)
def test_a_count_is_never_a_price(title: str) -> None:
    events, _ = derive(title)
    assert events == [], title


@pytest.mark.parametrize("title", DEADLINES)
def test_a_deadline_for_something_else_or_a_live_mainnet_gives_nothing(title: str) -> None:
    events, _ = derive(title)
    assert events == [], title


@pytest.mark.parametrize("title", VERB_NAMES)
def test_a_headline_verb_is_never_a_name(title: str) -> None:
    events, _ = derive(title)
    assert events == [], title


@pytest.mark.parametrize(("title", "question"), CONTROLS)
def test_legitimate_questions_still_pass_the_checks(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


def test_the_band_refuses_a_level_only_the_reference_table_can_tell_apart() -> None:
    # No wording gives it away: only the reference price says $7,000,000 is not an ether price.
    title = "Ethereum Could Top $7,000,000 by Year-End"
    events, refused = derive(title)
    assert events == []
    (reason,) = refused.values()
    assert "$7,000,000 is not a plausible ETH price on 2026-10-07" in reason and "between" in reason
    loose = Reference({"ETH": AssetFacts("ETH", date(2015, 8, 7), [(date(2026, 1, 1), 3_000_000.0)])})
    events, _ = derive(title, reference=loose)
    assert events == ["Will Ethereum close above $7,000,000 on December 31, 2026?"]


def test_an_asset_without_a_reference_price_needs_a_currency_sign() -> None:
    bare, refused = derive("Zedcoin Could Hit 40K by Year-End")
    assert bare == [] and "has no currency" in next(iter(refused.values()))
    priced, _ = derive("Zedcoin Could Hit $40 by Year-End")
    assert priced == ["Will Zedcoin close above $40 on December 31, 2026?"]


def test_a_young_chain_may_launch_its_mainnet_but_not_an_unknown_or_old_one() -> None:
    young = Reference({"ZZZ": AssetFacts("ZZZ", PUBLISHED.date() - timedelta(days=90))})
    events, _ = derive("Zedcoin Mainnet Set to Launch on December 9", reference=young)
    assert events == ["Will the Zedcoin mainnet launch by December 9, 2026?"]
    events, refused = derive("Zedcoin Mainnet Set to Launch on December 9", reference=Reference({}))
    assert events == [] and "no trading start date" in next(iter(refused.values()))
    events, refused = derive("Cardano Mainnet Set to Launch on December 9")
    assert events == [] and "has traded since 2017-10-01" in next(iter(refused.values()))


def test_the_shipped_reference_table_loads_and_bands_by_date() -> None:
    ref = default_reference()
    assert len(ref) >= 150 and "BTC" in ref
    assert ref.price_at("BTC", date(2024, 3, 1)) == 42000  # the latest point on or before
    assert ref.price_at("BTC", date(2020, 1, 1)) == 42000  # before the table: its earliest point
    lo, hi = ref.band("ETH", datetime(2025, 8, 1))  # type: ignore[misc]
    assert lo == pytest.approx(500) and hi == pytest.approx(25000)
    assert ref.band("MON", datetime(2026, 1, 1)) is None  # a start date but no price
    assert ref.coingecko_ids()["BTC"] == "bitcoin"


def test_a_bad_reference_row_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "ref.csv"
    bad.write_text("ticker,field,date,value\nBTC,price_usd,2024-13-01,1\n")
    with pytest.raises(ValueError, match=r"ref.csv:2: bad reference row"):
        Reference.load(bad)
    assert REFERENCE_PATH.exists()


# --- withdrawal ------------------------------------------------------------------------------------------------

OLD_RULES = Reference({"ETH": AssetFacts("ETH", date(2015, 8, 7), [(date(2026, 1, 1), 3_000_000.0)])})


def test_events_the_rules_no_longer_derive_are_withdrawn_with_the_reason_and_keep_their_id(tmp_path: Path) -> None:
    absurd = article("Ethereum Could Top $7,000,000 by Year-End", tickers=("ETH",), aid="a1")
    fine = article("Bitcoin Could Hit $150,000 by Year-End", tickers=("BTC",), aid="a2")
    con = connect(tmp_path / "w.duckdb")
    now = datetime(2026, 10, 8, 12, 0)
    old = derive_events([absurd, fine], NAMES, reference=OLD_RULES)
    assert len(old) == 2
    merge_events(con, old, now, complete=True)
    before = dict(con.execute("SELECT id, created_at FROM prediction_events").fetchall())
    absurd_id = next(e.id for e in old if e.asset == "ETH")

    refused: dict[str, str] = {}
    new = derive_events([absurd, fine], NAMES, refused=refused)  # the shipped table: the ETH level is refused
    report = merge_events(con, new, now + timedelta(hours=1), complete=True, refused=refused)
    assert (report.withdrawn, report.restored, report.events) == (1, 0, 2)
    rows = {r[0]: r[1:] for r in con.execute(
        "SELECT id, status, withdrawn_reason, created_at FROM prediction_events").fetchall()}
    assert rows[absurd_id][0] == "withdrawn" and "not a plausible ETH price" in rows[absurd_id][1]
    assert {i: r[2] for i, r in rows.items()} == before  # ids and created_at unchanged
    checks = run_checks(con)
    assert checks["withdrawn_has_reason"] == checks["resolvable"] == checks["created_at_unique"] == 0, checks

    # An event that disappears without a check refusing it gets the general reason.
    merge_events(con, [], now + timedelta(hours=2), complete=True)
    reasons = dict(con.execute("SELECT id, withdrawn_reason FROM prediction_events").fetchall())
    assert set(reasons) == set(before) and reasons[absurd_id].startswith("$7,000,000")
    assert [r for i, r in reasons.items() if i != absurd_id] == [WITHDRAWN_DEFAULT]

    # Derived again (say the rules change back): listed as before, under the same id.
    again = merge_events(con, old, now + timedelta(hours=3), complete=True)
    assert again.restored == 2 and again.withdrawn == 0
    assert {r[0] for r in con.execute("SELECT DISTINCT status FROM prediction_events").fetchall()} == {"open"}

    # A partial merge (not every article read) withdraws nothing.
    partial = merge_events(con, old[:1], now + timedelta(hours=4))
    assert partial.withdrawn == 0
    con.close()


def _raw(con, a: ArticleIn, fetched: datetime) -> None:  # type: ignore[no-untyped-def]
    """Store ``a`` in raw_articles as ingest does (a second call with other text is the publisher's edit)."""
    import polars as pl

    from warehouse.raw import ARTICLE_SCHEMA, merge_articles

    row = {"id": a.id, "source_name": a.source_name, "feed_url": "https://news.example/feed", "url": a.url,
           "guid": a.url, "title": a.title, "summary": a.summary, "content_html": "", "authors": [], "categories": [],
           "image_url": None, "published_at": a.published_at, "date_inferred": False, "fetched_at": fetched,
           "updated_at": fetched, "language": "en", "content_hash": str(hash((a.title, a.summary)))}
    merge_articles(con, pl.DataFrame([row], schema=ARTICLE_SCHEMA))


def test_an_event_stands_when_its_source_comes_to_report_the_outcome_or_its_market_has_closed(tmp_path: Path) -> None:
    """From a market operator's review: a publisher updating "Kraken to list TON by ..." into "Kraken lists TON,
    trading now live" withdrew the event exactly when it resolved Yes, and closed events were withdrawn too."""
    con = connect(tmp_path / "w.duckdb")
    now = datetime(2026, 10, 7, 12, 0)
    asks = article("Solana Could Top $220 by November 30", aid="a1")
    corrected = article("Cardano Node 12 Hard Fork Set for December 3", aid="a2")
    soon = article("Polkadot Could Hit $9 by Friday", aid="a3", published=datetime(2026, 10, 7, 9))
    plain = article("Bitcoin Could Hit $150,000 by Year-End", aid="a4")
    for a in (asks, corrected, soon, plain):
        _raw(con, a, now)
    events = derive_events([asks, corrected, soon, plain], NAMES)
    assert len(events) == 4
    merge_events(con, events, now, complete=True)
    ids = {e.source_article_id: e.id for e in events}

    # Days on: a1 now reports the move, a2 is corrected to another day, a3's Friday has passed.
    later = now + timedelta(days=3)
    reports = article("Solana Tops $220 as Memecoin Volumes Jump", aid="a1")
    moved = article("Cardano Node 12 Hard Fork Moved to December 10", aid="a2")
    for a in (reports, moved):
        _raw(con, a, later)
    refused: dict[str, str] = {}
    report = merge_events(con, derive_events([reports, moved, soon, plain], NAMES, refused=refused), later,
                          complete=True, refused=refused)
    status = dict(con.execute("SELECT id, status FROM prediction_events").fetchall())
    assert status[ids["a1"]] == "open"  # the question asked stands until it resolves
    assert status[ids["a2"]] == "withdrawn"  # replaced by the corrected day's question
    assert status[ids["a3"]] == "closed"
    assert (report.withdrawn, report.stands) == (1, 1)

    # A run in which every event not derived stands withdraws nothing (and does not fail on it).
    again = merge_events(con, derive_events([reports, moved, soon, plain], NAMES), later + timedelta(minutes=1),
                         complete=True)
    assert (again.withdrawn, again.stands) == (0, 1)
    # An edit after which the event was derived again (a fix to the body) does not make it stand later.
    _raw(con, replace(plain, summary="Corrected: the analyst is at a London desk."), later + timedelta(minutes=2))
    merge_events(con, derive_events([reports, moved, soon, plain], NAMES), later + timedelta(minutes=3), complete=True)
    # The rules changing (nothing derives a4 any more) withdraws that open event; closed stays closed.
    merge_events(con, [], later + timedelta(hours=1), complete=True)
    status = dict(con.execute("SELECT id, status FROM prediction_events").fetchall())
    assert (status[ids["a4"]], status[ids["a1"]], status[ids["a3"]]) == ("withdrawn", "open", "closed")
    con.close()


def test_the_api_lists_withdrawn_events_and_says_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    con = connect(home / "warehouse.duckdb")
    absurd = article("Ethereum Could Top $7,000,000 by Year-End", tickers=("ETH",), aid="a1")
    fine = article("Bitcoin Could Hit $150,000 by Year-End", tickers=("BTC",), aid="a2")
    now = datetime(2026, 10, 8, 12, 0)
    merge_events(con, derive_events([absurd, fine], NAMES, reference=OLD_RULES), now, complete=True)
    refused: dict[str, str] = {}
    merge_events(con, derive_events([absurd, fine], NAMES, refused=refused), now, complete=True, refused=refused)
    publish_snapshot(con, home / "snapshots")
    con.close()
    query = """query($s: EventStatus) { predictionEvents(first: 10, status: $s) {
        edges { node { id asset status withdrawnReason } } } }"""
    with ApiServer(create_app(Settings(home=home), access=StaticKeys(["k"]))) as srv:
        def nodes(status: str | None) -> list[dict]:
            r = httpx.post(srv.url("/crypto-news/k"), json={"query": query, "variables": {"s": status}}, timeout=30)
            assert r.status_code == 200, r.text
            return [e["node"] for e in r.json()["data"]["predictionEvents"]["edges"]]

        listed = nodes(None)
        assert {(n["asset"], n["status"]) for n in listed} == {("ETH", "WITHDRAWN"), ("BTC", "OPEN")}
        eth = next(n for n in listed if n["asset"] == "ETH")
        assert "not a plausible ETH price" in eth["withdrawnReason"]
        assert [n["asset"] for n in nodes("WITHDRAWN")] == ["ETH"]
        assert [n["asset"] for n in nodes("OPEN")] == ["BTC"]
        assert nodes("CLOSED") == []


# --- reference prices from a price API --------------------------------------------------------------------------


def test_prices_are_fetched_from_a_coingecko_compatible_api_and_stored(tmp_path: Path) -> None:
    body = json.dumps({"bitcoin": {"usd": 91234.5}, "ethereum": {"usd": 3012}, "junk": {"usd": 1}, "solana": {}})
    with LocalServer() as srv:
        srv.routes["/api/v3/simple/price"] = static(body, "application/json")
        got = fetch_prices(srv.url("/api/v3"), {"BTC": "bitcoin", "ETH": "ethereum", "SOL": "solana"},
                           date(2026, 11, 25))
        assert got.error is None
        assert sorted(got.prices) == [("BTC", date(2026, 11, 25), 91234.5), ("ETH", date(2026, 11, 25), 3012.0)]
        assert "ids=bitcoin%2Cethereum%2Csolana" in srv.seen[0].path
        srv.routes["/api/v3/simple/price"] = lambda req: Reply(429, b'{"status":"rate limited"}')
        limited = fetch_prices(srv.url("/api/v3"), {"BTC": "bitcoin"}, date(2026, 11, 25))
        assert limited.prices == [] and "answered 429" in (limited.error or "")
    con = connect(tmp_path / "w.duckdb")
    assert store_prices(con, got.prices, "test", datetime(2026, 11, 25, 6)) == 2
    # a later fetch the same day keeps the day's first price (what the day's articles were judged by); a new day adds
    assert store_prices(con, [("BTC", date(2026, 11, 25), 95000.0)], "test", datetime(2026, 11, 25, 12)) == 0
    assert store_prices(con, [("BTC", date(2026, 11, 26), 97000.0)], "test", datetime(2026, 11, 26, 0)) == 1
    stored = load_prices(con)
    assert ("BTC", date(2026, 11, 25), 91234.5) in stored and len(stored) == 3
    ref = default_reference().with_prices(stored)
    assert ref.price_at("BTC", date(2026, 11, 25)) == 91234.5 and ref.price_at("BTC", date(2026, 11, 27)) == 97000.0
    con.close()


def test_offline_the_fetch_says_why_and_returns_nothing() -> None:
    with LocalServer() as srv:
        url = srv.url("/api/v3")
    got = fetch_prices(url, {"BTC": "bitcoin"}, date(2026, 11, 25), timeout=2)  # the server is gone
    assert got.prices == [] and got.error and "could not read" in got.error


def test_the_reference_prices_asset_materializes_from_a_local_price_server(
    data_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app
    from warehouse.config import get_settings

    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    with LocalServer() as srv:
        srv.routes["/api/v3/simple/price"] = static(json.dumps({"bitcoin": {"usd": 88000}}), "application/json")
        monkeypatch.setenv("CRYPTOWIRE_PRICE_SOURCE_URL", srv.url("/api/v3"))
        get_settings.cache_clear()
        result = CliRunner().invoke(app, ["materialize", "--select", "asset_reference_prices", "--json"])
        assert result.exit_code == 0, result.output
        assert srv.hits("/api/v3/simple/price") == 1
        # a second refresh the same day: the price is fetched (not an offline run), the day's first one stays
        srv.routes["/api/v3/simple/price"] = static(json.dumps({"bitcoin": {"usd": 99000}}), "application/json")
        again = CliRunner().invoke(app, ["materialize", "--select", "asset_reference_prices", "--json"])
        assert again.exit_code == 0, again.output
    report = json.loads(result.output)
    (asset,) = report["assets"]
    assert asset["metadata"]["fetched"] == 1 and asset["metadata"]["stored"] == 1 and asset["metadata"]["error"] == ""
    (second,) = json.loads(again.output)["assets"]
    assert (second["metadata"]["fetched"], second["metadata"]["stored"], second["metadata"]["error"]) == (1, 0, "")
    con = connect(data_home / "warehouse.duckdb")
    assert [(t, usd) for t, _, usd in load_prices(con)] == [("BTC", 88000.0)]
    con.close()


def test_the_asset_asks_an_apps_upgrade_of_an_article_the_tagger_gave_no_ticker(
        data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # "Aave v4" names the app, not the token, so the tagger gives no ticker; the derivation asks it of AAVE. The
    # asset read only articles with tickers, so what the evaluation scored was never published.
    from typer.testing import CliRunner

    from pipeline.cli import app as cli
    from warehouse.config import get_settings

    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    monkeypatch.setenv("CRYPTOWIRE_PRICE_SOURCE_URL", "")
    published = datetime.now(UTC).replace(tzinfo=None, microsecond=0) - timedelta(hours=2)
    launch = published + timedelta(days=20)
    title = f"Aave v4 Mainnet Launch Set for {launch:%B} {launch.day}"
    con = connect(get_settings().warehouse_path)
    con.execute(
        "INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, published_at,"
        " fetched_at, content_hash, tickers, topics, tagged_at) VALUES ('aave1', 'Wire', 'http://wire.example/f',"
        " 'http://wire.example/aave', ?, '', [], [], ?, ?, 'h', [], [], ?)", [title, published, published, published])
    con.close()
    result = CliRunner().invoke(cli, ["materialize", "--select", "prediction_events", "--json"])
    assert result.exit_code == 0, result.output
    con = connect(get_settings().warehouse_path, read_only=True)
    rows = con.execute("SELECT asset, kind, event_title FROM prediction_events").fetchall()
    con.close()
    assert rows == [("AAVE", "upgrade_or_launch",
                     f"Will Aave's v4 launch on mainnet by {launch:%B} {launch.day}, {launch.year}?")], rows


@pytest.mark.parametrize("title", ["Ethereum Bears Target $2,800 as Momentum Fades",
                                   "Cardano Price Analysis: Bearish Setup Aims for $0.45"])
def test_a_target_the_bears_set_is_a_downside_one(title: str) -> None:
    (question,), _ = derive(title)
    assert " close below " in question, question


def test_a_level_asked_soon_takes_the_near_horizon_not_a_years_range_in_the_headline() -> None:
    (question,), _ = derive("Solana (SOL) Price Prediction 2026-2032: Will SOL Hit $400 Soon?")
    assert question == "Will Solana close above $400 on October 31, 2026?"


def test_a_date_after_but_belongs_to_the_contrasting_clause() -> None:
    (question,), _ = derive("Solana ETFs Could Drive SOL to $400, but Approval Could Take Until 2028")
    assert question == "Will Solana close above $400 on October 31, 2026?"


# From the operator's review: "by year-end" in an article of Thu 31 Dec 2025 20:00 -0500 became December 31, 2026,
# and "tomorrow" from an outlet at +09:00 was read from the UTC day. The feed's offset is kept (published_offset).
def test_relative_dates_count_from_the_publishers_calendar_when_the_feed_gives_its_offset() -> None:
    new_years_eve = article("Ethereum Could Reach $5,000 by Year-End", published=datetime(2026, 1, 1, 1, 0))
    assert [e.event_title for e in derive_events([new_years_eve], NAMES)] == [
        "Will Ethereum close above $5,000 on December 31, 2026?"]  # the UTC calendar: a year off
    assert derive_events([replace(new_years_eve, published_offset=-300)], NAMES) == []  # its December 31: passed
    seoul = replace(article("Coinbase Will List Cardano (ADA) Tomorrow", published=datetime(2026, 11, 26, 22, 30)),
                    published_offset=540)  # Friday 07:30 in Seoul
    (event,) = derive_events([seoul], NAMES)
    assert event.event_title == "Will Coinbase list Cardano (ADA) for trading by November 28, 2026?"


def test_the_asset_reads_each_articles_offset(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app as cli
    from warehouse.config import get_settings

    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    monkeypatch.setenv("CRYPTOWIRE_PRICE_SOURCE_URL", "")
    day = datetime.now(UTC).replace(tzinfo=None, hour=20, minute=0, second=0, microsecond=0) - timedelta(days=2)
    con = connect(get_settings().warehouse_path)
    con.execute(
        "INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, published_at,"
        " published_offset, fetched_at, content_hash, tickers, topics, tagged_at) VALUES ('seoul1', 'Wire',"
        " 'http://wire.example/f', 'http://wire.example/ada', 'Coinbase Will List Cardano (ADA) Tomorrow', '', [], [],"
        " ?, 540, ?, 'h', ['ADA'], [], ?)", [day, day, day])
    con.close()
    result = CliRunner().invoke(cli, ["materialize", "--select", "prediction_events", "--json"])
    assert result.exit_code == 0, result.output
    con = connect(get_settings().warehouse_path, read_only=True)
    (date_,) = con.execute("SELECT date FROM prediction_events").fetchall()[0]
    con.close()
    assert date_ == day + timedelta(days=2, hours=-20)  # 05:00 the next day in Seoul: its tomorrow


@pytest.mark.parametrize(("title", "issuer"), [
    ("SEC Delays Decision on Northgate Capital's Spot Solana ETF to December 15", "Northgate Capital's spot"),
    ("SEC Delays Decision On Acme Asset Management's Solana ETF to December 15", "Acme Asset Management's"),
    ("SEC Delays Decision on Northgate's Spot Solana ETF to December 15", "Northgate's spot"),
])
def test_an_issuers_whole_name_is_kept(title: str, issuer: str) -> None:
    (question,), _ = derive(title)  # "Capital's spot Solana ETF" named no issuer
    assert question == f"Will the SEC approve {issuer} Solana ETF by December 15, 2026?"


# A level 60-100x the reference price is a question only when the words tie it to the price (readers list meme
# targets such as "$0.001 SHIB price"); an amount of money that far out stays a count (invented headlines).
@pytest.mark.parametrize("title", ["Bitcoin Whale Moves $8 Million as Price Eyes New Highs",
                                   "Bitcoin Miner Could See $9 Million Payday by Year-End",
                                   "Ethereum Staker Could Earn $200,000 by Year-End",
                                   "Cardano Developer Grant Could Reach $50 by Year-End"])
def test_an_amount_far_out_not_tied_to_the_price_is_no_question(title: str) -> None:
    events, refused = derive(title)
    assert events == [], (title, refused)


@pytest.mark.parametrize(("title", "question"), [
    ("Pundit Sees $45 ADA Price by Year-End", "Will Cardano close above $45 on December 31, 2026?"),
    ("Ethereum Price Could Rocket to $200,000, Says Analyst", "Will Ethereum close above $200,000 on October 31, 2026?"),
    ("Solana Could Hit the $12,000 Mark by Year-End, Analysts Say",
     "Will Solana close above $12,000 on December 31, 2026?"),
])
def test_a_far_forecast_tied_to_the_price_is_asked(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


# From a review of the day's own changes: phrasings the new rules had broken (each gave the old, right answer).
@pytest.mark.parametrize(("title", "question"), [
    ("Cardano Could Hit $2 by Next Year's End", "Will Cardano close above $2 on December 31, 2027?"),
    ("XRP Could Reach $3, but Not Until Q2 2027", "Will XRP close above $3 on June 30, 2027?"),
    ("Bitcoin Could Hit $200,000, but Only by 2028", "Will Bitcoin close above $200,000 on December 31, 2028?"),
    ("Coinbase Will List Cardano by the End of the Day on Friday",
     "Will Coinbase list Cardano (ADA) for trading by October 9, 2026?"),
    ("Bears Trapped: Ethereum Bulls Aim for $5,000", "Will Ethereum close above $5,000 on October 31, 2026?"),
    # "soon" no longer overrides a later date, but a date behind "Analyst Says" is the analyst's
    ("Polkadot Could Hit $9 Soon, Analyst Says by December", "Will Polkadot close above $9 on October 31, 2026?"),
    ("Polkadot Could Hit $9 Soon and by December", "Will Polkadot close above $9 on December 31, 2026?"),
])
def test_the_days_new_rules_leave_these_as_they_were(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


def test_a_settled_level_is_judged_only_on_a_price_of_its_time() -> None:
    # The table's ENA price of July 2025 ($0.28) says nothing of November 2026: no refusal without a newer one.
    title = "Ethena (ENA) Could Drop Below $0.85 Support This Month"
    names = {**NAMES, "ENA": "Ethena"}
    late = article(title, tickers=("ENA",), published=datetime(2026, 11, 20, 9))
    assert [e.event_title for e in derive_events([late], names)] == ["Will Ethena close below $0.85 on November 30, 2026?"]
    fresh = default_reference().with_prices([("ENA", date(2026, 11, 1), 0.15)])
    assert derive_events([late], names, reference=fresh) == []  # $0.85 over a $0.15 price is settled


# A blind tester's third round (2026-11-27 afternoon; only docs/events.md read): 256 invented traps gave 94
# questions, 47 absurd and 19 misdated. These are other invented headlines of each class it found.
CALLED_OFF = [
    "Bitstamp Cancels Plan to List Cardano on December 6",
    "OKX Rules Out Listing Dogecoin Futures Rival on December 2",
    "Avalanche Octane Upgrade Won't Ship by December 10 After All",
    "Why Cardano Isn't Going to $5 by Year-End",
    "Solana Already Hit the $250 Target Analysts Set for December",
    "SEC No Longer Expected to Rule on Spot Dogecoin ETF by December 18",
]
COUNT_SUBJECTS = [
    "Ethereum Validator Exits Could Climb to 3,000 Next Month",
    "Bitcoin Lightning Nodes Eye 15,000 by December",
    "Cardano Governance Proposals Could Top 400 by Year-End",  # below the band too, but a count either way
    "Solana Developer Bounties Could Hit $200 Per Bug This Month",
    "Bitcoin Mining Cost Could Climb to $95,000 Next Year",
]
NOT_NAMES = [
    "Tezos Long-Awaited Upgrade Lands December 9",
    "Cardano Critical Upgrade Expected by December 4",
    "Polygon Foundation to Launch Survey of Validators Next Week",
    "Avalanche Community to Launch Hackathon on December 5",
]
NOT_THE_ASSET_LISTED = [
    "Kraken to List Tokenized Tesla Shares on Ethereum Next Week",
    "Gemini to List Solana Layer-2 Token on December 5",
    "Coinbase to List Cardano Pairs Against EUR on December 2",
]
MEETINGS = [
    "Polkadot's Elastic Upgrade Gets Core Dev Review on December 11",
    "Cardano Leios Hard Fork to Be Discussed at December 3 Community Call",
    "Cardano Vote on Plomin 3 Hard Fork Ends December 4; Activation Set for December 20",  # the vote's date
]


@pytest.mark.parametrize("title", CALLED_OFF + COUNT_SUBJECTS + NOT_NAMES + NOT_THE_ASSET_LISTED + MEETINGS)
def test_the_blind_testers_third_round_classes_give_no_question(title: str) -> None:
    events, refused = derive(title)
    assert events == [], (title, refused)


@pytest.mark.parametrize("title", [
    "Ethereum Could Hit $5,000 Ahead of Fed Decision on December 16",
    "Cardano Could Rally to $1.50, Analyst Says in December 8 Interview",
    "XRP Could Reach $4 Once Ripple Files Its Report on December 28",
    "Solana Eyes $300 With Conference Tickets on Sale Until December 6",
])
def test_a_date_behind_another_events_words_is_not_the_levels(title: str) -> None:
    (question,), _ = derive(title)
    assert question.endswith("on October 31, 2026?"), question  # the default: the article gives the level no date


@pytest.mark.parametrize(("title", "question"), [
    ("IOG Postpones Cardano Chang Hard Fork to December 20",
     "Will the Cardano Chang hard fork go live on mainnet by December 20, 2026?"),
    ("Bitcoin Could Hit $150,000 by Year-End, Analyst Says", "Will Bitcoin close above $150,000 on December 31, 2026?"),
    ("Coinbase Will List Cardano (ADA) on December 4", "Will Coinbase list Cardano (ADA) for trading by December 4, 2026?"),
])
def test_the_third_rounds_rules_leave_these_alone(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


# A fourth blind round put the traps in the summary (s44: 321 invented articles). These are other invented ones.
LINKED_ARTICLES = [
    ("Polkadot Treasury Funds Three Developer Teams",
     "The treasury approved grants for tooling this week. Read more: Can Polkadot Climb to $25 by 2026?"),
    ("Solana Validators Adopt a Second Client",
     "Adoption passed 20% of stake. You might also like: Solana Could Hit $400 by December"),
    ("Avalanche Subnet Activity Climbs",
     "Subnet transactions rose 30% in October. [Related] - Will Avalanche Reach $90 by Year-End?"),
    ("Cardano Community Hosts Governance Summit",
     "Speakers covered treasury rules. Editor's Pick: Cardano Price Prediction 2026-2030: Can ADA Reach $10?"),
]


@pytest.mark.parametrize(("title", "summary"), LINKED_ARTICLES)
def test_a_linked_articles_headline_in_the_summary_is_not_this_articles_question(title: str, summary: str) -> None:
    events, refused = derive(title, summary)
    assert events == [], (title, refused)


def test_a_summarys_own_sentence_still_gives_its_question() -> None:
    events, refused = derive("Solana Breakpoint Wrap-Up",
                             "Related upgrades aside, Solana could climb to $300 by December, analysts said.")
    assert events == ["Will Solana close above $300 on December 31, 2026?"], refused


@pytest.mark.parametrize("title", [
    "Bitcoin's Realized Price Could Rise to $60,000 by March",
    "The Cost to Produce One Bitcoin Could Climb to $110,000 Next Year",
    "Ethereum's Realized Price Could Fall Below $1,800 by December",
    "Few Traders Expect Cardano to Reach $3 This Year",
    "Analysts Don't See Polkadot Hitting $20 by December",
    "Market Remains Skeptical Solana Can Top $400 by Year-End",
])
def test_measures_priced_in_dollars_and_doubted_levels_are_no_question(title: str) -> None:
    events, refused = derive(title)
    assert events == [], (title, refused)


@pytest.mark.parametrize(("title", "question"), [
    ("No Doubt Solana Will Top $400 by Year-End, Says Fund Manager",
     "Will Solana close above $400 on December 31, 2026?"),
    ("A Few Analysts Expect Cardano to Reach $3 by December", "Will Cardano close above $3 on December 31, 2026?"),
])
def test_sure_levels_and_floors_held_are_asked_the_right_way(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


def test_a_generic_headline_noun_is_no_name_and_the_summary_names_the_upgrade() -> None:
    events, refused = derive("Avalanche to Activate Upgrade", "Avalanche will activate the Octane upgrade on December 11.")
    assert events and all("Octane" in e for e in events), (events, refused)
    events, refused = derive("Polygon Product Launch", "Polygon plans to launch AggLayer v2 on mainnet on December 15.")
    assert events and all("Product" not in e and "AggLayer" in e for e in events), (events, refused)


def test_a_time_with_p_m_and_its_zone_in_a_summary_keeps_the_time() -> None:
    events, refused = derive("Avalanche Octane Upgrade Date Set",
                             "The Octane upgrade activates on mainnet on December 11 at 3:15 p.m. ET, the foundation said.")
    assert events == ["Will the Avalanche Octane upgrade go live on mainnet by 20:15 UTC on December 11, 2026?"], refused


@pytest.mark.parametrize(("title", "question"), [
    ("SEC Must Rule on Franklin Cardano ETF by December 18", "Will the SEC approve a Cardano ETF by December 18, 2026?"),
    ("SEC Verdict on Canary Polkadot ETF Is Due November 30", "Will the SEC approve a Polkadot ETF by November 30, 2026?"),
    ("SEC Has Until January 9 to Decide on 21Shares Solana ETF",
     "Will the SEC approve 21Shares' Solana ETF by January 9, 2027?"),
])
def test_more_wordings_of_a_pending_sec_decision(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


# A fifth blind round read feed summaries by genre (s44: 255 invented articles). Other invented ones of its classes.
@pytest.mark.parametrize(("title", "summary", "ticker", "published"), [
    ("Arbitrum Orbit Chain Proof Launches Mainnet Jan. 12", "", "ARB", datetime(2024, 1, 3, 10)),
    ("Berachain Lending Protocol Dolomite to Launch Mainnet on March 25",
     "Dolomite, a lending market on Berachain, said its mainnet goes live on March 25.", "BERA", datetime(2025, 3, 7, 10)),
])
def test_another_projects_mainnet_is_not_the_host_chains(title: str, summary: str, ticker: str,
                                                          published: datetime) -> None:
    """The host's token young enough for its own mainnet to be news, a project on it launching is not that."""
    refused: dict[str, str] = {}
    a = ArticleIn("a1", title, summary, "https://news.example/a1", None, "Test Wire", published, (ticker,), ())
    events = derive_events([a], {"ARB": "Arbitrum", "BERA": "Berachain"}, refused=refused)
    assert events == [], ([e.event_title for e in events], refused)


@pytest.mark.parametrize("title", [
    "Polkadot Could Reach $100 by the End of the Decade",
    "Solana Could Hit $600 Within Two Years, Fund Says",
    "Cardano Could Climb to $5 by Summer",
    "Will Solana Reach $300 This Week? It Already Did",
    "While Polkadot Holders Dream of $50, Traders Eye the Exit",
])
def test_horizons_not_read_answered_questions_and_dreams_give_no_question(title: str) -> None:
    events, refused = derive(title)
    assert events == [], (title, refused)


@pytest.mark.parametrize(("title", "question"), [
    ("Cardano Fell on Tuesday; Bulls Now Target $1.20", "Will Cardano close above $1.20 on October 31, 2026?"),
    ("Solana to $400? Bank Cuts Its Target to $250", "Will Solana close above $250 on October 31, 2026?"),
    ("Solana Eyes $400 This Cycle", "Will Solana close above $400 on October 31, 2026?"),  # readers' default date
    ("Cardano Next Target $1.50 per Analysts", "Will Cardano close above $1.50 on October 31, 2026?"),  # a source
])
def test_a_past_weekday_and_a_revised_target_are_read_as_meant(title: str, question: str) -> None:
    events, refused = derive(title)
    assert events == [question], refused


# The diff review of the session and a sixth blind round (wrong questions rather than absurd ones).
@pytest.mark.parametrize(("title", "summary"), [
    ("Cardano Upgrade Goes Live", "The Plomin upgrade went live on Cardano mainnet on Sunday, developers said."),
    ("Analysts Dismiss $1 Million Bitcoin Calls", ""),
])
def test_a_launch_reported_on_a_past_weekday_and_a_dismissed_level_give_no_question(title: str, summary: str) -> None:
    events, refused = derive(title, summary)
    assert events == [], (title, refused)


@pytest.mark.parametrize(("title", "summary", "question"), [
    ("Solana Slides; Traders Eye $120-$125 as Next Support", "", "Will Solana close below $120 on October 31, 2026?"),
    ("Polkadot Token Unlock Ahead", "12 million DOT tokens will be unlocked on October 20, data shows.",
     "Will the scheduled unlock of Polkadot (DOT) tokens take place by October 20, 2026?"),
    # what the first versions of this session's checks wrongly refused or misdated (kept as they were before)
    ("Solana Weekly", "Trending: Solana could hit $300 by December, analysts said.",
     "Will Solana close above $300 on December 31, 2026?"),
    ("Solana Eyes $250 as Firedancer Eventually Ships to Validators", "",
     "Will Solana close above $250 on October 31, 2026?"),
    ("Solana Could Hit $300 by December 31", "Solana could repeat what Ethereum already did in 2021.",
     "Will Solana close above $300 on December 31, 2026?"),
    ("Bitcoin Could Briefly Hit $130,000 on Friday", "", "Will Bitcoin close above $130,000 on October 9, 2026?"),
    ("Cardano Could Tap $1.50 This Month", "", "Will Cardano close above $1.50 on October 31, 2026?"),
])
def test_support_ranges_passive_unlocks_and_what_the_new_checks_leave_alone(title: str, summary: str,
                                                                            question: str) -> None:
    events, refused = derive(title, summary)
    assert events == [question], refused


def test_a_fund_due_to_begin_trading_is_no_pending_decision() -> None:
    events, refused = derive("SEC Approves Spot Solana ETF; Fund Is Due to Begin Trading October 28")
    assert events == [], refused
