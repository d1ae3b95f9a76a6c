"""Money amounts in headlines: parsing, what is not an amount, and how thresholds are written."""

from __future__ import annotations

import pytest

from pipeline.events.numbers import canonical_number, find_amounts, format_money, parse_amount


@pytest.mark.parametrize(
    ("text", "value", "currency"),
    [
        ("$100K", 100_000, "USD"),
        ("$100k", 100_000, "USD"),
        ("100,000", 100_000, None),
        ("$100,000", 100_000, "USD"),
        ("$1.2 billion", 1_200_000_000, "USD"),
        ("$1.2B", 1_200_000_000, "USD"),
        ("$1.2bn", 1_200_000_000, "USD"),
        ("$3.9Billion", 3_900_000_000, "USD"),
        ("5k", 5_000, None),
        ("$22.5K", 22_500, "USD"),
        ("81.6k", 81_600, None),
        ("$0.0000142", 0.0000142, "USD"),
        ("$0.30", 0.30, "USD"),
        ("US$2.35", 2.35, "USD"),
        ("USD 100", 100, "USD"),
        ("100 USD", 100, "USD"),
        ("90 Cents", 0.90, "USD"),
        ("0.88 cents", 0.0088, "USD"),
        ("€90k", 90_000, "EUR"),
        ("$5m", 5_000_000, "USD"),
        ("20M", 20_000_000, None),
        ("$2 trillion", 2_000_000_000_000, "USD"),
        ("$100K+", 100_000, "USD"),
    ],
)
def test_parse_amount(text: str, value: float, currency: str | None) -> None:
    amount = parse_amount(text)
    assert amount is not None, text
    assert amount.value == pytest.approx(value, rel=1e-12)
    assert amount.currency == currency


@pytest.mark.parametrize(
    "text",
    ["2026", "150", "5%", "5m", "1,00,000", "100.000", "Q1", "EIP-8363", "", "$", "1-in-82-year", "2-Month"],
)
def test_not_an_amount(text: str) -> None:
    assert parse_amount(text) is None
    assert find_amounts(f"Bitcoin {text} rally") == []


def test_find_amounts_positions_ranges_and_punctuation() -> None:
    text = "ETH fell to $1,373. Bets on a move between $4,000-$4,500 and 5k."
    found = find_amounts(text)
    assert [a.value for a in found] == [1373, 4000, 4500, 5000]
    assert [text[a.start : a.end] for a in found] == ["$1,373", "$4,000", "$4,500", "5k"]


def test_years_and_percentages_next_to_amounts_stay_out() -> None:
    found = find_amounts("Bitcoin could rally 40% to $50,000 in 2026")
    assert [(a.value, a.currency) for a in found] == [(50_000, "USD")]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (100_000, "$100,000"),
        (150, "$150"),
        (2.35, "$2.35"),
        (0.3, "$0.30"),
        (1, "$1"),
        (22_500.5, "$22,500.50"),
        (0.0000142, "$0.0000142"),
        (0.0001, "$0.0001"),
        (0.0000021 * 50, "$0.000105"),  # a price band's bound: a product with binary noise in it
        (1.15 * 3, "$3.45"),
    ],
)
def test_format_money(value: float, written: str) -> None:
    assert format_money(value) == written


def test_format_money_other_currency() -> None:
    assert format_money(90_000, "EUR") == "€90,000"
    assert format_money(5, "CHF") == "5 CHF"


@pytest.mark.parametrize(
    ("value", "text"),
    [(100_000.0, "100000"), (1e5, "100000"), (0.5, "0.5"), (1.2e9, "1200000000"), (1.234e-5, "0.00001234")],
)
def test_canonical_number(value: float, text: str) -> None:
    assert canonical_number(value) == text
