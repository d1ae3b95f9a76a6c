"""Tagging articles with tickers and topics (rules over a curated registry; see docs/tagging.md)."""

from models.tagging.registry import Asset, Company, RegistryError, load_companies, load_registry
from models.tagging.tagger import Tagger, Tags, TickerHit, get_tagger
from models.tagging.topics import TaxonomyError, topic_definitions

TOPICS: dict[str, str] = topic_definitions()  # slug -> one-line definition

__all__ = [
    "TOPICS",
    "Asset",
    "Company",
    "RegistryError",
    "Tagger",
    "Tags",
    "TaxonomyError",
    "TickerHit",
    "get_tagger",
    "load_companies",
    "load_registry",
]
