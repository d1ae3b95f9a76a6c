"""The tagger: tickers (with salience) and topics for one article."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import date, datetime
from functools import lru_cache
from pathlib import Path

from models.tagging.registry import REGISTRY_PATH, load_registry
from models.tagging.text import clean, tokenize
from models.tagging.tickers import CRYPTO_WORDS, Mention, TickerIndex
from models.tagging.topics import TAXONOMY_PATH, TaxonomyError, TopicMatcher, load_taxonomy

_HERE = Path(__file__).resolve().parent
# The rules are code as much as data: a change to any of these files changes the version.
RULE_SOURCES = ("registry.py", "text.py", "tickers.py", "topics.py", "tagger.py")
SUMMARY_LEAD_CHARS = 300  # topics read the title and the start of the summary, not the whole body


@dataclass(frozen=True)
class TickerHit:
    symbol: str
    salience: float  # 0.5 for a title mention, plus 0.5 x its share of all mentions (title + summary)
    in_title: bool


@dataclass(frozen=True)
class Tags:
    tickers: list[TickerHit]  # most salient first: title mentions, then by count
    topics: list[str]  # taxonomy order

    @property
    def symbols(self) -> list[str]:
        return [t.symbol for t in self.tickers]


def _lead(summary: str) -> str:
    """The first sentence (at most SUMMARY_LEAD_CHARS) of a summary."""
    head = summary[:SUMMARY_LEAD_CHARS]
    cut = head.find(". ", 40)
    return head if cut < 0 else head[: cut + 1]


class Tagger:
    """Tickers and topics by rules; build once (get_tagger) and call `tag` per article."""

    def __init__(self, registry_path: Path | None = None, taxonomy_path: Path | None = None) -> None:
        registry_path = (registry_path or REGISTRY_PATH).resolve()
        taxonomy_path = (taxonomy_path or TAXONOMY_PATH).resolve()
        assets = load_registry(registry_path)
        self.index = TickerIndex(assets)
        self.topics = load_taxonomy(taxonomy_path)
        kind_of = {a.symbol: a.kind for a in assets}
        self._assets = {a.symbol: a for a in assets}
        self._names = {sym: a.name for a in assets for sym in (a.symbol, *a.former_symbols)}
        unknown = sorted({s for t in self.topics for s in t.assets} - set(kind_of))
        if unknown:
            raise TaxonomyError(f"{taxonomy_path}: topics name assets missing from the registry: {unknown}")
        self.matcher = TopicMatcher(self.topics, kind_of)
        self.symbols = frozenset(kind_of)
        self.version = self._version(registry_path, taxonomy_path)

    @staticmethod
    def _version(registry_path: Path, taxonomy_path: Path) -> str:
        digest = hashlib.sha256()
        for path in (registry_path, taxonomy_path, *(_HERE / name for name in RULE_SOURCES)):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]

    def tag(self, title: str, summary: str | None = "", published_at: date | datetime | None = None) -> Tags:
        """Tickers and topics of a headline (and summary). With ``published_at``, tickers are the symbols of
        that day: a renamed asset gets its former symbol, an asset that did not trade yet none."""
        tags = self._tag(title, summary)
        if published_at is None or not tags.tickers:
            return tags
        hits = []
        for hit in tags.tickers:
            symbol = self._assets[hit.symbol].symbol_on(published_at) if hit.symbol in self._assets else hit.symbol
            if symbol is not None:
                hits.append(hit if symbol == hit.symbol else replace(hit, symbol=symbol))
        return replace(tags, tickers=hits)

    def name_of(self, symbol: str) -> str:
        """The asset's name for a current or former symbol ("MATIC" -> "Polygon"); the symbol when unknown."""
        return self._names.get(symbol, symbol)

    def _tag(self, title: str, summary: str | None) -> Tags:
        title = clean(title or "")
        title_toks = tokenize(title)
        summary = clean(summary) if summary else ""
        summary_toks = tokenize(summary) if summary else None
        summary_crypto = summary_toks is not None and not CRYPTO_WORDS.isdisjoint(summary_toks.lows)
        # App names that are not their token ("Uniswap goes live") still tell the topic (defi).
        title_apps: list[Mention] = []
        summary_apps: list[Mention] = []
        in_title = self.index.find(title_toks, extra_context=summary_crypto, apps=title_apps)
        in_summary = self.index.find(summary_toks, extra_context=bool(in_title), apps=summary_apps) if summary_toks else []

        fired = self.matcher.match(title_toks, in_title + title_apps if title_apps else in_title)
        if summary_toks:
            lead_toks = tokenize(_lead(summary))
            fired |= self.matcher.match(lead_toks, [m for m in in_summary + summary_apps if m[1] < len(lead_toks)])
        slugs = self.matcher.slugs
        topics = [slugs[i] for i in sorted(fired)] if fired else []
        return Tags(_rank(in_title, in_summary) if in_title or in_summary else [], topics)


def _rank(in_title: list[Mention], in_summary: list[Mention]) -> list[TickerHit]:
    if len(in_title) == 1 and not in_summary:  # the common case: one asset, named once in the title
        return [TickerHit(in_title[0][0], 1.0, True)]
    counts: dict[str, int] = {}  # insertion order = first mention, title first
    for symbol, _ in in_title:
        counts[symbol] = counts.get(symbol, 0) + 1
    for symbol, _ in in_summary:
        counts[symbol] = counts.get(symbol, 0) + 1
    titled = {symbol for symbol, _ in in_title}
    total = sum(counts.values())
    hits = [
        TickerHit(s, round((0.5 if s in titled else 0.0) + 0.5 * c / total, 4), s in titled)
        for s, c in counts.items()
    ]
    hits.sort(key=lambda h: -h.salience)  # stable: ties keep the order of first mention
    return hits


@lru_cache(maxsize=1)
def get_tagger() -> Tagger:
    """The tagger of the bundled registry and taxonomy, built once per process."""
    return Tagger()
