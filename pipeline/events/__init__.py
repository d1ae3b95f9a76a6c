"""Prediction events derived from the news: resolvable Yes/No questions with stable ``pevt_`` ids.

Pure logic (no dagster, no database): ``derive_events`` turns articles into ``EventCandidate`` objects; the
warehouse side (``warehouse.events.merge_events``) stores them. See docs/events.md.
"""

from pipeline.events.derive import OPTIONS, ArticleIn, EventCandidate, derive_article, derive_events
from pipeline.events.ids import ID_RE, event_id
from pipeline.events.templates import ETF, KINDS, LISTING, PRICE, UPGRADE

__all__ = [
    "ETF",
    "ID_RE",
    "KINDS",
    "LISTING",
    "OPTIONS",
    "PRICE",
    "UPGRADE",
    "ArticleIn",
    "EventCandidate",
    "derive_article",
    "derive_events",
    "event_id",
]
