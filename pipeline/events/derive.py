"""From articles to prediction events: one question per article at most, one event per question."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from pipeline.events.dates import default_price_date, instant, local_time
from pipeline.events.ids import event_id
from pipeline.events.learned import Candidate, candidates, default_model
from pipeline.events.mentions import EXTRA_ALIASES, AssetFinder, Mention
from pipeline.events.numbers import find_amounts, format_money
from pipeline.events.price import find_price
from pipeline.events.reference import DIRECTION_MARGIN, SETTLED_MARGIN, Reference, default_reference
from pipeline.events.templates import (
    CLAUSE_BREAK,
    ETF,
    LISTING,
    PRICE,
    UNLOCK,
    UPGRADE,
    Found,
    find_etf,
    find_listing,
    find_unlock,
    find_upgrade,
    is_noun_phrase,
    pick_date,
    upgrade_name,
    write,
)
from pipeline.events.text import clean, sentences, summary_text
from warehouse.db import naive_utc

# The source of this package's modules as this process loaded them (read right after their imports above): the
# event memo's fingerprint names the code that derives, not what a deploy put on disk later in a running process.
LOADED_CODE = {name: Path(module.__file__).read_bytes() for name, module in sorted(sys.modules.items())
               if name.startswith("pipeline.events.") and getattr(module, "__file__", None)}

OPTIONS = ("Yes", "No")


@dataclass(frozen=True)
class ArticleIn:
    """What derivation reads from an article (a row of ``articles``)."""

    id: str
    title: str
    summary: str
    url: str | None
    image_url: str | None
    source_name: str
    published_at: datetime  # naive UTC
    tickers: tuple[str, ...]
    topics: tuple[str, ...]
    published_offset: int | None = None  # minutes east of UTC the feed wrote the date in (None: not said)


@dataclass(frozen=True)
class EventCandidate:
    """One derived event, before the warehouse gives it a ``created_at`` and a ``status``."""

    id: str
    event_title: str
    event_description: str
    source_url: str | None
    image_url: str | None
    source_article_id: str
    source_published_at: datetime
    date: datetime
    options: tuple[str, str]
    tags: tuple[str, ...]
    asset: str
    kind: str
    comparator: str | None
    threshold: float | None
    currency: str | None
    resolution_criteria: str
    resolution_source: str
    # Beyond asset and date, what tells two questions apart: the exchange of a listing, the upgrade's name,
    # the ETF's issuer. Part of the id.
    subject: str | None = None
    # Every article that asks this question, oldest first (the first is the source).
    source_article_ids: tuple[str, ...] = ()


# Words that tie a summary sentence to the question when the headline gave no date.
_CONTEXT = {
    ETF: re.compile(r"\b(?:deadline|decide|decision|rule\s+on|approve)\b", re.I),
    LISTING: re.compile(r"\b(?:trading|list|listing|listed)\b", re.I),
    UPGRADE: re.compile(r"\b(?:upgrade|fork|mainnet|launch|activate[sd]?|go\s+live|goes\s+live|roll\s+out)\b", re.I),
    UNLOCK: re.compile(r"\b(?:unlock|unlocks|release|vesting)\b", re.I),
}

# What names the question's object again in a later clause of its sentence (``templates.pick_date``).
_OWN = {**_CONTEXT, PRICE: re.compile(r"\$|\b(?:price|close|target|level|hit|reach|rall\w*|surge\w*|climb\w*)\b", re.I)}


def derive_events(
    articles: Iterable[ArticleIn],
    names: Mapping[str, str],
    aliases: Mapping[str, Iterable[str]] | None = None,
    reference: Reference | None = None,
    refused: dict[str, str] | None = None,
    learned: bool = True,
) -> list[EventCandidate]:
    """The events the articles support, one per distinct question, oldest source first.

    ``names`` maps ticker -> display name ("BTC" -> "Bitcoin") and is how assets are found in the text;
    ``aliases`` adds other spellings (the registry's aliases) beyond the few built in; ``reference`` is the
    asset reference table the checks use (default: the shipped one). Questions a template found but a check
    refused are added to ``refused`` (event id -> reason), so that a published event can say why it is gone."""
    finder = AssetFinder(names, aliases)
    reference = reference or default_reference()
    found = (derive_article(article, names, finder, reference, refused, learned) for article in articles)
    return group_candidates(c for c in found if c is not None)


def group_candidates(candidates: Iterable[EventCandidate]) -> list[EventCandidate]:
    """One candidate per question: the oldest source's, with every article asking it; oldest source first."""
    groups: dict[str, list[EventCandidate]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.id, []).append(candidate)
    events = []
    for group in groups.values():
        group.sort(key=lambda c: (c.source_published_at, c.source_article_id))
        first = group[0]
        article_ids = tuple(dict.fromkeys(c.source_article_id for c in group))
        events.append(replace(first, source_article_ids=article_ids))
    events.sort(key=lambda c: (c.source_published_at, c.source_article_id, c.id))
    return events


def derive_article(
    article: ArticleIn, names: Mapping[str, str], finder: AssetFinder, reference: Reference | None = None,
    refused: dict[str, str] | None = None, learned: bool = True,
) -> EventCandidate | None:
    """The one event an article supports, or None: the rules' first question; when they find none (and
    ``learned``), the price level the learned model (``pipeline.events.learned``) is surest of, at its threshold."""
    reference = reference or default_reference()
    tickers = set(article.tickers or ())
    apps = app_tickers()
    if not tickers and not apps:
        return None
    published = naive_utc(article.published_at)
    local = local_time(published, article.published_offset)  # relative dates count from the publisher's calendar
    title, summary = clean(article.title), summary_text(article.summary)
    # An app's own upgrade ("Aave v4 mainnet launch") is a question about its token, though the tagger rightly
    # does not take the app's name alone for the token; such a headline names the app.
    in_title = finder.find(title) if title else []
    named_apps = {m.ticker for m in in_title} & apps
    if not tickers and not named_apps:
        return None
    units = [title, *sentences(summary)] if title else sentences(summary)
    mentions = [in_title, *(finder.find(u) for u in units[1:])] if title else [finder.find(u) for u in units]
    title_name = next((n for u, ms in zip(units, mentions, strict=True) if (n := upgrade_name(u, ms))), None)
    title_tickers = {m.ticker for m in mentions[0]} if units else set()
    fallback = next(iter(title_tickers)) if len(title_tickers) == 1 else None
    context = f"{title} {summary}"
    if answered(title, summary):
        return None  # "Will Bitcoin Hit $100K This Week? It Just Did": the article reports the outcome
    # "Bitcoin Is Not Going to $50K, Says Saylor": the summary's prices ("as BTC trades at $110,000") are no question
    denied = bool(title) and bool(find_amounts(title)) and bool(_DENIED_TITLE.search(title))
    for i, unit in enumerate(units):
        ms = mentions[i]
        for found in (
            find_etf(unit, ms, context),
            find_listing(unit, ms),
            find_price(unit, ms, context),
            find_upgrade(unit, ms, local, title_name, fallback),
            find_unlock(unit, ms),
        ):
            if found is None or (found.ticker not in tickers
                                 and not (found.kind == UPGRADE and found.ticker in named_apps)):
                continue
            if _called_off(found) or (denied and found.kind == PRICE):
                continue  # off, denied or done: no question to ask
            if found.kind == PRICE and found.comparator is None:
                direction = direction_by_reference(found, published, reference)
                if direction is None:
                    continue  # "is SOL headed to $150?" with SOL near $150: up or down, the words do not say
                if found.detail.get("hold") and direction == "above":
                    continue  # "Can XRP hold $3.20?" with XRP at $2.40: no floor to lose, the words are off
                found = replace(found, comparator=direction)
            when = _resolution_date(found, i, units, local, mentions)
            if when is None:
                continue
            reason = refusal(found, published, reference, names, tickers - {found.ticker})
            if reason is not None:
                if refused is not None:
                    key = event_id(found.ticker, found.kind, found.comparator, found.threshold, when, found.subject)
                    refused.setdefault(key, reason)
                continue
            return _candidate(article, found, when, names, title, summary, published)
    if not learned or denied:
        return None
    # Scored first (cheap), checked and dated only when sure enough: the surest viable level is the question.
    model = default_model()
    scored = [(p, c) for c in candidates(units, mentions, tickers, published, reference)
              if c.found.comparator is not None and (p := model.probability(c.features)) >= model.threshold]
    for _, cand in sorted(scored, key=lambda s: -s[0]):
        for viable, when in viable_candidates(units, mentions, tickers, published, reference, names, [cand], local):
            return _candidate(article, viable.found, when, names, title, summary, published)
    return None


@lru_cache(maxsize=1)
def _registry() -> tuple[frozenset[str], frozenset[str]]:
    """(tickers whose names are also an app, protocol, game or firm; stablecoin tickers), from the registry."""
    try:
        from models.tagging import load_registry
    except ModuleNotFoundError as exc:  # derivation works without the tagging package, as the evaluation does
        if exc.name not in ("models", "models.tagging"):
            raise
        return frozenset(), frozenset()
    assets = load_registry()
    return (frozenset(a.symbol for a in assets if a.app),
            frozenset(a.symbol for a in assets if a.kind == "stablecoin"))


def app_tickers() -> frozenset[str]:
    """Tickers whose names are also an app, protocol, game or firm (the registry's ``app`` names)."""
    return _registry()[0]


def stablecoin_tickers() -> frozenset[str]:
    """The registry's stablecoins (a level of theirs is no price question)."""
    return _registry()[1]


# A stablecoin trades near $1: a level outside this band is another asset's price or a sum ("$1,000 of FDUSD").
STABLE_BAND = (0.5, 2.0)


def viable_candidates(units: list[str], mentions: list[list[Mention]], tickers: set[str], published: datetime,
                      reference: Reference, names: Mapping[str, str],
                      found: list[Candidate] | None = None, local: datetime | None = None,
                      ) -> list[tuple[Candidate, datetime]]:
    """The learned model's candidate levels (``found``, else all of the article's) that pass every check
    (``refusal``) and have a resolution date (counted from ``local``, the publisher's clock, when given)."""
    out = []
    for cand in candidates(units, mentions, tickers, published, reference) if found is None else found:
        if _called_off(cand.found):
            continue
        if refusal(cand.found, published, reference, names, tickers - {cand.found.ticker}) is not None:
            continue
        when = _resolution_date(cand.found, cand.index, units, local or published, mentions)
        if when is not None:
            out.append((cand, when))
    return out


def direction_by_reference(found: Found, published: datetime, reference: Reference) -> str | None:
    """"above" or "below" for a price level whose sentence gives no direction ("Is SOL price headed to $300?"),
    from the asset's reference price at publication; None when the level is too near it, or there is none."""
    ref = reference.price_at(found.ticker, published)
    if ref is None or found.threshold is None:
        return None
    if found.threshold >= ref * DIRECTION_MARGIN:
        return "above"
    if found.threshold <= ref / DIRECTION_MARGIN:
        return "below"
    return None


def refusal(found: Found, published: datetime, reference: Reference, names: Mapping[str, str],
            others: Iterable[str] = ()) -> str | None:
    """Why a question the templates found cannot be listed, whatever its wording; None when it can.

    A price level must be a price of that asset (within the reference band at publication; out to the wider
    forecast band when none of the article's ``others`` assets has the level within its own band); an asset that
    has traded for over a year has no mainnet launch ahead; an upgrade or product name must read as a name."""
    name = names.get(found.ticker, found.ticker)
    day = f"{published:%Y-%m-%d}"
    if found.kind == PRICE and found.threshold is not None and found.ticker in stablecoin_tickers() and not (
            STABLE_BAND[0] <= found.threshold <= STABLE_BAND[1]):
        return (f"{format_money(found.threshold)} is not a plausible {found.ticker} price on {day}: a stablecoin "
                f"trades near $1, so a level must lie between {format_money(STABLE_BAND[0])} and "
                f"{format_money(STABLE_BAND[1])}")
    if found.kind == PRICE and found.threshold is not None and _not_its_price(found, name):
        return (f"{found.detail.get('written', format_money(found.threshold))!r} is said of something of {name}'s "
                "other than its price (a count, a cost, an amount per something): not a price level")
    if found.kind == PRICE and found.threshold is not None:
        money = format_money(found.threshold)
        band = reference.band(found.ticker, published)
        wide = reference.band(found.ticker, published, wide=True, priced=bool(found.detail.get("priced")))
        if band is not None and wide is not None:
            level = found.threshold
            owner = next((o for o in sorted(others) if (b := reference.band(o, published)) and b[0] <= level <= b[1]),
                         None)
            # Only a written currency makes a far level a forecast: "Ether pile could top 90K" counts coins.
            written = bool(found.detail.get("currency"))
            if not band[0] <= level <= band[1] and (owner or not written or not wide[0] <= level <= wide[1]):
                why = (f"it is a plausible {owner} price, and {owner} is named too" if owner else
                       f"a forecast may reach between {format_money(wide[0])} and {format_money(wide[1])}" if written
                       else f"{found.detail.get('written', money)!r} has no currency, so it may be a count, not a "
                            "forecast")
                return (f"{money} is not a plausible {found.ticker} price on {day}: the reference price then was "
                        f"{format_money(reference.price_at(found.ticker, published) or 0)}, so a level must lie "
                        f"between {format_money(band[0])} and {format_money(band[1])} ({why})")
            known = reference.price_range(found.ticker, published)
            if known and (found.comparator == "below" and level > known[1] * SETTLED_MARGIN
                          or found.comparator == "above" and level < known[0] / SETTLED_MARGIN):
                near = format_money(known[0]) + (f" to {format_money(known[1])}" if known[1] != known[0] else "")
                return (f"{found.ticker} traded near {near} around {day} (reference prices from {known[2]}): closing "
                        f"{found.comparator} {money} is all but certain, not a question (and a level that far off "
                        "may be a count)")
        elif not found.detail.get("currency"):
            return (f"{found.detail.get('written', money)!r} has no currency and {found.ticker} has no reference "
                    "price to tell a price from a count")
    if found.kind == UPGRADE:
        subject = found.subject or ""
        if found.detail.get("form") == "mainnet" and not subject or _own_network(subject, name):
            live = reference.live_for_long(found.ticker, published)
            if live is None:
                return f"{name} has no trading start date in the asset reference table: a mainnet launch cannot be checked"
            if live:
                since = reference.trading_since(found.ticker)
                live_part = f"the {subject}" if subject and not subject.lower().startswith(name.lower()) else "its mainnet"
                return f"{name} has traded since {since}: {live_part} is already live"
        if subject and not is_noun_phrase(subject):
            return f"{subject!r} is not the name of an upgrade or product"
    return None


# Words that may stand between an asset's name and a level it is said to reach: the asset itself, its price, the
# verbs and particles of a move. Any other word makes the level the thing it names ("Solana Validator Count Could
# Climb to 1,400", "Ethereum Blob Count Could Rise to 6,000"): checked for levels written without a currency.
_MOVE_WORDS = frozenset("""
    's price prices token tokens coin coins bulls bears value could may might will would can set poised likely
    expected seen to eyes eye eyeing eying targets target targeting aims aim aiming for at hit hits reach reaches top
    tops climb climbs rise rises fall falls drop drops slide slides slip slips surge surges rally rallies soar soars
    jump jumps sink sinks dip dips break breaks breaking test tests retest retests above below under over past beyond
    toward towards back again new fresh next is are be headed heading march marches race races push pushes run
    runs move moves crash crashes plunge plunges tumble tumbles spike spikes explode explodes pump pumps now finally
    just still already soon then and or as key major critical psychological level levels mark support resistance
    the a an its of in on this year month week by
""".split())
# Money that is not the asset's price, named between the asset and the amount ("Bitcoin Production Cost Could Rise
# to $90,000", "Litecoin Foundation Fundraiser Could Hit $150"), or an amount per something ("$3 airdrop per wallet").
_NOT_PRICE_NOUN = re.compile(
    r"\b(?:costs?|fees?|fundrais\w*|donations?|airdrops?|salar\w*|fines?|penalt\w*|bount\w*|grants?|rewards?|payouts?"
    r"|valuation|revenues?|income|profits?|earnings|dividends?|budgets?|settlements?|raises?|funding"
    # a measure priced in dollars, not the market price: "Ether's realized price could climb to $2,000"
    r"|reali[sz]ed\s+price|cost\s+basis|hash\s*price|liquidation\s+price|(?:entry|purchase|acquisition)\s+price)\b",
    re.I)
# "The cost to mine one bitcoin could rise to $95,000": the cost named before the asset.
_COST_OF = re.compile(r"\b(?:costs?|price)\s+(?:to|of)\s+(?:mine|mining|produc\w+|mint\w*)\b[^,;:]*$", re.I)
_PER = re.compile(r"\s*(?:[\w-]+\s+){0,2}per\s+(?!coin\b|token\b|analysts?\b|experts?\b|traders?\b|reports?\b|data\b"
                  r"|sources?\b|the\s+(?:analyst|report|chart|data)|[A-Z]\w*\s+(?:Research|Capital|Analytics))",
                  re.I)  # "$3 per wallet" is an amount per something; "$3 per analysts" is a source


def _not_its_price(found: Found, name: str) -> bool:
    """Whether the words around a level say it is something of the asset's other than its price."""
    unit, (start, end) = found.unit, found.anchor
    if _PER.match(unit, end) or _COST_OF.search(unit, max(0, start - 80), start):
        return True
    names = [n for n in {name, found.ticker, *EXTRA_ALIASES.get(found.ticker, ())} if n]  # "Ether's realized price"
    hits = [m.end() for n in names for m in re.finditer(rf"(?<![\w$]){re.escape(n)}(?![\w])", unit[:start], re.I)]
    if not hits:
        return False
    between = unit[max(hits) : start]
    if _NOT_PRICE_NOUN.search(between):
        return True
    if found.detail.get("currency"):
        return False
    words = re.findall(r"[A-Za-z][A-Za-z'\u2019]*", between.replace("\u2019", "'"))
    return any(w.lower() not in _MOVE_WORDS and len(w) > 2 for w in words)


def _own_network(subject: str, name: str) -> bool:
    """Whether a product name is the asset's own chain ("Cardano Mainnet", "Litecoin Network", "Solana", and the
    chains it has run on from the start: "Avalanche C-Chain", "Polkadot Relay Chain", "Ethereum Beacon Chain")."""
    rest = re.sub(rf"^{re.escape(name)}(?:'s)?\b", "", subject.strip(), flags=re.I).strip()
    if rest == subject.strip():  # the templates keep the asset's name out of a subject: "C-Chain"
        return re.fullmatch(r"[a-z]-chain|(?:relay|beacon)\s+chain", rest, re.I) is not None
    return re.fullmatch(
        r"(?:(?:main)?net(?:work)?|chain|blockchain|mainnet|ledger|[a-z]-chain|(?:relay|beacon)\s+chain)?",
        rest, re.I) is not None


# What the headline says is off, denied or done already: "Kraken Cancels Plan to List ...", "Issuer Pulls ...
# ETF", "Won't Ship by December 9", "Isn't Going to $10", "Already Hit the $110K Target", "Went Live Yesterday".
_CALLED_OFF = re.compile(
    r"\b(?:cancel(?:s|ed|led|ling)?|call(?:s|ed)?\s+off|halt(?:s|ed)?\s+(?:plans?|its|the)|scrap(?:s|ped)?"
    r"|shelve[sd]?|abandon(?:s|ed)?|rules?\s+out|ruled\s+out|pull(?:s|ed)\s+(?:its|the|plans?)"
    r"|postpone[sd]?(?![^,;:]*\b(?:to|until|till)\s)"  # "postpones launch to September 1" is a new date
    r"|(?:issuer|firm|company|exchange)\s+pulls|withdraw(?:s|n)?\s+(?:its|the)\s+(?:plan|filing|application|proposal)"
    r"|no\s+longer\s+(?:expected|planned|set|scheduled|on\s+track)|won'?t|will\s+not|isn'?t\s+going|is\s+not\s+"
    r"(?:expected|going|set|likely)|not\s+expected\s+to|unlikely\s+to|already\s+(?:hit|reached|topped|passed|"
    r"surpassed|broke|crossed|launched|live|listed|approved|unlocked)|went\s+live|delayed\s+from|denies|denied"
    r"|debunk\w*|fake\s+news"
    # doubted: "Most analysts don't expect ... to reach", "Few believe", "Traders doubt XRP can hit" (not "no doubt")
    r"|(?:do|does|did)(?:n'?t|\s+not)\s+(?:expect|see|think|believe|foresee)|(?<!\ba\s)few\s+(?:\w+\s+)?(?:believe|expect"
    r"|think|see|bet)|s[ck]eptical\s+(?:that|of|about|whether)|(?:are|is|remain|remains|stay|stays)\s+s[ck]eptical"
    r"|(?<!\bno\s)(?<!\blittle\s)(?<!\bwithout\sa\s)doubt(?:s|ed)?\s+(?:that|whether|if|\w+\s+(?:can|will|could|would))"
    r"|doubtful|improbable"
    r"|far-fetched|pipe\s+dream)\b", re.I)
_CLAUSE_EDGE = re.compile(r"[,;:]|\s[-\u2013\u2014]\s|\u2014")


_DENIED_TITLE = re.compile(
    r"\b(?:not\s+going\s+to|won'?t|will\s+not|never|isn'?t\s+going|rejects?|dismiss(?:es|ed)?|scoffs?\s+at|laughs?\s+off"
    r"|debunks?|no\s+way)\b", re.I)


def _called_off(found: Found) -> bool:
    """Whether the clause that holds the question's object says it is off, denied or done (``_CALLED_OFF``);
    another clause's "rules out a bitcoin reserve" says nothing of an ether target."""
    unit, (start, end) = found.unit, found.anchor
    left = max((m.end() for m in _CLAUSE_EDGE.finditer(unit, 0, start)), default=0)
    right = next((m.start() for m in _CLAUSE_EDGE.finditer(unit, end)), len(unit))
    return _CALLED_OFF.search(unit, left, right) is not None


# "... hit $1.5 soon?": the level's own horizon is near, whatever dates the rest of the headline names.
_SOON = re.compile(r"\s*(?:(?:again|price|mark|level|once\s+more)\s+)?(?:very\s+)?soon\b", re.I)
# A summary sentence that carries a headline's price question on: "Can Solana hit four figures this year?"
_PRICE_TALK = re.compile(r"\b(?:price|rally|hit|reach|target|surge|climb|rise|fall|drop|run|move|levels?)\b", re.I)


def _resolution_date(found: Found, index: int, units: list[str], published: datetime,
                     mentions: list[list[Mention]]) -> datetime | None:
    """When the question resolves (``_resolution_time``); a price question reads a daily close, so its day."""
    when = _resolution_time(found, index, units, published, mentions)
    if when is not None and found.kind == PRICE and (when.hour or when.minute):
        when = when.replace(hour=0, minute=0, second=0, microsecond=0)  # "at 14:00 UTC" names the close's day
        return when if when > instant(published) else None
    return when


def _resolution_time(found: Found, index: int, units: list[str], published: datetime,
                     mentions: list[list[Mention]]) -> datetime | None:
    """The date in the question's own sentence; else one a related summary sentence gives (for a price level:
    one naming the same level, else one about the same asset's price when the level sits in the headline);
    else, for price levels only, the default (``dates.default_price_date``). A date that is not after
    publication: None."""
    hit = pick_date(found.unit, published, found.anchor, found.kind == PRICE, _OWN[found.kind])
    if found.kind == PRICE and _SOON.match(found.unit, found.anchor[1]) and (hit is None or hit.start < found.anchor[0]):
        return default_price_date(published)  # "Will THETA hit $1.5 soon?" under "Price Prediction 2023-2030:"
    if hit is not None:
        if hit.when is not None and hit.rule != "explicit" and found.kind != PRICE:
            return _exact_day(found, index, units, published, hit.when) or hit.when
        return hit.when
    for j, other in enumerate(units):
        if j == index:
            continue
        if found.kind == PRICE:
            same = [a for a in find_amounts(other) if a.value == found.threshold]
            if same:
                hit = pick_date(other, published, (same[0].start, same[0].end), True)
            elif index == 0 and (talk := _PRICE_TALK.search(other)) and any(
                    m.ticker == found.ticker for m in mentions[j]) and not find_amounts(other):
                hit = pick_date(other, published, (talk.start(), talk.end()), True)
            else:
                continue
        else:
            key = _CONTEXT[found.kind].search(other)
            if not key:
                continue
            hit = pick_date(other, published, (key.start(), key.end()), False)
        if hit is not None:
            return hit.when
    if found.kind != PRICE or _unread_horizon(found):
        return None  # "by the end of the decade": a horizon the default month end would misdate
    return default_price_date(published)


def _unread_horizon(found: Found) -> bool:
    """A horizon the date rules do not read, said of the level: within its clause, from a few words before it."""
    unit, (start, end) = found.unit, found.anchor
    left = max((m.end() for m in _CLAUSE_EDGE.finditer(unit, max(0, start - 40), start)), default=max(0, start - 40))
    right = min((m.start() for p in (_CLAUSE_EDGE, CLAUSE_BREAK) for m in [p.search(unit, end)] if m), default=len(unit))
    return _UNREAD_HORIZON.search(unit, left, right) is not None


# Horizons the date rules do not read: the default (the month's end) would ask a decade's forecast within weeks.
_UNREAD_HORIZON = re.compile(
    r"\b(?:by|before|until|within|over|in|during)\s+(?:the\s+)?(?:end\s+of\s+(?:the|this)\s+decade|(?:this|next)\s+"
    r"decade|mid-?year|summer|spring|autumn|fall|winter|next\s+(?:\d+|few|several|two|three)\s+(?:months|years)"
    r"|(?:a|one|two|three|\d+)\s+years?|(?:coming|next\s+few)\s+years|(?:its\s+)?fiscal\s+year|the\s+20\d0s)\b"
    r"|\b(?:someday|eventually)\b", re.I)
# ("this cycle" and "long-term" are not here: readers give them the default date, as the guideline says.)
# The question already answered, right after it: "Will Bitcoin Hit $100K This Week? It Just Did", or a question
# headline whose summary opens with the answer ("SOL already did on Tuesday").
_ANSWER = r"[^.?!]{0,40}?\b(?:just|already)\s+did\b"
_ANSWERED_AFTER = re.compile(r"\?\s*" + _ANSWER, re.I)
_ANSWERED_FIRST = re.compile(r"^" + _ANSWER, re.I)


def answered(title: str, summary: str) -> bool:
    """Whether the article answers its own question with the outcome ("... This Week? It Just Did")."""
    return bool(_ANSWERED_AFTER.search(title) or _ANSWERED_AFTER.search(summary)
                or (title.rstrip().endswith("?") and _ANSWERED_FIRST.match(summary)))


def _exact_day(found: Found, index: int, units: list[str], published: datetime, period_end: datetime) -> datetime | None:
    """The exact day a related sentence gives within the period the question's own sentence names ("unlock
    ... this week" in the headline, "on February 1" in the summary)."""
    for j, other in enumerate(units):
        key = _CONTEXT[found.kind].search(other) if j != index else None
        if key and not re.search(r"\b(?:testnet|devnet)s?\b", other, re.I):  # a rehearsal's day is not the event's
            hit = pick_date(other, published, (key.start(), key.end()))
            if hit is not None and hit.rule == "explicit" and hit.when is not None and hit.when <= period_end:
                return hit.when
    return None


def _candidate(
    article: ArticleIn, found: Found, when: datetime, names: Mapping[str, str], title: str, summary: str,
    published: datetime,
) -> EventCandidate:
    name = names.get(found.ticker, found.ticker)
    texts = write(found, when, name, article.source_name, title, summary, published)
    tags = tuple(dict.fromkeys([found.ticker, *(t for t in (article.topics or ()) if t)]))
    return EventCandidate(
        id=event_id(found.ticker, found.kind, found.comparator, found.threshold, when, found.subject),
        event_title=texts.title,
        event_description=texts.description,
        source_url=article.url,
        image_url=article.image_url,
        source_article_id=article.id,
        source_published_at=published,
        date=when,
        options=OPTIONS,
        tags=tags,
        asset=found.ticker,
        kind=found.kind,
        comparator=found.comparator,
        threshold=found.threshold,
        currency=found.currency,
        resolution_criteria=texts.criteria,
        resolution_source=texts.source,
        subject=found.subject,
        source_article_ids=(article.id,),
    )
