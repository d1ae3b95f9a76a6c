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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from pipeline.events.dates import DateHit, find_dates
from pipeline.events.numbers import Amount, find_amounts, format_money

PRICE = "price_threshold"
ETF = "etf_decision"
LISTING = "listing"
UPGRADE = "upgrade_or_launch"
UNLOCK = "token_unlock"
KINDS = (PRICE, ETF, LISTING, UPGRADE, UNLOCK)

MAX_PRICE = 1e7  # "$1.2 billion" is an inflow or a valuation, never a coin's price level

# Common names the registry does not spell out ("Ether" is an alias of Ethereum; these are the few that
# headlines use constantly). Only used for tickers the article was tagged with.
EXTRA_ALIASES: dict[str, tuple[str, ...]] = {
    "BTC": ("Bitcoin", "XBT"),
    "ETH": ("Ether", "Ethereum"),
    "POL": ("Polygon", "MATIC"),
    "BNB": ("Binance Coin",),
    "TON": ("Toncoin",),
    "USDT": ("Tether",),
    "XRP": ("XRP Ledger", "XRPL"),
}

EXCHANGES = (
    "Binance.US", "Binance", "Coinbase", "Kraken", "OKX", "Bybit", "Robinhood", "Upbit", "Bithumb", "KuCoin",
    "Gemini", "Bitget", "Gate.io", "Crypto.com", "Bitstamp", "HTX", "Huobi", "MEXC", "Bitfinex", "Bitvavo",
    "eToro", "Revolut",
)
_EXCHANGE_RE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(e) for e in EXCHANGES) + r")(?:'s)?(?![\w])")


# --- text helpers ----------------------------------------------------------------------------------------

_TRANSLATE = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2010": "-", "\u2011": "-", "\u2012": "-",
    "\u2013": "-", "\u2014": " - ", "\u00a0": " ", "\u202f": " ", "\u2009": " ",
})
_BOILERPLATE = re.compile(r"\s*(?:The post .*? appeared first on .*|This article first appeared on [^.]*\.)\s*$")
_ABBREVIATIONS = ("U.S.", "U.K.", "Inc.", "Corp.", "Ltd.", "Co.", "Mr.", "Ms.", "Dr.", "St.", "vs.", "No.", "Mt.")
_MONTH_ABBREVIATIONS = ("Jan.", "Feb.", "Mar.", "Apr.", "Jun.", "Jul.", "Aug.", "Sep.", "Sept.", "Oct.", "Nov.", "Dec.")


def clean(text: str) -> str:
    """Plain quotes and dashes, single spaces, without feed boilerplate ("The post ... appeared first on")."""
    text = (text or "").translate(_TRANSLATE)
    text = re.sub(r"\s+", " ", text).strip()
    return _BOILERPLATE.sub("", text).strip()


def sentences(text: str) -> list[str]:
    """Split a summary into sentences without breaking "U.S." or "Oct. 26"."""
    protected = text
    for abbr in _ABBREVIATIONS + _MONTH_ABBREVIATIONS:
        protected = protected.replace(abbr, abbr.replace(".", "\x00"))
    parts = re.split(r"(?<=[.!?])\s+(?=[\"'(\[$A-Z0-9])", protected)
    return [p.replace("\x00", ".").strip() for p in parts if p.strip()]


def long_date(value: datetime) -> str:
    """``December 31, 2026``, or ``14:00 UTC on March 15, 2026`` when a time of day is set."""
    day = f"{value:%B} {value.day}, {value.year}"
    if value.hour or value.minute:
        return f"{value:%H:%M} UTC on {day}"
    return day


def indefinite(word: str) -> str:
    """ "a" or "an" for the word, by sound: an XRP ETF, an Ethereum ETF, a Solana ETF, a USDC ..."""
    if not word:
        return "a"
    if word.isupper() and len(word) > 1:  # read letter by letter
        return "an" if word[0] in "AEFHILMNORSX" else "a"
    if word.lower().startswith(("uni", "use", "usd", "one")):
        return "a"
    return "an" if word[0].lower() in "aeiou" else "a"


def possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


# --- asset mentions ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mention:
    start: int
    end: int
    ticker: str


_TOKEN = re.compile(r"\$?[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*")


