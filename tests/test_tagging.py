"""Tagging: tickers and topics by rules over the curated registry, measured against the labelled set."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import feedparser
import pytest
from typer.testing import CliRunner

from models.tagging import TOPICS, RegistryError, Tagger, get_tagger, load_companies, load_registry
from models.tagging.evaluate import EVAL_PATH, evaluate, load_examples
from models.tagging.registry import REGISTRY_PATH, parse_registry
from models.tagging.topics import TAXONOMY_PATH, TaxonomyError, parse_taxonomy
from tests.conftest import PROJECT, SHARED_FEEDS
from warehouse.db import connect

SAMPLE_FEEDS = PROJECT / "pipeline" / "sample" / "feeds"

# (headline, the tickers it must get, in order of salience; all in the title, so order = first mention)
TICKER_CASES = [
    # cashtags, pairs, possessives, hyphens, compounds
    ("$LINK rallies 8% after oracle upgrade", ["LINK"]),
    ("$sol flips $190 as memecoin mania returns", ["SOL"]),
    ("BTC/USD tops $100K for the first time since January", ["BTC"]),
    ("ETH-USDT overtakes SOL-USDC as top perpetual market", ["ETH", "SOL"]),
    ("ETH/BTC ratio rebounds from a five-year low", ["ETH", "BTC"]),
    ("BTCUSDT funding flips negative on Binance", ["BTC"]),
    ("Bitcoin's volatility meltdown deepens", ["BTC"]),
    ("Ether-based tokens outperform the market", ["ETH"]),
    ("Spot Bitcoin ETF inflows hit a record", ["BTC"]),
    ("bitcoin miners sell the most coins since April", ["BTC"]),
    ("Bitcoin Cash outperforms with 9% gain", ["BCH"]),
    ("Binance Coin (BNB) hits a record high", ["BNB"]),
    ("USD Coin rebound: USDC back to $1", ["USDC"]),
    # companies and exchanges are not tokens
    ("Ripple sued by former payments partner seeking $120 million", []),
    ("XRP price dips despite Ripple's $500 million share buyback", ["XRP"]),
    ("Coinbase to list new tokens next week", []),
    # an app's name is the app; its token needs a token word, a price move, its symbol or a list of assets
    ("Lido DAO votes to cap its share of staked ether", ["ETH"]),
    ("Aave Labs hires a new chief legal officer", []),
    ("Grant from the Compound treasury funds a wallet audit", []),
    ("Axie Infinity adds a new breeding season", []),
    ("Aave jumps 9% as lenders return", ["AAVE"]),
    ("Uniswap token holders approve the fee switch", ["UNI"]),
    ("Uniswap (UNI) breaks out of a two-month range", ["UNI"]),
    ("Bitcoin, Solana and Aave lead a quiet weekend", ["BTC", "SOL", "AAVE"]),
    ("An Ethereum Story worth telling", ["ETH"]),
    ("Binance delists five low-cap tokens", []),
    ("Tether offers to buy Italian football club Juventus", []),
    ("Tether mints $1 billion USDT on Tron", ["USDT", "TRX"]),
    # renames
    ("MATIC holders can now migrate to the new token", ["POL"]),
    ("Polygon's POL jumps 14% after payments deal", ["POL"]),
    # ambiguous symbols and names: need a cashtag, pair, crypto context or a price word
    ("DOT Sinks 2% After Breaking Key Support", ["DOT"]),
    ("The Dot-Com Lesson: Why Speed Races Miss the Point", []),
    ("Near Record Highs: Ethereum Blob Usage Climbs", ["ETH"]),
    ("Bitcoin Steadies Near $95,000 as Voting Gets Underway", ["BTC"]),
    ("Near Protocol launches an intents layer for cross-chain swaps", ["NEAR"]),
    ("NEAR Intents hit by $3.8 million exploit as crypto's rough year continues", ["NEAR"]),
    ("Natural gas prices push bitcoin miners into flare-gas deals", ["BTC"]),
    ("$GAS surges 40% after an exchange listing", ["GAS"]),
    ("Bitcoin layer-2 projects hit sand in the gears", ["BTC"]),
    ("The Sandbox's SAND token rallies 30%", ["SAND"]),
    ("ONE Token Jumps 25% as Harmony Unveils Bridge Relaunch", ["ONE"]),
    ("Jennifer Garner to star in crypto comedy 'One Attempt Remaining'", []),
    ("Firedancer client now runs on one-third of Solana stake", ["SOL"]),
    ("Bitcoin Core developers debate OP_RETURN limits again", ["BTC"]),
    ("Altcoins bleed as OP and ARB hit yearly lows", ["OP", "ARB"]),
    ("Op-ed: crypto needs better rules", []),
    ("UNI holders approve the fee switch", ["UNI"]),
    ("Uni students learn to code", []),
    ("Cosmos Hub votes to overhaul ATOM tokenomics", ["ATOM"]),
    ("ETF flows turn positive for the week", []),
    ("Flow blockchain upgrade goes live", ["FLOW"]),
    ("Kraken adds SUI and APT trading in New York", ["SUI", "APT"]),
    ("North Korean APT group behind the exchange hack", []),
    ("TON-USD slips as Telegram delays wallet feature", ["TON"]),
    ("Exchanges face a ton of new paperwork", []),
    ("Raspberry Pi computers just got more expensive", []),
    ("Pi Network price crashes 15% ahead of token unlock", ["PI"]),
    ("CRYPTO IS GREEN! ONE THING TO WATCH THIS WEEK", []),
    ("Florida seizes $1.5M in Dogecoin, Pepe and Solana", ["DOGE", "PEPE", "SOL"]),
    ("Six Flags Shareholder Alert: Class Action Lawsuits Against Six Flags - FUN", []),
]


@pytest.mark.parametrize(("headline", "expected"), TICKER_CASES, ids=[c[0][:40] for c in TICKER_CASES])
def test_tickers(headline: str, expected: list[str]) -> None:
    assert get_tagger().tag(headline).symbols == expected


def test_salience_orders_title_mentions_first_then_by_count() -> None:
    tags = get_tagger().tag(
        "ETH and BTC rise as traders return",
        "Bitcoin led the move. BTC options also rose, and bitcoin miners sold. Solana lagged, SOL fell 2%.",
    )
    assert [h.symbol for h in tags.tickers] == ["BTC", "ETH", "SOL"]
    by_symbol = {h.symbol: h for h in tags.tickers}
    assert by_symbol["BTC"].in_title and by_symbol["ETH"].in_title and not by_symbol["SOL"].in_title
    assert by_symbol["BTC"].salience > by_symbol["ETH"].salience > by_symbol["SOL"].salience
    assert all(0.0 < h.salience <= 1.0 for h in tags.tickers)


def test_summary_gives_context_to_an_ambiguous_title_symbol() -> None:
    tagger = get_tagger()
    assert tagger.tag("LINK leads the week").symbols == []
    assert tagger.tag("LINK leads the week", "The oracle token rose on staking news.").symbols == ["LINK"]


def test_topics_multi_label() -> None:
    tags = get_tagger().tag("SEC sues crypto exchange over unregistered tokens as bitcoin plunges 8%")
    assert {"regulation", "lawsuits", "exchanges", "pricemovement"} <= set(tags.topics)
    assert set(tags.topics) <= set(TOPICS)


def test_an_app_name_that_is_not_its_token_still_tells_the_topic() -> None:
    tags = get_tagger().tag("Aave Labs hires a new chief legal officer")
    assert tags.symbols == [] and "defi" in tags.topics
    assert get_tagger().tag("compound interest explained").topics == []


def test_registry_contents() -> None:
    assets = load_registry()
    assert 180 <= len(assets) <= 300
    by_symbol = {a.symbol: a for a in assets}
    assert len(by_symbol) == len(assets)
    assert {"Ether"} <= set(by_symbol["ETH"].aliases)
    assert "Binance Coin" in by_symbol["BNB"].aliases
    assert by_symbol["USDC"].name == "USD Coin" and by_symbol["USDC"].kind == "stablecoin"
    assert by_symbol["POL"].former_symbols == ("MATIC",) and "MATIC" not in by_symbol
    for symbol in ("ONE", "LINK", "GAS", "SAND", "OP", "NEAR", "DOT", "UNI", "ATOM", "FLOW", "SUI", "TON", "APT"):
        assert by_symbol[symbol].ambiguous, symbol
    assert not by_symbol["BTC"].ambiguous
    assert {c.name for c in load_companies()} >= {"Ripple", "Coinbase", "Binance", "Tether", "Circle"}


def test_registry_rows_load_into_the_warehouse_table(tmp_path: Path) -> None:
    con = connect(tmp_path / "w.duckdb")
    rows = [a.row() for a in load_registry()]
    con.executemany(
        "INSERT INTO crypto_assets VALUES ($symbol, $name, $aliases, $kind, $ambiguous, $former_symbols, $since, "
        "$renamed)", rows
    )
    got = con.execute("SELECT aliases, former_symbols, since, renamed FROM crypto_assets WHERE symbol = 'POL'").fetchall()
    assert got == [(["Polygon PoS", "Polygon network", "Polygon Ecosystem Token"], ["MATIC"], date(2019, 4, 26),
                    date(2024, 9, 4))]
    assert con.execute("SELECT count(*) FROM crypto_assets").fetchall() == [(len(rows),)]
    con.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("assets: []", "non-empty `assets:`"),
        ("assets:\n  - {symbol: btc, name: Bitcoin, kind: coin}", "upper-case"),
        ("assets:\n  - {symbol: BTC, name: Bitcoin, kind: rock}", "kind 'rock'"),
        ("assets:\n  - {symbol: BTC, name: Bitcoin, kind: coin}\n  - {symbol: XBT, name: bitcoin, kind: coin}",
         "used by both BTC and XBT"),
        ("assets:\n  - {symbol: NEAR, name: NEAR Protocol, kind: coin, weak: [Near]}", "must also be the name"),
        ("assets: [\n", "not valid YAML"),
        ("assets:\n  - {symbol: BTC, name: Bitcoin, kind: coin}\ncompanies:\n  - {name: X, symbol: Y}", "unknown field"),
    ],
)
def test_bad_registry_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(RegistryError) as err:
        parse_registry(text, "bad.yaml")
    assert message in str(err.value)


def test_version_changes_with_the_registry_and_new_assets_are_found(tmp_path: Path) -> None:
    copy = tmp_path / "registry.yaml"
    shutil.copy(REGISTRY_PATH, copy)
    same = Tagger(registry_path=copy)
    assert same.version == get_tagger().version  # the version hashes content, not the path
    assert same.tag("Zorblecoin jumps 50%").symbols == []

    text = copy.read_text()
    assert text.count("\nassets:\n") == 1
    copy.write_text(text.replace("\nassets:\n", "\nassets:\n  - {symbol: ZORB, name: Zorblecoin, kind: memecoin}\n"))
    changed = Tagger(registry_path=copy)
    assert changed.version != same.version
    assert changed.tag("Zorblecoin jumps 50%").symbols == ["ZORB"]


def test_version_changes_with_the_taxonomy(tmp_path: Path) -> None:
    copy = tmp_path / "taxonomy.yaml"
    copy.write_text(TAXONOMY_PATH.read_text().replace("strong: [etf, etfs,", "strong: [etf, etfs, fund wrapper,"))
    changed = Tagger(taxonomy_path=copy)
    assert changed.version != get_tagger().version
    assert "etf" in changed.tag("A new bitcoin fund wrapper lists in London").topics
    assert "etf" not in get_tagger().tag("A new bitcoin fund wrapper lists in London").topics


@pytest.mark.parametrize("headline,layer2", [
    ("Zephyrion, a new layer-1 blockchain, opens its mainnet", False),
    ("Layer 1 fees fall as the network upgrade lands", False),
    ("A layer 3 network raises $10 million for games", False),
    ("Arbitrum layer 2 fees drop to a record low", True),
    ("Base, a layer-2 network, processes record transactions", True),
    ("Layer 2s see record activity as fees fall", True),
])
def test_a_number_written_in_a_topic_phrase_is_that_number(headline: str, layer2: bool) -> None:
    # A contributor's review: "layer 2" was matched as "layer <any number>", so layer-1 news was tagged layer2.
    assert ("layer2" in get_tagger().tag(headline).topics) is layer2


@pytest.mark.parametrize("headline", ["Exchange files for Chapter 11 bankruptcy protection",
                                      "Lender files Chapter 7 in Delaware", "Miner seeks Chapter 15 recognition"])
def test_the_bankruptcy_chapters_each_written_out_are_corporate(headline: str) -> None:
    assert "corporate" in get_tagger().tag(headline).topics


def test_taxonomy_has_15_documented_topics_and_tags_its_own_examples() -> None:
    required = {"pricemovement", "priceforecast", "regulation", "lawsuits", "etf", "exchanges", "defi", "nft",
                "stablecoins", "mining", "security", "institutions", "macro", "layer2", "adoption",
                "tokenlaunch", "whales", "technology"}
    assert required <= set(TOPICS) and len(TOPICS) >= 15
    tagger = get_tagger()
    for topic in tagger.topics:
        assert topic.definition and "\n" not in topic.definition
        assert topic.examples, topic.slug
        for example in topic.examples:
            assert topic.slug in tagger.tag(example).topics, (topic.slug, example)


def test_bad_taxonomy_says_what_is_wrong() -> None:
    with pytest.raises(TaxonomyError, match="needs a one-line `definition`"):
        parse_taxonomy("topics:\n  - slug: etf\n    strong: [etf]\n")
    with pytest.raises(TaxonomyError, match="both `weak` phrases and a `context`"):
        parse_taxonomy("topics:\n  - slug: etf\n    definition: x\n    weak: [fund]\n")
    with pytest.raises(TaxonomyError, match="need a marker"):
        parse_taxonomy("topics:\n  - slug: etf\n    definition: x\n    figures: [up big]\n")


def _feed_titles(path: Path) -> set[str]:
    return {" ".join(e.get("title", "").split()) for e in feedparser.parse(str(path)).entries}


def test_labelled_set_is_well_formed_and_drawn_from_the_feeds() -> None:
    _check_labelled_set(origins={"sample": SAMPLE_FEEDS})


@pytest.mark.corpus("feeds")
def test_labelled_set_items_from_the_shared_feeds_are_their_titles() -> None:
    _check_labelled_set(origins={"shared": SHARED_FEEDS})


def _check_labelled_set(origins: dict) -> None:
    examples = load_examples()
    assert len(examples) >= 300
    assert len({e.text for e in examples}) == len(examples)
    symbols = {a.symbol for a in load_registry()}
    titles: dict[str, set[str]] = {}
    for e in examples:
        assert e.tickers <= symbols, e.text
        assert e.topics <= set(TOPICS), e.text
        origin, _, name = e.source.partition(":")
        assert origin in ("shared", "sample"), e.source
        if origin not in origins:
            continue
        folder = origins[origin]
        if e.source not in titles:
            titles[e.source] = _feed_titles(folder / name)
        assert e.text in titles[e.source], f"{e.text!r} is not a title of {e.source}"
    holdout = [e for e in examples if e.split == "holdout"]
    assert 0.2 <= len(holdout) / len(examples) <= 0.3


def test_evaluation_meets_the_floors() -> None:
    # Floors a little under what was measured (docs/tagging.md: all 1.000 / 0.932 / 0.915, held-out
    # 1.000 / 0.919 / 0.912), so a regression fails here. This set's one annotator took an app's name for its
    # token ("Aave v4 launch" -> AAVE); the three-reader sets and the tagger do not, hence the lower recall.
    result = evaluate("all")
    assert result["headlines"] >= 300
    assert result["tickers"]["precision"] >= 0.98
    assert result["tickers"]["recall"] >= 0.92
    assert result["topics"]["f1"] >= 0.89
    held = evaluate("holdout")
    assert held["tickers"]["precision"] >= 0.97
    assert held["tickers"]["recall"] >= 0.90
    assert held["topics"]["f1"] >= 0.88


def test_evaluate_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    from models.tagging.evaluate import main

    assert main(["--json", "--split", "holdout"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"holdout"} and out["holdout"]["headlines"] > 0
    assert EVAL_PATH.is_file()


def test_cli_tag_text_json() -> None:
    from pipeline.cli import app

    result = CliRunner().invoke(app, ["tag", "--text", "XRP price jumps as BTC/USD tops $100K", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["tagger_version"] == get_tagger().version
    (row,) = out["results"]
    assert [t["symbol"] for t in row["tickers"]] == ["XRP", "BTC"]
    assert row["tickers"][0] == {"symbol": "XRP", "salience": 0.75, "in_title": True}
    assert "pricemovement" in row["topics"]


def test_cli_tag_reads_headlines_from_stdin() -> None:
    from pipeline.cli import app

    stdin = "DOT Sinks 2% After Breaking Key Support\n\nRipple sued by former partner\n"
    result = CliRunner().invoke(app, ["tag"], input=stdin)
    assert result.exit_code == 0, result.output
    assert "DOT Sinks 2% After Breaking Key Support\n  tickers: DOT\n  topics:  pricemovement" in result.output
    assert "Ripple sued by former partner\n  tickers: -\n  topics:  lawsuits" in result.output


def test_cli_tag_without_a_headline_is_a_clear_error() -> None:
    from pipeline.cli import app

    result = CliRunner().invoke(app, ["tag"], input="\n\n")
    assert result.exit_code == 1
    assert "no headline given" in result.output


@pytest.mark.parametrize(
    ("headline", "day", "symbols"),
    [
        ("Uniswap goes live on Polygon", date(2021, 12, 22), ["MATIC"]),
        ("Uniswap goes live on Polygon", date(2025, 3, 1), ["POL"]),
        ("Layer by Layer: Fantom, Tezos and Polkadot", date(2021, 9, 10), ["FTM", "XTZ", "DOT"]),
        ("Sonic (formerly Fantom) doubles its TVL", date(2025, 6, 1), ["S"]),
        ("Binance integrates Ethereum Layer 2 network Arbitrum One", date(2021, 11, 19), ["ETH"]),
        ("Binance integrates Ethereum Layer 2 network Arbitrum One", date(2024, 1, 5), ["ETH", "ARB"]),
        ("Render Network raises $30 million in token round", date(2021, 12, 21), ["RNDR"]),
    ],
)
def test_tickers_are_the_symbols_of_the_day(headline: str, day: date, symbols: list[str]) -> None:
    from models.tagging import get_tagger

    assert sorted(get_tagger().tag(headline, "", day).symbols) == sorted(symbols)
    assert get_tagger().tag(headline, "").symbols == get_tagger().tag(headline, "", date(2026, 11, 25)).symbols


def test_registry_dates_are_checked() -> None:
    from models.tagging.registry import RegistryError, parse_registry

    with pytest.raises(RegistryError, match="since.*must be a date"):
        parse_registry("assets:\n  - {symbol: ABC, name: Abc, kind: coin, since: soon}\n")
    with pytest.raises(RegistryError, match="renamed.*needs .former_symbols"):
        parse_registry("assets:\n  - {symbol: ABC, name: Abc, kind: coin, renamed: 2024-01-01}\n")
    # a date YAML reads as one but no calendar has: named with its entry (was a bare "day is out of range")
    with pytest.raises(RegistryError, match=r"assets\[0\] \(ABC\): `since` must be a date YYYY-MM-DD, got '2026-11-31'"):
        parse_registry("assets:\n  - {symbol: ABC, name: Abc, kind: coin, since: 2026-11-31}\n")


@pytest.fixture
def broken_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The bundled registry replaced by one with an impossible date, for this test only."""
    from models.tagging import registry, tagger

    broken = tmp_path / "registry.yaml"
    broken.write_text("assets:\n  - {symbol: ABC, name: Abc, kind: coin, since: 2026-11-31}\n")
    monkeypatch.setattr(registry, "REGISTRY_PATH", broken)
    monkeypatch.setattr(tagger, "REGISTRY_PATH", broken)
    get_tagger.cache_clear()
    yield broken
    get_tagger.cache_clear()


