"""A learned second look at price levels the rules pass over.

The rules (``price.find_price``) need a forward-looking cue next to a level; headlines word such questions in
more ways than any list of cues ("Will $41 be the bounce-back zone for AVAX?", "Is $5,000 in sight?"). When the
rules derive nothing from an article, every dollar amount the rules' own filters let through (not a count,
holding or market cap; an asset of the article found for it; later, within the reference band) is a candidate,
and a logistic regression on the words around the level says whether the readers would ask about it. It is
trained on the development parts of the events sets only (``python -m pipeline.events.price_training``) and ships as
``data/price_model.json``; derivation only reads the weights (no scikit-learn at run time).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.events.mentions import Mention
from pipeline.events.numbers import find_amounts
from pipeline.events.price import (
    HOLD,
    LEVEL,
    NEGATED,
    PAST_GUARD,
    PREP_BEFORE,
    asset_for,
    could_be_price,
    prep_direction,
)
from pipeline.events.reference import DIRECTION_MARGIN, Reference
from pipeline.events.templates import PRICE, Found

MODEL_PATH = Path(__file__).resolve().with_name("data") / "price_model.json"
UNITS = 3  # the headline and the first two summary sentences
_WORD = re.compile(r"[A-Za-z]+|\?|!|%|\$")
_DOWN = re.compile(
    r"\b(?:drop|fall|crash|plunge|dip|decline|slide|sink|tumble|dump|lose|retrace|retest)(?:s|es|ing|ped|ping)?\b"
    r"|\b(?:correction|bounce-back|support|lows?|bottom|floor|bear(?:ish)?|breakdown|hold(?:s|ing)?)\b",
    re.I,
)
_UP = re.compile(
    r"\b(?:hit|reach|rall(?:y|ies)|surge|soar|climb|rise|jump|pump|break|top|flip|target|explode|skyrocket)(?:s|es|ing)?\b"
    r"|\b(?:breakout|eyes|eyeing|moon|resistance|ceiling|high|ath|bull(?:ish)?)\b",
    re.I,
)


@dataclass(frozen=True)
class Candidate:
    index: int  # which unit: 0 the headline, then summary sentences
    found: Found
    features: dict[str, float]


def direction(unit: str, start: int, end: int, reference_price: float | None, value: float) -> str | None:
    """"above" or "below": a preposition right before the level, else a support/resistance after it, else the
    one kind of move word before it, else where the level lies against the reference price; None when the words
    say nothing and the level is too near the reference price to tell (as for the rules: "headed to $150")."""
    left = unit[max(0, start - 45) : start]
    prep = PREP_BEFORE.search(left)
    if prep:
        return prep_direction(left, prep)
    level = LEVEL.match(unit[end:])
    if level:
        return "below" if level.group("level").lower() in ("support", "floor") else "above"
    down, up = _DOWN.search(left), _UP.search(left)
    if down and not up:
        return "below"
    if up and not down:
        return "above"
    if not reference_price:
        return None
    if value >= reference_price * DIRECTION_MARGIN:
        return "above"
    if value <= reference_price / DIRECTION_MARGIN:
        return "below"
    return None


def features(unit: str, index: int, start: int, end: int, ratio: float | None) -> dict[str, float]:
    """Words around the level (the level masked), a question mark, and the level against the reference price."""
    left = [w.lower() for w in _WORD.findall(unit[:start])]
    right = [w.lower() for w in _WORD.findall(unit[end:])]
    words = [*left, "LVL", *right]
    out = {f"w:{w}": 1.0 for w in words}
    out.update({f"b:{a}_{b}": 1.0 for a, b in zip(words, words[1:], strict=False)})
    for k in range(1, 4):
        if len(left) >= k:
            out[f"L{k}:{left[-k]}"] = 1.0
        if len(right) >= k:
            out[f"R{k}:{right[k - 1]}"] = 1.0
    out["title" if index == 0 else "summary"] = 1.0
    out["question"] = float("?" in unit)
    if ratio is not None and ratio > 0:
        r = math.log(ratio)
        out[f"ratio_bin:{round(r * 2)}"] = 1.0
        out["ratio"] = max(-3.0, min(3.0, r))
    return out


def candidates(units: list[str], mentions: list[list[Mention]], tickers: set[str], published: datetime,
               reference: Reference) -> list[Candidate]:
    """Every dollar amount of the first units that the rules' filters let through, with its asset (one of the
    article's tickers), a direction (None when the words and the reference price cannot tell) and its features. The reference band is checked by the caller (``refusal``)."""
    out = []
    for index, unit in enumerate(units[:UNITS]):
        found_here = mentions[index]
        for amount in find_amounts(unit):
            if not could_be_price(unit, amount):
                continue
            left = unit[: amount.start]
            # Where the rules look for a cue, these read the words before it; here the level's: a level denied
            # ("may never fall below $1"), a move that already failed or happened.
            if NEGATED.search(left[-60:]) or PAST_GUARD.search(left[-40:]):
                continue
            after = [m for m in found_here if m.start >= amount.end and m.start - amount.end <= 2]
            nominal = bool(after) and not unit[amount.end : after[0].start].strip()
            if nominal and not amount.currency and not re.match(r"\s*(?:price|target|level)", unit[after[0].end:], re.I):
                continue  # "700,000 BTC": a number of coins (as the rules read it)
            asset = asset_for(found_here, amount, after if nominal else [])
            if asset is None or asset not in tickers:
                continue
            price = reference.price_at(asset, published)
            if price and amount.value > price and HOLD.search(left):
                continue  # "Can XRP hold $3.20?" with XRP at $2.40: no floor to lose (as for the rules)
            # No direction (None) still makes a training row; derivation skips it.
            found = Found(kind=PRICE, ticker=asset, unit=unit, anchor=(amount.start, amount.end),
                          comparator=direction(unit, amount.start, amount.end, price, amount.value),
                          threshold=amount.value, currency="USD",
                          detail={"written": amount.text, "currency": amount.currency or "", "learned": "1"})
            ratio = amount.value / price if price else None
            out.append(Candidate(index, found, features(unit, index, amount.start, amount.end, ratio)))
    return out


@dataclass(frozen=True)
class PriceModel:
    weights: dict[str, float]
    bias: float
    threshold: float  # a candidate becomes a question at this probability or above
    about: dict[str, Any]

    def probability(self, feats: dict[str, float]) -> float:
        z = self.bias + sum(self.weights.get(k, 0.0) * v for k, v in feats.items())
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> PriceModel:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls({str(k): float(v) for k, v in data["weights"].items()}, float(data["bias"]),
                       float(data["threshold"]), dict(data.get("about") or {}))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"cannot read the price model at {path} ({exc}); it ships with the project: "
                             "rebuild it with `python -m pipeline.events.price_training`") from exc


@lru_cache(maxsize=1)
def default_model() -> PriceModel:
    return PriceModel.load()