class AssetFinder:
    """Finds where assets are named in a text: the symbol (case-sensitive, also "$SOL"), the name and a few
    common aliases (case-insensitive, also possessive "Bitcoin's"). The longest name wins where it starts
    ("Bitcoin Cash" is BCH, not BTC). Word n-grams are looked up in a dict, which keeps it fast."""

    def __init__(self, names: Mapping[str, str], aliases: Mapping[str, Iterable[str]] | None = None):
        ticker_of: dict[str, str] = {}
        for ticker, name in names.items():
            ticker_of.setdefault(_key(name), ticker)
        for ticker, extra in {**EXTRA_ALIASES, **(aliases or {})}.items():
            if ticker in names:
                for form in extra:
                    ticker_of.setdefault(_key(form), ticker)
        self._phrases = ticker_of
        self._prefixes = {" ".join(k.split()[:n]) for k in ticker_of for n in range(1, k.count(" ") + 2)}
        self._symbols = {t for t in names if re.fullmatch(r"[A-Z0-9]{2,12}", t)}

    def find(self, text: str) -> list[Mention]:
        tokens = list(_TOKEN.finditer(text))
        found: list[Mention] = []
        i = 0
        while i < len(tokens):
            hit = self._match_at(text, tokens, i)
            if hit is None:
                i += 1
                continue
            mention, used = hit
            found.append(mention)
            i += used
        return found

    def _match_at(self, text: str, tokens: list[re.Match[str]], i: int) -> tuple[Mention, int] | None:
        """The longest name or symbol starting at token ``i`` (a name's words are single-space separated)."""
        first = tokens[i]
        start = first.start()
        if start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_$"):
            return None
        word = first.group(0)
        best: tuple[Mention, int] | None = None
        if word.lstrip("$") in self._symbols:
            end = _possessive_end(text, first.end())
            if not _continues(text, end, hyphen_ok=True):
                best = (Mention(start, end, word.lstrip("$")), 1)
        if word.startswith("$"):
            return best
        key = ""
        for j in range(i, len(tokens)):
            if j > i and text[tokens[j - 1].end() : tokens[j].start()] != " ":
                break
            key = tokens[j].group(0).lower() if j == i else f"{key} {tokens[j].group(0).lower()}"
            if key not in self._prefixes:
                break
            ticker = self._phrases.get(key)
            if ticker:
                end = _possessive_end(text, tokens[j].end())
                if not _continues(text, end, hyphen_ok=False):
                    best = (Mention(start, end, ticker), j - i + 1)
        return best


def _continues(text: str, end: int, hyphen_ok: bool) -> bool:
    """Whether the word goes on past ``end`` ("Bitcoin-backed" is not Bitcoin; "ETH-USDT" is ETH)."""
    after = text[end : end + 1]
    return after.isalnum() or after == "_" or (not hyphen_ok and after == "-")


def _key(name: str) -> str:
    return " ".join(t.group(0) for t in _TOKEN.finditer(name)).lower()


def _possessive_end(text: str, end: int) -> int:
    if text.startswith("'s", end) and not text[end + 2 : end + 3].isalnum():
        return end + 2
    if text.startswith("'", end) and not text[end + 1 : end + 2].isalnum():
        return end + 1
    return end


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
    r"|end\s+support|cease\w*|close\s+(?:their|your|the)\s+accounts?|expir\w*)\b",
    re.I,
)


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


def lookback(unit: str, hit: DateHit) -> bool:
    """Whether an "in N days/weeks/months" phrase measures the past ("up 20% in one week", "biggest inflow day
    in 2 months")."""
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


def pick_date(unit: str, published_at: datetime, anchor: tuple[int, int], price: bool | None = None) -> DateHit | None:
    """The date phrase that belongs to the question: the nearest one after its object, else the nearest
    before it. Phrases introduced by "ahead of", "after", "since" ... date something else and are skipped,
    and so are deadlines for something else ("withdraw before Oct. 26", ``foreign_deadline``) and, when the
    question's kind is given (``price``), the days of other events (``owned_by_other``)."""
    hits = [
        h for h in find_dates(unit, published_at)
        if not _FOREIGN_DATE.search(unit[: h.start]) and not foreign_deadline(unit, h) and not lookback(unit, h)
        and not owned_by_other(unit, h, price)
    ]
    # A date behind a question mark belongs to another sentence ("... to $0.60? Three Things to Watch Today"),
    # and one before a dash to another clause ("Settlement in April - XRP to $1?").
    hits = [h for h in hits if not (re.search(r"[?!]", unit[anchor[1] : h.start]) if h.start >= anchor[1]
                                    else re.search(r"[?!]|\s-\s", unit[h.end : anchor[0]]))]
    after = [h for h in hits if h.start >= anchor[1]]
    if after:
        return min(after, key=lambda h: h.start)
    before = [h for h in hits if h.end <= anchor[0]]
    if before:
        return max(before, key=lambda h: h.end)
    return None


