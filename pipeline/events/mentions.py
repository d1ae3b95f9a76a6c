"""Where a text names an asset: the symbol, the name and a few common aliases (``AssetFinder``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
        self._first = {k.split()[0] for k in ticker_of}

    def find(self, text: str) -> list[Mention]:
        tokens = list(_TOKEN.finditer(text))
        found: list[Mention] = []
        i = 0
        symbols, first = self._symbols, self._first
        while i < len(tokens):
            word = tokens[i].group(0)
            # Most words start no name: skip them without the full look-up (a third of derivation's time went here).
            if word.lstrip("$") not in symbols and word.lower() not in first:
                i += 1
                continue
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
