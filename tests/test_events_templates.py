"""The event templates on real-looking headlines: what is derived, what is not, and how questions read."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from pipeline.events import ArticleIn, EventCandidate, derive_events
from pipeline.events.ids import ID_RE

NAMES = {
    "BTC": "Bitcoin", "ETH": "Ethereum", "SOL": "Solana", "XRP": "XRP", "ADA": "Cardano", "DOGE": "Dogecoin",
    "AVAX": "Avalanche", "LINK": "Chainlink", "DOT": "Polkadot", "TON": "Toncoin", "SUI": "Sui", "AAVE": "Aave",
    "OP": "Optimism", "KAS": "Kaspa", "HYPE": "Hyperliquid", "BNB": "BNB", "PEPE": "Pepe", "LTC": "Litecoin",
    "SHIB": "Shiba Inu", "POL": "Polygon", "USDT": "Tether USD", "USDC": "USD Coin", "BCH": "Bitcoin Cash",
    "MON": "Monad", "APT": "Aptos",
}
WEDNESDAY = datetime(2026, 3, 4, 14, 30)


def derive(title: str, summary: str = "", tickers: tuple[str, ...] | None = None,
           published: datetime = WEDNESDAY, topics: tuple[str, ...] = ()) -> EventCandidate | None:
    if tickers is None:  # the tickers a tagger would give: every known name or symbol in the text
        text = f"{title} {summary}"
        tickers = tuple(t for t, n in NAMES.items() if re.search(rf"\b({re.escape(t)}|{re.escape(n)})\b", text, re.I))
        tickers += ("ETH",) if re.search(r"\bEther\b", text) else ()
    article = ArticleIn("a1", title, summary, "https://news.example/a1", None, "Test Wire", published, tickers, topics)
    events = derive_events([article], NAMES)
    assert len(events) <= 1
    return events[0] if events else None


# (headline, summary, kind, asset, comparator, threshold, date, title)
POSITIVE = [
    ("Bitcoin Eyes $100K as Midterm Results Lift Risk Appetite", "",
     "price_threshold", "BTC", "above", 100_000, datetime(2026, 3, 31),
     "Will Bitcoin close above $100,000 on March 31, 2026?"),
    ("Analysts: ETH Could Hit $5,000 by Year-End if ETF Inflows Persist", "",
     "price_threshold", "ETH", "above", 5_000, datetime(2026, 12, 31),
     "Will Ethereum close above $5,000 on December 31, 2026?"),
    ("SOL Slides Toward $150 Support as Memecoin Volumes Fade", "",
     "price_threshold", "SOL", "below", 150, datetime(2026, 3, 31),
     "Will Solana close below $150 on March 31, 2026?"),
    ("Bitcoin Could Drop to $80,000 Before Christmas, Analyst Warns", "",
     "price_threshold", "BTC", "below", 80_000, datetime(2026, 12, 25),
     "Will Bitcoin close below $80,000 on December 25, 2026?"),
    ("Dogecoin Price Forecast: DOGE Bulls Target $0.30 by the End of March", "",
     "price_threshold", "DOGE", "above", 0.30, datetime(2026, 3, 31),
     "Will Dogecoin close above $0.30 on March 31, 2026?"),
    ("Cardano Price Prediction: Can ADA Reach $1 by the End of April?", "",
     "price_threshold", "ADA", "above", 1, datetime(2026, 4, 30),
     "Will Cardano close above $1 on April 30, 2026?"),
    ("Can Shiba Inu Hit $0.0001 This Year?", "",
     "price_threshold", "SHIB", "above", 0.0001, datetime(2026, 12, 31),
     "Will Shiba Inu close above $0.0001 on December 31, 2026?"),
    ("Solana Price Prediction: SOL Eyes $300 in Q2", "",
     "price_threshold", "SOL", "above", 300, datetime(2026, 6, 30),
     "Will Solana close above $300 on June 30, 2026?"),
    ("Bitcoin to Reach $200,000 by End of 2026, Bernstein Predicts", "",
     "price_threshold", "BTC", "above", 200_000, datetime(2026, 12, 31),
     "Will Bitcoin close above $200,000 on December 31, 2026?"),
    ("Aldridge Capital Sees Bitcoin at $135,000 by Year-End, Citing ETF Demand", "",
     "price_threshold", "BTC", "above", 135_000, datetime(2026, 12, 31),
     "Will Bitcoin close above $135,000 on December 31, 2026?"),
    ("Bitcoin Options Traders Bet on $110K by Year-End Expiry", "",
     "price_threshold", "BTC", "above", 110_000, datetime(2026, 12, 31),
     "Will Bitcoin close above $110,000 on December 31, 2026?"),
    ("Ethereum Price Could Fall 20% to $2,500, JPMorgan Says", "",
     "price_threshold", "ETH", "below", 2_500, datetime(2026, 3, 31),
     "Will Ethereum close below $2,500 on March 31, 2026?"),
    # a neutral verb takes its direction from the price the article reports
    ("LINK Price Could Test $25 by April, Analysts Say", "Chainlink's token broke out. LINK trades at $18.40.",
     "price_threshold", "LINK", "above", 25, datetime(2026, 4, 30),
     "Will Chainlink close above $25 on April 30, 2026?"),
    ("Bitcoin Could Revisit $90,000 Next Week, Veteran Trader Warns", "BTC traded at $96,700.",
     "price_threshold", "BTC", "below", 90_000, datetime(2026, 3, 15),
     "Will Bitcoin close below $90,000 on March 15, 2026?"),
    # the date of the level comes from the summary sentence that repeats it
    ("XRP Price Prediction: Analysts Eye $3 After Reclaiming $2.50",
     "With XRP back above $2.50, chart watchers say a move to $3 is possible before the end of the year.",
     "price_threshold", "XRP", "above", 3, datetime(2026, 12, 31),
     "Will XRP close above $3 on December 31, 2026?"),
    # a date introduced by "ahead of" belongs to something else: the default applies
    ("Avalanche (AVAX) Price Targets $40 Ahead of March 24 Fee Upgrade", "",
     "price_threshold", "AVAX", "above", 40, datetime(2026, 3, 31),
     "Will Avalanche close above $40 on March 31, 2026?"),
    ("Bitcoin new year bear flag sparks $76K BTC price target next", "",
     "price_threshold", "BTC", "below", 76_000, datetime(2026, 3, 31),
     "Will Bitcoin close below $76,000 on March 31, 2026?"),
    # ETF decisions
    ("SEC to Decide on Northgate's Spot Solana ETF by December 15", "",
     "etf_decision", "SOL", None, None, datetime(2026, 12, 15),
     "Will the SEC approve Northgate's spot Solana ETF by December 15, 2026?"),
    ("SEC Delays Decision on Grayscale's XRP ETF to March 15", "",
     "etf_decision", "XRP", None, None, datetime(2026, 3, 15),
     "Will the SEC approve Grayscale's XRP ETF by March 15, 2026?"),
    ("SEC Sets December 22 Final Deadline for Spot Avalanche ETF", "",
     "etf_decision", "AVAX", None, None, datetime(2026, 12, 22),
     "Will the SEC approve a spot Avalanche ETF by December 22, 2026?"),
    ("XRP ETF Decision Looms as SEC Deadline Nears on May 22", "",
     "etf_decision", "XRP", None, None, datetime(2026, 5, 22),
     "Will the SEC approve an XRP ETF by May 22, 2026?"),
    ("Northgate Adds Staking to Solana ETF Proposal; Decision Still Due April 15",
     "The SEC's final deadline to decide on the product remains April 15.",
     "etf_decision", "SOL", None, None, datetime(2026, 4, 15),
     "Will the SEC approve Northgate's Solana ETF by April 15, 2026?"),
    # listings
    ("Binance Will List Hyperliquid (HYPE) for Spot Trading on March 19", "",
     "listing", "HYPE", None, None, datetime(2026, 3, 19),
     "Will Binance list Hyperliquid (HYPE) for trading by March 19, 2026?"),
    ("Coinbase Adds Kaspa (KAS) to Listing Roadmap, Trading Set for March 24", "",
     "listing", "KAS", None, None, datetime(2026, 3, 24),
     "Will Coinbase list Kaspa (KAS) for trading by March 24, 2026?"),
    ("Coinbase to List Toncoin on March 28", "",
     "listing", "TON", None, None, datetime(2026, 3, 28),
     "Will Coinbase list Toncoin (TON) for trading by March 28, 2026?"),
    ("Kraken Will List PEPE Next Week", "",
     "listing", "PEPE", None, None, datetime(2026, 3, 15),
     "Will Kraken list Pepe for trading by March 15, 2026?"),
    # upgrades and launches
    ("Ethereum's Pectra Upgrade Set to Go Live on May 7", "",
     "upgrade_or_launch", "ETH", None, None, datetime(2026, 5, 7),
     "Will the Ethereum Pectra upgrade go live on mainnet by May 7, 2026?"),
    ("Cardano's Node 11 Hard Fork: What Changes on December 10", "",
     "upgrade_or_launch", "ADA", None, None, datetime(2026, 12, 10),
     "Will the Cardano Node 11 hard fork go live on mainnet by December 10, 2026?"),
    ("TON's Sharded Payments Network Mainnet Goes Live in Q1 2027, Foundation Says", "",
     "upgrade_or_launch", "TON", None, None, datetime(2027, 3, 31),
     "Will Toncoin's Sharded Payments Network launch on mainnet by March 31, 2027?"),
    ("Monad Mainnet Set for Launch in Q2 2026", "",
     "upgrade_or_launch", "MON", None, None, datetime(2026, 6, 30),
     "Will the Monad mainnet launch by June 30, 2026?"),
    ("Polkadot Pushes JAM Mainnet Target to Q2 2027", "",
     "upgrade_or_launch", "DOT", None, None, datetime(2027, 6, 30),
     "Will Polkadot's JAM launch on mainnet by June 30, 2027?"),
    ("Aave Governance Approves v4 Mainnet Launch for December 3", "",
     "upgrade_or_launch", "AAVE", None, None, datetime(2026, 12, 3),
     "Will Aave's v4 launch on mainnet by December 3, 2026?"),
    ("Chainlink to Launch Cross-Chain Token Standard v2 Next Week", "",
     "upgrade_or_launch", "LINK", None, None, datetime(2026, 3, 15),
     "Will Chainlink launch Cross-Chain Token Standard v2 by March 15, 2026?"),
    ("Polygon's Rio Hard Fork Scheduled for March 26 at 14:00 UTC", "",
     "upgrade_or_launch", "POL", None, None, datetime(2026, 3, 26, 14, 0),
     "Will the Polygon Rio hard fork go live on mainnet by 14:00 UTC on March 26, 2026?"),
    # the testnet date in the headline is not the event; the summary names the mainnet target
    ("Ethereum Developers Schedule Glamsterdam Testnet Fork for April 4",
     "Core developers agreed to fork the Hoodi testnet on April 4, with the mainnet upgrade targeted for Q3 2026.",
     "upgrade_or_launch", "ETH", None, None, datetime(2026, 9, 30),
     "Will the Ethereum Glamsterdam upgrade go live on mainnet by September 30, 2026?"),
]


@pytest.mark.parametrize(
    ("headline", "summary", "kind", "asset", "comparator", "threshold", "date", "title"),
    POSITIVE,
    ids=[p[0][:50] for p in POSITIVE],
)
def test_template_derives(headline: str, summary: str, kind: str, asset: str, comparator: str | None,
                          threshold: float | None, date: datetime, title: str) -> None:
    event = derive(headline, summary)
    assert event is not None, headline
    assert (event.kind, event.asset, event.comparator, event.date) == (kind, asset, comparator, date)
    assert event.threshold == (None if threshold is None else pytest.approx(threshold))
    assert event.currency == ("USD" if kind == "price_threshold" else None)
    assert event.event_title == title
    assert ID_RE.match(event.id)
    assert event.options == ("Yes", "No")
    assert event.tags[0] == asset
    assert event.date > event.source_published_at
    assert event.resolution_criteria.startswith("Resolves Yes if ") and event.resolution_criteria.endswith(".")
    assert event.resolution_source
    assert 'Test Wire reported on March 4, 2026: "' in event.event_description


NEGATIVE = [
    "Bitcoin Falls to $80,000 as Liquidations Mount",  # a fact, not a forecast
    "Bitcoin Tops $99,600 as Dollar Weakens Ahead of CPI",
    "Bitcoin Breaks $100,000 for the First Time Since January",
    "Bitcoin Slid Toward $60,000 Overnight Before Rebounding",  # past tense
    "Bitcoin's Slide Below $96,000 Tests ETF Buyers' Cost Basis",
    "Weekend Wrap: Bitcoin Holds $98K, Altcoins Cool Off",
    "Toncoin Soars 20% to $7 After Telegram Deal",
    "Crypto majors up: BNB and SOL each added 1% to reach $909 and $143",  # infinitive after a move
    "Dogecoin Fails to Break $0.50 Resistance",
    "Bitcoin ETF Inflows Could Hit $1 Billion This Week",  # not a price level
    "MicroStrategy Eyes $2 Billion Raise to Buy More Bitcoin",
    "Bitcoin Miners Eye $5 Billion in Revenue This Quarter",
    "Ether Treasury Firm Targets $1.5 Billion in ETH Purchases by Year-End",
    "Lucky solo bitcoin miner beats odds to win $285,000 block reward",
    "Ether Slips 3% as Staking Withdrawal Queue Swells, Could Hit the Market Next Week",
    "Bitcoin Heads Toward $100K",  # direction unknown: no verb direction, no level word, no reported price
    "SEC Approves Spot Solana ETF",  # already decided
    "SEC Rejects Spot XRP ETF Filing",
    "Hong Kong SFC to Decide on Solana ETF by April 30",  # not the SEC
    "SEC to Decide on Staking for Grayscale's Solana ETF by April 30",  # a feature of the fund
    "Litecoin ETF Options to Begin Trading on December 1",
    "SEC to Decide on Solana and XRP ETFs by April 30",  # two assets
    "Binance Lists SUI, APT and Aptos Pairs",  # already listed
    "Kraken Adds Spot Trading for SUI and APT in New York Starting December 2",
    "Coinbase to List Sui and Aptos Next Week",  # two assets
    "Robinhood Will Add Solana Futures on March 20",  # derivatives, not a listing
    "Binance Will Delist Three Tokens on March 15",
    "Ethereum's Pectra Upgrade Went Live on March 3",  # done
    "Cardano Hard Fork Goes Live Next Month",  # which fork?
    "Starknet Begins Decentralizing Sequencers, Targeting Full Rollout in Q1 2027",
    "Jump Crypto's Firedancer hits Solana mainnet as the network aims to unlock 1 million TPS",
    "Fogo cancels $20 million pre-sale, will airdrop tokens instead in upcoming mainnet launch",
    "Bitcoin Could Hit $100K on March 2",  # the date already passed
    "Upgrade to Ethereum Set for March 20",  # no name for the upgrade
    "Coinbase to Unveil Prediction Markets Next Week",  # no asset
]


@pytest.mark.parametrize("headline", NEGATIVE)
def test_no_event(headline: str) -> None:
    assert derive(headline) is None


def test_no_ticker_no_event() -> None:
    assert derive("Bitcoin Eyes $100K", tickers=()) is None
    # the text names Bitcoin, but the article was tagged with something else only
    assert derive("Bitcoin Eyes $100K", tickers=("ETH",)) is None


def test_bitcoin_cash_is_not_bitcoin() -> None:
    event = derive("Bitcoin Cash Could Reach $1,000 by Year-End", tickers=("BCH", "BTC"))
    assert event is not None and event.asset == "BCH"
    assert event.event_title == "Will Bitcoin Cash close above $1,000 on December 31, 2026?"
    assert derive("Bitcoin Cash Could Reach $1,000 by Year-End", tickers=("BTC",)) is None


def test_summary_sentence_can_carry_the_question() -> None:
    event = derive("Myriad Moves: What Traders Bet On This Week",
                   "Top markets include whether Bitcoin is headed back to $100K. BTC traded at $91,000 on Monday.")
    assert event is not None
    assert (event.asset, event.comparator, event.threshold) == ("BTC", "above", 100_000)


def test_timezone_aware_publication_is_converted() -> None:
    published = datetime(2026, 3, 31, 23, 30, tzinfo=timezone(timedelta(hours=-5)))  # April 1, 04:30 UTC
    event = derive("Bitcoin Eyes $100K", published=published)
    assert event is not None
    assert event.source_published_at == datetime(2026, 4, 1, 4, 30)
    assert event.date == datetime(2026, 4, 30)
    assert derive("Bitcoin Eyes $100K", published=datetime(2026, 4, 1, 4, 30, tzinfo=UTC)).id == event.id


def test_tags_are_asset_then_topics() -> None:
    event = derive("Bitcoin Eyes $100K", topics=("pricemovement", "priceforecast", "pricemovement"))
    assert event is not None
    assert event.tags == ("BTC", "pricemovement", "priceforecast")


def _article(aid: str, title: str, published: datetime, summary: str = "", tickers: tuple[str, ...] = ("BTC",)):
    return ArticleIn(aid, title, summary, f"https://news.example/{aid}", f"https://img.example/{aid}.jpg",
                     "Test Wire", published, tickers, ())


def test_same_question_from_several_articles_is_one_event() -> None:
    articles = [
        _article("late", "Bitcoin Eyes $100K: Options Market Prices 45% Chance by Month-End", datetime(2026, 3, 10)),
        _article("early", "Bitcoin Eyes $100K as Midterm Results Lift Risk Appetite", datetime(2026, 3, 4)),
        _article("other", "Bitcoin Could Drop to $80,000 by Month-End", datetime(2026, 3, 5)),
        _article("eth", "ETH Could Hit $5,000 by Year-End", datetime(2026, 3, 6), tickers=("ETH",)),
    ]
    events = derive_events(articles, NAMES)
    assert len(events) == 3
    assert len({e.id for e in events}) == len({e.event_title for e in events}) == 3  # no duplicate questions
    btc = next(e for e in events if e.threshold == 100_000)
    assert btc.source_article_id == "early"  # the earliest article is the source
    assert btc.source_url == "https://news.example/early" and btc.image_url == "https://img.example/early.jpg"
    assert btc.source_article_ids == ("early", "late")
    assert [e.source_article_id for e in events] == ["early", "other", "eth"]  # oldest source first


def test_duplicate_questions_never_survive_derivation_of_many_articles() -> None:
    headlines = [p[0] for p in POSITIVE] * 2 + NEGATIVE
    articles = [_article(f"a{i}", h, WEDNESDAY + timedelta(minutes=i), tickers=tuple(NAMES)) for i, h in
                enumerate(headlines)]
    events = derive_events(articles, NAMES)
    assert events
    assert len({e.id for e in events}) == len(events)
    assert len({e.event_title for e in events}) == len(events)
    for e in events:
        assert e.event_title.startswith("Will ") and e.event_title.endswith("?")
        assert len(e.source_article_ids) >= 2 or e.source_article_ids == (e.source_article_id,)


def test_asset_finder_longest_name_symbols_possessives() -> None:
    from pipeline.events.mentions import AssetFinder

    finder = AssetFinder(NAMES)
    text = "Bitcoin Cash beats Bitcoin's week as $SOL, Ether and Shiba Inu's ETH-USDT pair rise; bitcoin-backed loans"
    found = [(text[m.start : m.end], m.ticker) for m in finder.find(text)]
    assert found == [
        ("Bitcoin Cash", "BCH"), ("Bitcoin's", "BTC"), ("$SOL", "SOL"), ("Ether", "ETH"), ("Shiba Inu's", "SHIB"),
        ("ETH", "ETH"), ("USDT", "USDT"),
    ]
    text = "sol and eth are not symbols in lower case, but a name is: bitcoin"
    assert [(text[m.start : m.end], m.ticker) for m in finder.find(text)] == [("bitcoin", "BTC")]