# --- price thresholds --------------------------------------------------------------------------------------

_UP_VERBS = (
    r"hit|reach|top|touch|tag|see|climb|rise|rally|surge|soar|jump|run|pump|rocket|fly|explode|break|breach"
    r"|cross|exceed|surpass|clear|return|reclaim|retake|recover|rebound|go|push|smash|blast|flip|print"
    r"|overtake|challenge|spike|zoom|shoot\s+up|revisit\s+highs\s+of|skyrocket|moon|go\s+parabolic|explode"
)
_DOWN_VERBS = (
    r"drop|fall|sink|slide|slip|dip|tumble|plunge|crash|slump|decline|retreat|correct|collapse|plummet|crater"
    r"|lose|retrace|bleed|nosedive|dump|shed|sag"
)
_NEUTRAL_VERBS = (
    r"test|retest|revisit|trade|hover|stay|hold|be|sit|settle|end|close|finish|head|move|edge|swing|inch|creep|drift"
)


def _verb_forms(stems: str) -> str:
    out = []
    for stem in stems.split("|"):
        if " " in stem or "\\" in stem:
            out.append(stem)
            continue
        out.append(rf"{stem}(?:s|es|ing|{stem[-1]}ing)?" if not stem.endswith("e") else rf"{stem}(?:s|d)?|{stem[:-1]}ing")
    return "|".join(out)


