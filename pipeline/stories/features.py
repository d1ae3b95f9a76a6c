"""What the grouping compares: the encoder's embedding of the title and the start of the summary, the tickers,
and the numbers an article states (amounts, percentages, prices)."""

from __future__ import annotations

import re
from typing import Any

SUMMARY_CHARS = 300  # the lede: later sentences drift into background that many unrelated stories share
MAX_TOKENS = 96
# Sentence by sentence too (the title and the summary's first sentences): two reports of one news often put it in
# different places, a headline in one being the second sentence of the other.
SENTENCES = 5
MIN_SENTENCE_CHARS = 25
ENCODER_VERSION = f"all-MiniLM-L6-v2:mean-l2:title+{SUMMARY_CHARS}:{MAX_TOKENS}:sentences{SENTENCES}"

_NUM = re.compile(r"(?<![\w.])\$?(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*(%|percent|k\b|m\b|b\b|million|billion|trillion)?",
                  re.IGNORECASE)
_SCALE = {"k": 1e3, "m": 1e6, "million": 1e6, "b": 1e9, "billion": 1e9, "trillion": 1e12}


def story_text(title: str, summary: str | None) -> str:
    return f"{title.strip()}. {(summary or '').strip()[:SUMMARY_CHARS]}"


_TAG = re.compile(r"<[^>]+>")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(title: str, summary: str | None) -> list[str]:
    """The title, then the summary's first sentences (long enough to say something), ``SENTENCES`` at most."""
    out = [title.strip()]
    for part in _SENTENCE_END.split(_TAG.sub(" ", summary or "").strip()):
        if len(out) >= SENTENCES:
            break
        if len(part.strip()) > MIN_SENTENCE_CHARS:
            out.append(part.strip())
    return out


def numbers(text: str) -> frozenset[str]:
    """Salient numbers, normalised (``$1.2 billion`` and ``1,200 million`` are one number): small counts and
    years are left out, they say little about which news it is."""
    out = set()
    for m in _NUM.finditer(text):
        raw, unit = m.group(1), (m.group(2) or "").lower()
        value = float(raw.replace(",", ""))
        if unit in ("%", "percent"):
            out.add(f"{value:g}%")
            continue
        value *= _SCALE.get(unit, 1.0)
        if value < 100 or (1990 <= value <= 2035 and not unit and "," not in raw):
            continue
        out.add(f"{float(f'{value:.3g}'):g}")
    return frozenset(out)


_WORD = re.compile(r"[a-z0-9]+")
_NAME = re.compile(r"\b[A-Z][A-Za-z0-9]+\b")
_STOP = frozenset("the a an of to in on for and as at by with is are be from its it this that after over into new "
                  "amid says will".split())
# Capitalised words every crypto headline has: as "names" they say nothing about which news it is.
_COMMON_NAMES = frozenset("the a an in on for and as at by with is are be from its it this that after over into new "
                          "amid says will price crypto bitcoin btc ethereum eth market here what why how could to of "
                          "top".split())


def words(text: str) -> frozenset[str]:
    """Content words (lower case, three characters or more)."""
    return frozenset(w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP)


def names(text: str) -> frozenset[str]:
    """Capitalised words (people, firms, products), lower-cased, without the ones every crypto story has."""
    return frozenset(w.lower() for w in _NAME.findall(text) if w.lower() not in _COMMON_NAMES)


# A generic price-analysis or prediction piece: outlets publish one per asset per day, and two of them on one
# asset share tickers, numbers and wording without reporting the same news.
_PRICE_PIECE = re.compile(
    r"price (prediction|analysis|forecast|outlook)|\bcan \w+ (reach|hit|break|surge|rally|climb)|"
    r"\b(support|resistance|rsi|macd|fibonacci|breakout|bullish|bearish|technical|chart|pattern|"
    r"consolidat\w*|oversold|overbought|moving average|trendline|key levels?|price action)\b", re.IGNORECASE)


def price_piece(title: str, lede: str) -> bool:
    """A generic price-analysis / prediction piece (technical words, "price prediction", "can X reach")."""
    return bool(_PRICE_PIECE.search(title)) or len(_PRICE_PIECE.findall(lede)) >= 2


def embed(texts: list[str]) -> Any:
    """Embeddings (float32, L2-normalised rows) of ``story_text`` strings with the packaged encoder."""
    from models.sentiment.evaluate import frozen_embeddings

    return frozen_embeddings(texts, max_tokens=MAX_TOKENS).astype("float32")


def embed_sentences(per_item: list[list[str]], embed_fn: Any = embed) -> list[Any]:
    """One matrix (sentences x dimensions) per item, from one call of the encoder over all their sentences."""
    import numpy as np

    flat = [s for item in per_item for s in item]
    vecs = np.asarray(embed_fn(flat), dtype=np.float32) if flat else np.zeros((0, 0), dtype=np.float32)
    out, k = [], 0
    for item in per_item:
        out.append(vecs[k:k + len(item)])
        k += len(item)
    return out
