"""Money amounts in headlines: "$100K", "100,000", "$1.2 billion", "5k", "US$2.35", "90 cents".

Only spans that are unmistakably amounts are returned: a bare number needs a currency sign, a magnitude
suffix (k, M, bn, million, ...) or thousands separators, so years ("2026"), counts ("20M users" is still an
amount here; the templates reject it by what follows) and percentages ("5%") stay out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

_MAGNITUDES = {
    "k": 1e3, "thousand": 1e3,
    "m": 1e6, "mn": 1e6, "mln": 1e6, "million": 1e6,
    "b": 1e9, "bn": 1e9, "bln": 1e9, "billion": 1e9,
    "t": 1e12, "tn": 1e12, "trillion": 1e12,
}
_PREFIX_CURRENCY = {"$": "USD", "us$": "USD", "usd": "USD", "€": "EUR", "eur": "EUR", "£": "GBP", "gbp": "GBP"}

# A number: "100,000" | "100,000.50" | "1.2" | "100" | ".5" is not accepted (too easily a version number).
_NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
_AMOUNT_RE = re.compile(
    r"(?<![\w.,$€£])"
    r"(?P<cur>US\$|\$|€|£|(?:USD|EUR|GBP)\s?)?"
    rf"(?P<num>{_NUM})"
    r"(?:\s?(?P<mag>thousand|million|billion|trillion|mln|bln|mn|bn|tn|[kKmMbBtT])(?![A-Za-z]))?"
    r"(?P<plus>\+)?"
    r"(?:\s?(?P<post>USD|dollars?|cents?|euros?)(?![A-Za-z]))?"
    r"(?![\d%])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Amount:
    """One amount found in a text: its value in units of ``currency`` (None when no currency is written)."""

    value: float
    currency: str | None
    start: int
    end: int
    text: str


def find_amounts(text: str) -> list[Amount]:
    """Every amount in ``text``, left to right."""
    out = []
    for m in _AMOUNT_RE.finditer(text):
        amount = _amount(m)
        if amount is not None:
            out.append(amount)
    return out


def parse_amount(text: str) -> Amount | None:
    """The amount when ``text`` (stripped) is exactly one amount, else None: ``parse_amount("$1.2 billion")``."""
    stripped = text.strip()
    m = _AMOUNT_RE.fullmatch(stripped)
    return _amount(m) if m else None


def _amount(m: re.Match[str]) -> Amount | None:
    raw_num = m.group("num")
    cur = (m.group("cur") or "").strip().lower()
    mag = (m.group("mag") or "").lower()
    post = (m.group("post") or "").lower()
    grouped = "," in raw_num
    if not (cur or mag or grouped or post):
        return None  # "2026", "150 days": a bare number is not an amount
    if m.group("mag") == "m" and not cur:
        return None  # a lower-case "5m" without a currency is minutes or metres more often than millions
    value = float(Decimal(raw_num.replace(",", "")))
    value *= _MAGNITUDES.get(mag, 1.0)
    currency = _PREFIX_CURRENCY.get(cur)
    if post.startswith("cent"):
        value /= 100.0
        currency = currency or "USD"
    elif post in ("usd", "dollar", "dollars"):
        currency = currency or "USD"
    elif post.startswith("euro"):
        currency = currency or "EUR"
    value = _clean(value)
    return Amount(value=value, currency=currency, start=m.start(), end=m.end(), text=m.group(0))


def _clean(value: float) -> float:
    """Drop binary noise from scaling: 1.2 * 1e9 -> 1200000000.0, 0.88 / 100 -> 0.0088."""
    return float(f"{value:.12g}")


def canonical_number(value: float) -> str:
    """A stable text form for ids: 100000.0 -> "100000", 0.5 -> "0.5", 1.2e9 -> "1200000000"."""
    d = Decimal(repr(float(value))).normalize()
    text = format(d, "f")
    return text if text != "-0" else "0"


def format_money(value: float, currency: str = "USD") -> str:
    """How a threshold is written in a question: $100,000 / $150 / $2.35 / $0.50 / $0.00001234."""
    sign = {"USD": "$", "EUR": "€", "GBP": "£"}.get(currency, "")
    value = _clean(value)  # a band's bound is a product: 0.0000021 * 50 must read $0.000105
    if value >= 1 and float(value).is_integer():
        body = f"{int(value):,}"
    elif value >= 1:
        body = f"{value:,.2f}" if round(value, 2) == value else f"{value:,.6g}"
    elif value >= 0.01 and round(value, 2) == value:
        body = f"{value:.2f}"
    else:
        body = canonical_number(value)
    return f"{sign}{body}" if sign else f"{body} {currency}"