_UP = _verb_forms(_UP_VERBS) + r"|rising|diving"
_DOWN = _verb_forms(_DOWN_VERBS) + r"|falling|sliding|diving|declining|retreating"
_NEUTRAL = _verb_forms(_NEUTRAL_VERBS)
_PREP = r"(?:back\s+)?(?:above|over|past|beyond|below|under|beneath|to|toward|towards|at|near|around|through)?\s*(?:the\s+)?"
_MODAL = (
    r"(?:could|can|will|would|may|might|should|must|to|set\s+to|poised\s+to|likely\s+to|expected\s+to"
    r"|on\s+track\s+to|primed\s+to|ready\s+to|about\s+to|bound\s+to|tipped\s+to|predicted\s+to|forecast\s+to"
    r"|projected\s+to|needs?\s+to|going\s+to|aims?\s+to|looks?\s+to|seeks?\s+to|threatens?\s+to|risks?"
    r"|on\s+(?:the\s+)?(?:verge|brink|cusp)\s+of|close\s+to)"
)
_W = r"[\w$.'-]+"
# Each pattern ends where the amount starts.
_CUE_MODAL = re.compile(
    rf"\b(?P<modal>{_MODAL})\s+(?:{_W}\s+){{0,3}}?(?:(?P<up>{_UP})|(?P<down>{_DOWN})|(?P<neutral>{_NEUTRAL}))"
    rf"(?:\s+(?:another\s+)?\d+(?:\.\d+)?%)?\s+{_PREP}$",
    re.I,
)
_CUE_DIRECT = re.compile(
    r"\b(?P<cue>eyes?|eyeing|eying|targets?|targeting|sets?\s+sights\s+on|aims?\s+(?:for|at)|bets?\s+on|betting\s+on"
    r"|calls?\s+for|predicts?|predicting|forecasts?|forecasting|sees|seeing|projects?|expects?|expecting"
    r"|anticipates?|anticipating|envisions?|envisioning|sets?\s+eyes\s+on|banking\s+on|case\s+for"
    r"|paves?\s+(?:the\s+)?way\s+for|outlines?\s+(?:a\s+)?path\s+to"
    r"|watch(?:es|ing)?|eyes\s+a\s+(?:move|run|rally|return|push|drop|fall|slide)\s+(?:to|toward|towards)"
    r"|eyes\s+(?:glued|set|fixed)\s+(?:to|on))"
    r"\s+(?:(?:a|an|the)\s+)?(?:(?:fresh|new|next|potential|possible)\s+)?"
    r"(?:(?:bullish|bearish|major|massive|big|huge|strong|sharp|parabolic|explosive|spectacular|further|price)\s+)*"
    r"(?:(?:move|run|rally|return|push|drop|fall|slide|retest|test|breakout|breakdown|surge|rebound|recovery|climb"
    r"|jump|decline|crash|correction|dip|pump)\s+(?:to|toward|towards|of|above|below|past|beyond|under)\s+)?"
    r"(?:(?:price\s+)?target\s+of\s+)?$",
    re.I,
)
# "Aldridge Sees Bitcoin at $135,000", "Analyst Expects ETH to Hit $5K" (the asset sits between cue and level)
_CUE_SEES = re.compile(
    rf"\b(?:sees?|expects?|predicts?|forecasts?|projects?|calls?\s+for|targets?|anticipates?|envisions?)"
    rf"\s+(?:{_W}\s+){{1,3}}?(?:at|to|hitting|reaching|topping|near|past|above|beyond|over|below|under)\s+$",
    re.I,
)
_CUE_TOWARD = re.compile(
    rf"\b(?:(?P<up>{_UP})|(?P<down>{_DOWN})|(?P<neutral>{_NEUTRAL}|march(?:es|ing)?|race[sd]?|racing|grind(?:s|ing)?))"
    r"\s+(?:back\s+)?(?:toward|towards|for)\s+(?:the\s+)?$"
    r"|\bhead(?:s|ed|ing)?\s+(?:back\s+)?(?:to|toward|towards|for)\s+(?:the\s+)?$"
    r"|\b[a-z]+(?:s|ing)\s+(?:(?P<up2>up|higher)|(?P<down2>down|lower))\s+(?:toward|towards)\s+(?:the\s+)?$"
    r"|\bon\s+(?:its|the)\s+way\s+to\s+$",
    re.I,
)
_CUE_NOUN = re.compile(
    r"\b(?:(?:a|an|another)\s+(?:(?:potential|possible|further|fresh|new)\s+)?|(?:potential|possible|further)\s+)(?:(?:move|run|push|rally|return|climb|rise|surge|"
    r"trip|path|drop|fall|slide|decline|retest|test|revisit)\s+(?:back\s+)?(?:to|toward|towards|above|below|of)"
    r")\s+(?:the\s+)?$",
    re.I,
)
# "sending XLM to $0.42", "plan to take ETH to $10K": someone moves the asset, the headline asks nothing.
_MOVED_BY = re.compile(r"\b(?:\w+(?:ing|ed)|take|drive|push|send|bring|boost|lift|propel|pull|get|put)\s+$", re.I)
_HEADLINE_TO = re.compile(r"\bto\s+$", re.I)  # "Bitcoin to $150K by 2026?" - checked with the asset right before
_RIGHT_TARGET = re.compile(
    r"^\s*(?:(?P<asset>[\w$]+)\s+)?(?:price\s+)?(?P<what>target|prediction|forecast|call|projection)s?\b", re.I
)
# Amounts that count something other than one coin's price: "holdings pass 6 million", "market cap to $3
# trillion", "a $500 million fund", "6,000 BTC", "20M users".
_COUNT_BEFORE = re.compile(
    r"\b(?:holdings?|holds|reserves?|supply|market\s+(?:cap|capitali[sz]ation|value)|mcap|valuation|valued|fund(?:s|ing)?"
    r"|rais(?:e|es|ed|ing)|TVL|total\s+value\s+locked|volume|open\s+interest|inflows?|outflows?|treasury|stash"
    r"|addresses|wallets|users|holders|transactions|accounts|stak(?:ed|ing)|deposits?|liquidations?|revenue|fees"
    r"|profits?|losses|debt|loans?|bonds?|sales|buy(?:back)?s?|purchases?|acquisitions?|worth|AUM|assets\s+under)\b"
    r"(?:\W+\w+){0,2}\W+$",
    re.I,
)
_COUNT_AFTER = re.compile(
    r"^\s*(?:coins?|tokens?|units?|shares?|users?|addresses|wallets?|holders?|transactions?|accounts?|followers?"
    r"|downloads?|nodes?|validators?|miners?|blocks?|people|investors?|customers?|fund\b|raise\b|round\b"
    r"|valuation|market\s+cap|in\s+(?:assets|AUM|TVL))\b",
    re.I,
)

