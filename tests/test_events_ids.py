"""Event ids: format, determinism, and which fields change them."""

from __future__ import annotations

from datetime import datetime

import pytest

from pipeline.events import ArticleIn, derive_events, event_id
from pipeline.events.ids import ID_RE, event_key

END_2026 = datetime(2026, 12, 31)


def test_format() -> None:
    for args in [("BTC", "price_threshold", "above", 100_000.0, END_2026), ("SOL", "listing", None, None, END_2026)]:
        assert ID_RE.fullmatch(event_id(*args))
        assert len(event_id(*args)) == len("pevt_") + 20


def test_pinned_value_never_changes() -> None:
    # Stored ids and every API consumer depend on this: changing the scheme needs a migration.
    assert event_id("BTC", "price_threshold", "above", 100_000.0, END_2026) == "pevt_uU4IoF58t4qqTLDiMFZ1"
    assert event_id("SOL", "listing", None, None, datetime(2026, 3, 19), "Binance") == "pevt_tFDBypENHfdSxkxtn4X8"


def test_same_definition_same_id() -> None:
    a = event_id("BTC", "price_threshold", "above", 100_000.0, END_2026)
    assert a == event_id("btc ", "Price_Threshold", "ABOVE", 100_000, END_2026)
    assert a == event_id("BTC", "price_threshold", "above", 1e5, END_2026)


@pytest.mark.parametrize(
    "changed",
    [
        ("ETH", "price_threshold", "above", 100_000.0, END_2026, None),
        ("BTC", "etf_decision", "above", 100_000.0, END_2026, None),
        ("BTC", "price_threshold", "below", 100_000.0, END_2026, None),
        ("BTC", "price_threshold", "above", 100_001.0, END_2026, None),
        ("BTC", "price_threshold", "above", 100_000.0, datetime(2026, 12, 30), None),
        ("BTC", "price_threshold", "above", 100_000.0, datetime(2026, 12, 31, 14, 0), None),
        ("BTC", "price_threshold", "above", 100_000.0, END_2026, "Binance"),
    ],
)
def test_each_defining_field_changes_the_id(changed: tuple) -> None:
    base = event_id("BTC", "price_threshold", "above", 100_000.0, END_2026)
    assert event_id(*changed) != base


def test_subject_is_compared_by_slug() -> None:
    assert event_key("ETH", "upgrade_or_launch", None, None, END_2026, "Pectra Upgrade").endswith("|pectra-upgrade")
    assert event_id("ETH", "upgrade_or_launch", None, None, END_2026, "Node 11") == event_id(
        "ETH", "upgrade_or_launch", None, None, END_2026, "node-11"
    )


def test_missing_asset_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs an asset and a kind"):
        event_id("", "price_threshold", "above", 1.0, END_2026)


def test_edited_article_keeps_its_event_id() -> None:
    names = {"BTC": "Bitcoin"}
    published = datetime(2026, 11, 4, 16, 45)
    before = ArticleIn("a1", "Bitcoin Eyes $100K as Midterm Results Lift Risk Appetite", "Bitcoin climbed to $97,300.",
                       "https://x/1", None, "Coin Ledger", published, ("BTC",), ())
    after = ArticleIn("a1", "UPDATED: Bitcoin eyes $100K as midterm results lift risk appetite again",
                      "Bitcoin climbed to $97,800, its highest level in two weeks.", "https://x/1?v=2", None,
                      "Coin Ledger", published, ("BTC",), ())
    (e1,), (e2,) = derive_events([before], names), derive_events([after], names)
    assert e1.id == e2.id
    assert e1.event_title == e2.event_title
    assert e1.event_description != e2.event_description  # the context follows the article