def test_tag_with_a_broken_registry_is_one_line(broken_registry: Path) -> None:
    # A contributor's review: `tag` printed a 64-line traceback, and `tag --json` nothing on stdout.
    from typer.testing import CliRunner

    from pipeline.cli import app

    for args in (["tag", "--text", "Bitcoin rallies"], ["tag", "--text", "Bitcoin rallies", "--json"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert "`since` must be a date YYYY-MM-DD, got '2026-11-31'" in result.output, result.output
    document = next(line for line in result.output.splitlines() if line.startswith("{"))
    assert json.loads(document)["exitCode"] == 1  # --json: the error as a document too


def test_status_says_the_next_run_cannot_load_a_broken_registry(broken_registry: Path, data_home: Path) -> None:
    # The same review: `status` said nothing of it (only `status --json` held the error) and exited 0.
    from typer.testing import CliRunner

    from pipeline.cli import app
    from warehouse import db

    data_home.mkdir()
    db.connect(data_home / "warehouse.duckdb").close()
    result = CliRunner().invoke(app, ["status"])
    assert "CANNOT RUN: the tagger cannot be loaded: " in result.output, result.output
    assert "got '2026-11-31'" in result.output


@pytest.mark.parametrize(
    ("headline", "symbols"),
    [
        ("Avalanche Ventures backs three payments startups", []),
        ("New rollup brings the Ethereum Virtual Machine to Cardano", ["ADA"]),
        ("Ethereum-compatible chain Zedchain raises $8 million", []),
        ("Litecoin clone Ziplite forked twice in one week", []),
        # the asset itself, next to such a word, is still the asset; foundations and trusts stay the asset's
        ("Avalanche Ventures sells 5 million AVAX", ["AVAX"]),
        ("Ethereum slides 4% as venture funds sell", ["ETH"]),
        ("Grayscale launches Solana trust product", ["SOL"]),
        ("Cardano Foundation names a new chair for its board", ["ADA"]),
    ],
)
def test_a_fund_or_technology_named_after_an_asset_is_not_the_asset(headline: str, symbols: list[str]) -> None:
    from models.tagging import get_tagger

    assert sorted(get_tagger().tag(headline, "", date(2026, 11, 25)).symbols) == symbols


def test_a_firm_or_protocol_named_like_its_token_is_the_firm() -> None:
    from models.tagging import get_tagger

    tagger = get_tagger()
    assert tagger.tag("Enjin opens a studio in Singapore", "", date(2021, 6, 1)).symbols == []
    assert tagger.tag("Kyber Network launches a lending desk", "", date(2021, 6, 1)).symbols == []
    assert tagger.tag("Enjin Coin jumps 12% to $2.40", "", date(2021, 6, 1)).symbols == ["ENJ"]
    assert tagger.tag("Kyber Network price jumps 9% to $1.80", "", date(2021, 6, 1)).symbols == ["KNC"]


def test_plural_coins_and_long_tail_tokens_of_2021() -> None:
    from models.tagging import get_tagger

    tagger = get_tagger()
    assert tagger.tag("Nayib's treasury buys 420 more bitcoins", "", date(2021, 9, 20)).symbols == ["BTC"]
    assert tagger.tag("Farmers plot Chia crypto mining rigs in Ohio", "", date(2021, 6, 1)).symbols == ["XCH"]
    assert tagger.tag("Fund buys $5 million in REEF tokens", "", date(2021, 6, 1)).symbols == ["REEF"]
    assert tagger.tag("Divers map the reef off Belize", "", date(2021, 6, 1)).symbols == []


def test_icon_in_lower_case_is_a_word() -> None:
    from models.tagging import get_tagger

    tagger = get_tagger()
    assert tagger.tag("Tennis icon joins an NFT drop for charity", "", date(2021, 6, 1)).symbols == []
    assert tagger.tag("ICON network upgrade goes live", "", date(2021, 6, 1)).symbols == ["ICX"]
    assert tagger.tag("ICX jumps 11% after the upgrade", "", date(2021, 6, 1)).symbols == ["ICX"]