_NOT_A_PRICE = re.compile(
    r"^\s*(?:in\s+(?:inflows?|outflows?|liquidations?|volume|funding|fees|revenue|profit|losses?|bitcoin|ether|"
    r"stablecoins?|crypto|tokens?|shares)|worth\b|of\s+(?:inflows?|outflows?|btc|eth|bitcoin|ether))",
    re.I,
)
_ALLOWED_AFTER = frozenset(
    "by before in this next within on again as amid after while level levels mark support resistance price "
    "target targets zone area range handle threshold barrier milestone for with if soon says say said analyst "
    "analysts trader traders is could may until and or but first per ahead despite following then once at from "
    "into over under is next amidst possible likely breakout breakouts rally run move surge push ride mark retest "
    "test region soon coming price prices to eruption explosion moonshot rocket pump spike jump prediction "
    "predictions forecast forecasts projection looms looming closer beckons beckoning thanks monster massive "
    "big huge major explosive parabolic bullish ride leap upswing".split()
)
_UPSIDE_CUE = re.compile(
    r"\b(?:eyes?|eyeing|targets?|targeting|sights|aims?|bets?|betting|calls?|predicts?|forecasts?|expects?|sees?"
    r"|projects?)\b",
    re.I,
)
_LEVEL = re.compile(r"^\s*(?:level\s+|mark\s+|area\s+|zone\s+)?(?P<level>support|resistance|floor|ceiling)\b", re.I)
_BEARISH = re.compile(r"\b(?:bear(?:s|ish)?|downside|crash|correction|sell-off|selloff|short(?:s|ing)?)\b", re.I)
# "added 1% to reach $909", "jumped to hit $100K": an infinitive after a move that already happened.
_TO_AFTER_MOVE = re.compile(
    r"(?:%|\b\w+ed|\bfail(?:s|ing)?|\b(?:rises|jumps|climbs|soars|surges|falls|drops|slides|sinks|rallies|gains|spikes"
    r"|dips|rose|fell|sank|slid|ran|grew|swung))\s*$",
    re.I,
)
# "may never fall below $1 again", "XRP's days below $1 are over": a claim that the level will not be seen.
_NEGATED = re.compile(r"\b(?:never|no\s+longer|won'?t|will\s+not|cannot|can'?t|days\s+(?:above|below|under|over))\b", re.I)
_PAST_GUARD = re.compile(r"\b(?:after|since|following|fail(?:s|ed)?\s+to|failing\s+to)\s+(?:\S+\s+){0,2}$", re.I)
_REF_LEFT = re.compile(
    r"(?:\b(?:trad(?:es|ed|ing)|chang(?:es|ed|ing)\s+hands|was|is|sits|sat|stood|stands|hover(?:s|ed|ing)?"
    r"|holding|holds|held|priced|steady|flat)\s+(?:(?:just\s+)?(?:at|near|around|above|below|close\s+to)\s+)?"
    r"|\b(?:rose|fell|climbed|dropped|slid|jumped|gained|lost|rallied|sank|dipped|added|slipped|surged|tumbled"
    r"|up|down)\s+(?:\d+(?:\.\d+)?%\s+)?to\s+|@\s*|\bat\s+)$",
    re.I,
)


# Words that make a sentence about a future level, for the cues below that are not forward-looking by themselves.
_FORWARD = re.compile(
    r"\?|\b(?:could|can|will|would|may|might|should|possible|possibly|likely|within\s+reach|in\s+sight|in\s+view"
    r"|closer\s+than\s+ever|looms?|looming|nigh|in\s+the\s+cards|on\s+the\s+cards|on\s+the\s+horizon|imminent"
    r"|envision\w*|predict\w*|expect\w*|forecast\w*|target\w*|eyes?|eyeing|eying|next|ahead|soon|upcoming"
    r"|potential|poised|primed|set\s+(?:to|for)|beckons?|beckoning|in\s+the\s+offing|looks?\s+near)\b",
    re.I,
)
# "could push Bitcoin to $45K", "will it send price to $3?", "plan to boost ETH price to $10K"
_CUE_PUSH = re.compile(
    r"\b(?:could|can|will|would|may|might|should|to)\s+(?:(?:it|also|further|eventually|soon|then)\s+)?"
    r"(?:(?P<up>lift|boost|propel|catapult|rocket|fuel|thrust)|(?P<down>drag|sink|tank)|push|send|drive|take|bring|pull)"
    r"\s+(?:[\w$.'()-]+\s+){0,3}?(?:to|toward|towards)\s+(?:the\s+)?$",
    re.I,
)
# "cuts 2025 ether price target by 60% to $4,000", "raises its BTC target to $150K": a target is an upside level.
_CUE_TARGET_TO = re.compile(r"\b(?:price\s+)?(?:target|forecast|prediction)s?\s+(?:by\s+[\d.]+%\s+)?to\s+$", re.I)
# "XRP price explosion to $5 in the cards", "explosive breakout to $5", "rally to $15 possible"
_CUE_NOMINAL = re.compile(
    r"\b(?:(?P<up>explosion|eruption|rally|surge|pump|run|rocket|moonshot|jump|breakout|spike|climb|rise|ascent|rebound"
    r"|recovery|upswing|liftoff)|(?P<down>crash|drop|fall|decline|slide|plunge|dump|correction|breakdown|dip))"
    r"\s+(?:to|toward|towards|above|past|beyond|below|under)\s+(?:the\s+)?$",
    re.I,
)


