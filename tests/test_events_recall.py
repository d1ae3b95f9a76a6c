"""Phrasings added for recall on unseen news (issue #19), each with the mistake it must not bring along.
Invented headlines; the reference prices they are judged against are those of the shipped asset table
(about $107,000 BTC, $150 SOL, $0.58 ADA, $2.20 XRP, $4.60 APT for 2026 articles)."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.test_events_templates import WEDNESDAY, derive

# (headline, summary, expected question title)
DERIVED = [
    # a level the asset must stay above is a floor it may lose: the question is whether it falls below
    ("Solana Struggles to Stay Above $140 as Selling Deepens", "",
     "Will Solana close below $140 on March 31, 2026?"),
    ("Can XRP Hold Above $2 This Week?", "", "Will XRP close below $2 on March 8, 2026?"),
    # a range of years: by the end of the last one
    ("Cardano Price Prediction 2026 – 2030: Can ADA Reach $5?", "",
     "Will Cardano close above $5 on December 31, 2030?"),
    # a level whose words give no direction: the reference price decides
    ("Solana Whales Return: Is SOL Price Headed to $300?", "",
     "Will Solana close above $300 on March 31, 2026?"),
    ("Rate Cut Could Push Bitcoin (BTC) to $45K, Analysts Warn", "",
     "Will Bitcoin close below $45,000 on March 31, 2026?"),
    # nominal forms: the level is named as the asset's price, with a forward word
    ("$1.50 Cardano Price Looks Closer Than Ever as Whales Accumulate", "",
     "Will Cardano close above $1.50 on March 31, 2026?"),
    ("Zedcoin Rallies Against Ethereum, but Is a $300 SOL Price Within Reach?", "",
     "Will Solana close above $300 on March 31, 2026?"),
    ("XRP Rally To $5 Possible as Payments Volume Grows", "",
     "Will XRP close above $5 on March 31, 2026?"),
    ("Solana: Analyst Predicts Bullish Breakout Above $250", "",
     "Will Solana close above $250 on March 31, 2026?"),
    ("Broker Cuts 2026 Ether Price Target by 40% to $6,000", "",
     "Will Ethereum close above $6,000 on December 31, 2026?"),
    ("XRP on the Verge of Hitting $4 After Soaring 15% Daily", "",
     "Will XRP close above $4 on March 31, 2026?"),
    # a question whose date is in a summary sentence about the same asset
    ("Can SOL Price Reach $400?", "Several analysts think Solana can hit that level this year.",
     "Will Solana close above $400 on December 31, 2026?"),
    # token unlocks: one token, a day; an exact day in the summary beats the headline's "this week"
    ("Aptos Set to Unlock 11.3 Million APT on March 12", "",
     "Will the scheduled unlock of 11.3 million APT take place by March 12, 2026?"),
    ("Sui Set to Unlock $250 Million Worth of SUI on March 6", "",
     "Will the scheduled unlock of Sui tokens take place by March 6, 2026?"),
    ("Aptos to Unlock 2% of APT Supply on March 12", "",
     "Will the scheduled unlock of Aptos (APT) tokens take place by March 12, 2026?"),
    ("Sui Network to Unlock Millions of SUI This Week", "The Sui Network will unlock $250 million of SUI on March 6.",
     "Will the scheduled unlock of Sui tokens take place by March 6, 2026?"),
    # a named upgrade wins over a bare "mainnet" that precedes it
    ("Developers Aim for May 7 Mainnet Deployment of Ethereum's Osaka Upgrade", "",
     "Will the Ethereum Osaka upgrade go live on mainnet by May 7, 2026?"),
    ("Polkadot Roadmap", "The team announced the anticipated launch of Polkadot 3.0 set for the second quarter of 2026.",
     "Will Polkadot launch Polkadot 3.0 by June 30, 2026?"),
    # a forecast far from today's price, when no other named asset trades near it (XRP about $2.20: 23x)
    ("Analyst: Ripple's XRP Could Rally to $50 This Cycle", "",
     "Will XRP close above $50 on March 31, 2026?"),
    # a move named after the level, in a question; a cue and a level followed by a reason
    ("Can Network Upgrades Fuel Solana's $250 Run?", "",
     "Will Solana close above $250 on March 31, 2026?"),
    ("Cardano Sets Eyes on $1.20 Thanks to Rising Developer Activity", "",
     "Will Cardano close above $1.20 on March 31, 2026?"),
    ("$5 XRP Price Beckons as Payment Corridors Expand", "",
     "Will XRP close above $5 on March 31, 2026?"),
    # ETF decisions phrased as an approval that could come
    ("More Good News for Solana Spot ETFs: SEC Approval Could Come Before Friday", "",
     "Will the SEC approve a spot Solana ETF by March 6, 2026?"),
]


@pytest.mark.parametrize(("headline", "summary", "title"), DERIVED)
def test_phrasing_is_derived(headline: str, summary: str, title: str) -> None:
    event = derive(headline, summary)
    assert event is not None, headline
    assert event.event_title == title


NOT_DERIVED = [
    # a stablecoin trades near $1: any other level is absurd
    "Can USDT Reach $10?",
    # one token leading a week's unlocks of many projects
    "Aptos Leads $500 Million Token Unlock Next Week",
    # a level near the reference price with no direction in the words: up or down, the table cannot tell
    "Is SOL Price Headed to $150?",
    # someone moves the asset; nothing is asked
    "Payments Pilot Lifts Volumes, Sending XLM to $0.42",
    "Founder Shares Plan to Take ETH to $10K if He Ran the Foundation",
    # a milestone reported as reached
    "Shiba Inu Surges to Surpass the $0.00003 Mark for the First Time Since 2021",
    # several tokens in one unlock, an unlock spread over a period, an unlock that already happened
    "Cardano, Aptos and Sui Set for $600M Token Unlock This Month",
    "Pi Slides as 140 Million Tokens Unlock Over the Next Week",
    "Aptos Unlocked 11.3 Million APT on March 2",
    # an unlock with no amount, or the week's unlocks of many projects led by one token
    "Optimism Token Unlock Looms on March 30, OP Price Under Pressure",
    "Aptos Token Unlock Scheduled for March 12",
    "GameFi Projects Brace for $300M Token Unlock in March; IMX Dips",
    "Starknet Leads $1.1 Billion in Token Unlocks Next Week",
    # a level inside a condition: "if" the price gets there, something else follows
    "Top Altcoins to Buy if Solana Drops Below $120 Next Month",
    "What Happens to XRP Should It Break $3.50 in March?",
    # names that are amounts, adverbs or financial products
    "Cardano Will Launch 18.53 by March 30",
    "An Ethereum Story to Launch Globally on April 15th",
    "Hong Kong Ethereum Spot ETFs Launch on Monday",
    # a level that is another named asset's price (ETH 28x over, BTC's own range), and one no forecast reaches
    "Ethereum Holders Eye $100K as Bitcoin Dominance Climbs",
    "XRP Could Hit $500 as Banks Adopt the Ledger",
    # the level is denied, not asked
    "Analysts Say Solana May Never Fall Below $100 Again",
    "Dogecoin's Days Below $0.10 Are Over, Traders Claim",
    # the date belongs to the price move the upgrade may bring, or names a month just past
    "Cardano's Van Rossem Hard Fork Could Spark a 50% Price Surge This Month",
    "Polkadot Asset Hub Upgrade, Initially Planned for February, Nears Completion",
]


@pytest.mark.parametrize("headline", NOT_DERIVED)
def test_phrasing_is_not_derived(headline: str) -> None:
    event = derive(headline)
    assert event is None, event and event.event_title


def test_a_lookback_period_is_not_the_resolution_date() -> None:
    event = derive("Solana Price Surges 20% in One Week, Bullish Pattern Hints Further Rally to $192")
    assert event is not None and event.date == datetime(2026, 3, 31)  # the default, not a week on
    event = derive("Biggest Inflow Day for Bitcoin ETFs in 2 Months as BTC Price Eyes $120K")
    assert event is not None and event.date == datetime(2026, 3, 31)


def test_an_option_expiry_is_not_the_resolution_date() -> None:
    event = derive("Bitcoin Traders Anticipate Price Drop Below $90,000",
                   "Put options expiring on March 27 now outnumber calls.")
    assert event is not None and event.date == datetime(2026, 3, 31)


def test_a_date_after_a_question_mark_or_before_a_dash_is_not_the_level_s() -> None:
    event = derive("Is Cardano (ADA) Price About to Explode to $1? Three Things to Watch Today")
    assert event is not None and event.date == datetime(2026, 3, 31)
    event = derive("Expert Predicts Settlement in June - XRP To $4?")
    assert event is not None and event.date == datetime(2026, 3, 31)


def test_default_date_counts_whole_days_after_publication() -> None:
    late = WEDNESDAY.replace(day=24, hour=23)  # March 24: 7 days of March remain
    event = derive("Bitcoin Eyes $120K", published=late)
    assert event is not None and event.date == datetime(2026, 3, 31)
    event = derive("Bitcoin Eyes $120K", published=late.replace(day=25))  # 6 days remain
    assert event is not None and event.date == datetime(2026, 4, 30)


def test_a_date_that_names_another_event_is_not_the_level_s() -> None:
    event = derive("Ethereum Bulls Eye $5,000 as Analysts Predict April 2 ETF Staking Launch")
    assert event is not None and event.date == datetime(2026, 3, 31)  # the default, not the launch's day
