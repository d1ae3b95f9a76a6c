"""The development/test split of the project's own labelled news sets (events_unseen.jsonl, sentiment_news_*.csv).

Split by publisher and by date: every item of ``TEST_PUBLISHERS`` and every item published on or after
``TEST_FROM`` is test; the rest is development. Nobody reads the test part while changing rules or recipes.
Fixed before any rule or model was changed against these sets.
"""

from __future__ import annotations

from datetime import datetime

TEST_PUBLISHERS = frozenset({
    "ambcrypto.com", "beincrypto.com", "bitcoinist.com", "coingape.com", "coinjournal.net", "coinpedia.org",
    "cryptonews.com", "cryptoslate.com", "dailyhodl.com", "newsbtc.com",
})
TEST_FROM = datetime(2025, 5, 1)


def split_of(domain: str, published_at: datetime) -> str:
    return "test" if domain in TEST_PUBLISHERS or published_at >= TEST_FROM else "dev"