# A move named right after the level, in a forward-looking sentence: "$200 run?", "$1 monster move", "$0.93 breakout".
_MOVE_AFTER = re.compile(
    r"^\s*(?:(?:monster|massive|big|huge|major|explosive|parabolic|bullish)\s+)?(?:(?P<up>run|ride|rally|breakout|surge"
    r"|explosion|eruption|pump|moonshot|spike|jump|upswing|leap)|move)\b",
    re.I,
)


def _follower_ok(after: str, mentions_after: bool) -> bool:
    stripped = after.lstrip()
    if not stripped or stripped[0] in "?!.,;:()-'\"–—":
        return True
    if mentions_after:
        return True
    word = re.match(r"[A-Za-z]+", stripped)
    return bool(word) and word.group(0).lower() in _ALLOWED_AFTER


def reference_price(text: str, threshold: Amount) -> float | None:
    """The asset's current price as the article states it ("trades at $18.40", "fell 7% to $158"), if any.
    Only amounts within 0.2x-5x of the level count: other assets' prices are usually far off."""
    for amount in find_amounts(text):
        if amount.value == threshold.value or amount.currency not in (None, "USD"):
            continue
        if not (0.2 * threshold.value <= amount.value <= 5 * threshold.value):
            continue
        if _REF_LEFT.search(text[max(0, amount.start - 40) : amount.start]):
            return amount.value
    return None


# "to surpass the $0.00001 mark for the first time since 2021": it happened.
FIRST_TIME = re.compile(r"\s*(?:\w+\s+)?for\s+the\s+first\s+time\b", re.I)
# A preposition right before the amount: the strongest direction signal ("close above", "dip below").
PREP_BEFORE = re.compile(r"\b(above|over|past|beyond|below|under|beneath)\s+(?:the\s+)?$", re.I)
# "struggling to stay above $5", "must hold above $60K": the level is a floor the asset may lose, so the question
# is whether it falls below it (and "stay below" a ceiling it may break).
_STAY = re.compile(r"\b(?:stay|stays|staying|remain|remains|remaining|hold|holds|holding|keep|keeps|keeping)\s+$", re.I)


def prep_direction(left: str, prep: re.Match[str]) -> str:
    """The direction a preposition right before the level gives ("close above" -> above, "stay above" -> below)."""
    up = prep.group(1).lower() in ("above", "over", "past", "beyond")
    if _STAY.search(left[: prep.start()]):
        up = not up
    return "above" if up else "below"


# "if"/"unless"/"in case" opening the clause that holds the level, with no clause break in between.
_CONDITION = re.compile(r"\b(?:if|unless|in\s+case|should)\s+(?:[^,;:?!.\u2013\u2014]){0,60}$", re.I)


def find_price(unit: str, mentions: list[Mention], context: str) -> Found | None:
    """A price level with a forward-looking cue next to it, and the asset it is about."""
    for amount in find_amounts(unit):
        if amount.currency not in (None, "USD") or not (0 < amount.value < MAX_PRICE):
            continue
        left = unit[: amount.start]
        right = unit[amount.end :]
        if _NOT_A_PRICE.match(right) or _COUNT_AFTER.match(right) or _COUNT_BEFORE.search(left[-60:]):
            continue
        if FIRST_TIME.match(right):
            continue  # "to surpass the $0.00001 mark for the first time since 2021": it happened
        if _CONDITION.search(left[-80:]):
            continue  # "Best coins to buy if Bitcoin falls below $30K": a condition, not a forecast
        after_mentions = [m for m in mentions if m.start >= amount.end and m.start - amount.end <= 2]
        if after_mentions and not amount.currency and not re.match(r"\s*(?:price|target|level)", unit[after_mentions[0].end:], re.I):
            continue  # "6 million ETH", "6,000 BTC": a number of coins
        if not _follower_ok(right, bool(after_mentions)):
            continue
        direction: str | None = None
        cue_start: int | None = None
        neutral = False
        target = _RIGHT_TARGET.match(right)
        for pattern in (_CUE_MODAL, _CUE_TOWARD):
            m = pattern.search(left)
            if m and m.groupdict().get("modal", "").lower() == "to" and _TO_AFTER_MOVE.search(left[: m.start()]):
                m = None
            if m:
                cue_start = m.start()
                if m.groupdict().get("up") or m.groupdict().get("up2"):
                    direction = "above"
                elif m.groupdict().get("down") or m.groupdict().get("down2"):
                    direction = "below"
                else:
                    neutral = True
                break
        if cue_start is None:
            m = _CUE_DIRECT.search(left) or _CUE_NOUN.search(left) or _CUE_SEES.search(left)
            if m:
                cue_start = m.start()
                text = m.group(0).lower()
                if re.search(rf"\b(?:{_DOWN})\b", text):
                    direction = "below"
                elif re.search(rf"\b(?:{_UP})\b", text):
                    direction = "above"
                else:
                    neutral = True
        if cue_start is None and target and (target.group("asset") is None or after_mentions):
            cue_start = amount.start
            neutral = True
        if cue_start is None and _HEADLINE_TO.search(left):
            before = [m for m in mentions if m.end <= amount.start]
            if (before and re.fullmatch(r"\s*(?:\([A-Z0-9]+\)\s*)?(?:price\s+)?to\s*", unit[before[-1].end : amount.start], re.I)
                    and not _MOVED_BY.search(unit[: before[-1].start])):  # not "sending XLM to $0.42"
                cue_start = before[-1].start
                neutral = True
        if cue_start is None and (m := _CUE_TARGET_TO.search(left)):
            cue_start, direction = m.start(), "above"
        if cue_start is None and _FORWARD.search(unit):
            m = _CUE_PUSH.search(left) or _CUE_NOMINAL.search(left)
            if m:
                cue_start = m.start()
                direction = "below" if m.groupdict().get("down") else "above" if m.groupdict().get("up") else None
                neutral = direction is None
            elif (move := _MOVE_AFTER.match(right)) and not after_mentions:
                cue_start = amount.start  # "can ETF hype fuel SOL's $200 run?", "Is ADA Ready for a $2 Ride?"
                direction = "above" if move.group("up") else None
                neutral = direction is None
            elif after_mentions and re.match(r"\s*(?:\([A-Z0-9]+\)\s*)?price\b", unit[after_mentions[0].end :], re.I):
                cue_start = amount.start  # "$0.001 SHIB price could become reality", "is $300 SOL price within reach?"
                neutral = True
            elif any(0 <= amount.start - m.end <= 2 for m in mentions) and re.match(r"\W*(?:\w+\s+)?price\b", right, re.I):
                cue_start = amount.start  # "XRP $5 eruption price now looks nigh"
                neutral = True
        if cue_start is None or _PAST_GUARD.search(left[:cue_start]) or _NEGATED.search(left[max(0, cue_start - 40):]):
            continue
        # A preposition right before the amount is the strongest direction signal ("close above", "dip below").
        prep = PREP_BEFORE.search(left)
        if prep:
            direction = prep_direction(left, prep)
            neutral = False
        if neutral:
            level = _LEVEL.match(right) or _LEVEL.match(re.sub(r"^\s*(?:[\w$]+\s+)?", " ", right, count=1))
            if level:
                direction = "below" if level.group("level").lower() in ("support", "floor") else "above"
            elif target and _BEARISH.search(unit):
                direction = "below"
            else:
                ref = reference_price(context, amount)
                if ref is not None and ref != amount.value:
                    direction = "above" if ref < amount.value else "below"
                elif target or _UPSIDE_CUE.search(unit[cue_start : amount.start]):
                    direction = "above"  # a target or an "eyes" with nothing pointing down is an upside target
        # "$1 ADA price", "the case for $500K bitcoin": the asset named right after the level is its asset.
        nominal = bool(after_mentions) and not unit[amount.end : after_mentions[0].start].strip()
        asset = _asset_for(mentions, amount, after_mentions if nominal else [])
        if asset is None and target:  # "$64K target for Bitcoin"
            asset = next((m.ticker for m in mentions if m.start >= amount.end
                          and re.fullmatch(r"\s*(?:price\s+)?\w+\s+(?:for|on)\s+", unit[amount.end : m.start], re.I)), None)
        if asset is None:
            continue
        if direction is None:
            if not neutral:
                continue
            direction = None  # a level with no direction in the words: the asset's reference price decides (derive)
        return Found(
            kind=PRICE, ticker=asset, unit=unit, anchor=(amount.start, amount.end), comparator=direction,
            threshold=amount.value, currency="USD", detail={"written": amount.text, "currency": amount.currency or ""},
        )
    return None


def _asset_for(mentions: list[Mention], amount: Amount, after: list[Mention]) -> str | None:
    """The asset a price belongs to: the nearest one named before it, else one named right after it
    ("$76K BTC price target")."""
    before = [m for m in mentions if m.end <= amount.start]
    if after and (not before or amount.start - before[-1].end > 2):
        return after[0].ticker  # "... against Ethereum, but is $300 SOL price within reach?"
    if before:
        return before[-1].ticker
    return None


# --- ETF decisions -----------------------------------------------------------------------------------------

_ETF_WORD = re.compile(r"\b(?:ETF|ETP|exchange-traded\s+(?:fund|product))s?\b|\bTrust\b(?!\s+Wallet)")
_ETF_DECISION = re.compile(
    r"\b(?:to\s+(?:decide|rule|approve|act)|will\s+(?:decide|rule|approve)|decision\s+(?:is\s+)?(?:still\s+)?due"
    r"|decide\s+by|deadline|has\s+until|delays?|delayed|postpones?|postponed|extends?|pushes\s+back"
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


def _issuer(unit: str, asset_mention: Mention) -> str | None:
    """Who files the fund, when the sentence says: "Northgate's spot Solana ETF", "the Northgate Solana Trust",
    a known issuer's name, or "Northgate Adds Staking to Solana ETF Proposal"."""
    head = unit[: asset_mention.start]
    m = re.search(r"\b(?P<issuer>[A-Z][\w.-]*)'s?\s+(?:(?i:proposed|planned|spot)\s+)*$", head)
    if m and m.group("issuer") not in _NOT_ISSUER:
        return m.group("issuer")
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
                       r"earn|launchpool|launchpad|loans?|contracts?|treasury|reserves?|balance)\b", re.I)


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
_PAST_UNLOCK = re.compile(r"\bunlocked\b|\b(?:completed|finished|concluded)\b", re.I)


def find_unlock(unit: str, mentions: list[Mention]) -> Found | None:
    """A scheduled unlock of one token (a date is required later)."""
    if _PAST_UNLOCK.search(unit):
        return None
    trig = _UNLOCK_VERB.search(unit) or _UNLOCK_NOUN.search(unit)
    if not trig:
        return None
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
    must to set slated due eyed planned expected""".split()
)
_GENERIC = frozenset("network protocol chain mainnet layer blockchain".split())
_MONTH_WORDS = frozenset(
    "january february march april may june july august september october november december jan feb mar apr jun "
    "jul aug sep sept oct nov dec q1 q2 q3 q4".split()
)


def _name_before(unit: str, at: int, mentions: list[Mention]) -> str | None:
    """The upgrade's own name written right before it: "Glamsterdam", "Node 11", "Mysticeti v3", "v4".
    Title Case makes every word look like a name, so common words, -ing words and dates stop the search."""
    tokens = [t for t in re.finditer(r"[\w.-]+", unit[:at])]
    name: list[str] = []
    for i in range(len(tokens) - 1, -1, -1):
        tok = tokens[i]
        word = tok.group(0)
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


def find_upgrade(
    unit: str, mentions: list[Mention], published_at: datetime, title_name: str | None, fallback: str | None
) -> Found | None:
    """A named upgrade, hard fork, product or mainnet launch with a date ahead (the date is checked later)."""
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
    if any(w in HEADLINE_VERBS for w in lowered):
        return False
    if lowered[-1] in _NAME_STOP and not re.fullmatch(r"v?\d[\w.]*", words[-1]):
        return False
    if not any(re.search(r"[A-Za-z]{2}", w) or re.fullmatch(r"v\d[\w.]*", w) for w in words):
        return False  # "18.53": an amount, not a name
    if any(re.search(r"[a-z]ly$", w) for w in lowered) or any(w in _NOT_A_PRODUCT for w in lowered):
        return False  # "Globally", "Spot ETFs": an adverb, or a financial product rather than a launch
    return any(w[0].isupper() or w[0].isdigit() or re.fullmatch(r"v\d[\w.]*", w) for w in words)


# Launches of these are listings or filings, never a project's upgrade or product release.
_NOT_A_PRODUCT = frozenset("etf etfs etp etps etn etns fund funds futures options".split())


def upgrade_name(unit: str, mentions: list[Mention]) -> str | None:
    """A named upgrade or fork anywhere in a sentence, testnet ones included (to name a later bare mention)."""
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
