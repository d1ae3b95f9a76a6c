"""Deriving events from the articles that changed only, with the memo of the rest (``warehouse.event_memo``).

``derive_article`` reads one article and the reference data; so the events of all articles are the memo's results
plus those of the articles whose inputs changed, unless the reference data changed. The ``fingerprint`` names it
as this process loaded it (the derivation code, the shipped reference table, the price model, the registry's
names and flags, the encoder's vocabulary, the time zone rules and the Python version, whose regular expressions
and calendar read the text): a new fingerprint derives every article again. The warehouse's
reference prices are compared row by row: a price added, changed or removed makes stale the articles naming its ticker
from the ticker's previous price day on (derivation reads the prices of an article's tickers: the latest on or
before its day and the next one after).
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import date, datetime

import duckdb

from pipeline.events.dates import zone_rules
from pipeline.events.derive import (
    LOADED_CODE,
    ArticleIn,
    AssetFinder,
    EventCandidate,
    app_tickers,
    derive_article,
    group_candidates,
    stablecoin_tickers,
)
from pipeline.events.learned import default_model
from pipeline.events.reference import Reference, default_reference
from pipeline.events.templates import english_words
from warehouse import event_memo
from warehouse.events import MergeReport, merge_events
from warehouse.prices import load_prices

# The memo selects these columns for ArticleIn(**row) and hashes them: a field added to one and not the other
# would leave its edits unseen.
if event_memo.COLUMNS != tuple(f.name for f in fields(ArticleIn)):
    raise RuntimeError(f"warehouse.event_memo.COLUMNS {event_memo.COLUMNS} are not ArticleIn's fields")


def fingerprint(names: Mapping[str, str]) -> str:
    """What every article's derivation depends on besides the article and the warehouse's prices, as loaded."""
    digest = hashlib.sha256()
    for name, source in LOADED_CODE.items():
        digest.update(name.encode() + b"\0" + source + b"\0")
    model = default_model()
    digest.update(repr((sorted(model.weights.items()), model.bias, model.threshold)).encode())
    digest.update(default_reference().digest().encode())
    digest.update(json.dumps([sorted(names.items()), sorted(app_tickers()), sorted(stablecoin_tickers())]).encode())
    digest.update("\n".join(sorted(english_words())).encode())
    digest.update(f"{zone_rules()} {platform.python_version()}".encode())
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


@dataclass(frozen=True)
class Derivation:
    candidates: list[EventCandidate]  # the events of every article
    refused: dict[str, str]  # event id -> why a check refused that question (the oldest article's reason)
    derived: int  # articles derived in this run
    why: str  # why those articles were derived ("" when none was)


def repriced(changes: list[tuple[str, date]], reference: Reference) -> list[tuple[str, datetime]]:
    """Per ticker with a changed price, the earliest publication time whose derivation may read it: the ticker's
    previous price day (the latest before the change), or the beginning when it has none."""
    since: dict[str, datetime] = {}
    for ticker, day in changes:
        previous = reference.previous_price_day(ticker, day)
        at = datetime.combine(previous, datetime.min.time()) if previous else datetime.min
        since[ticker] = min(at, since.get(ticker, at))
    return sorted(since.items())


def derive_changed(con: duckdb.DuckDBPyConnection, names: Mapping[str, str], full: bool = False) -> Derivation:
    """Every article's events, deriving only the articles the memo has no current result for (see the module's
    doc), or every article with ``full``. The memo is brought up to date first, in its own transaction (a crash
    after it leaves a memo the next run merges from), with the warehouse's prices this derivation read."""
    prices = load_prices(con)
    reference = default_reference().with_prices(prices)
    current = fingerprint(names)
    first = not event_memo.has_results(con, current)
    changed = [] if full or first else repriced(event_memo.changed_prices(con), reference)
    finder = AssetFinder(names, None)
    rows = []
    for r in event_memo.stale_articles(con, current, changed, every=full):
        row = dict(zip(event_memo.COLUMNS, r[:-1], strict=True))  # COLUMNS are ArticleIn's fields (checked)
        article = ArticleIn(**{**row, "tickers": tuple(row["tickers"] or ()), "topics": tuple(row["topics"] or ())})
        own: dict[str, str] = {}
        candidate = derive_article(article, names, finder, reference, own)
        rows.append((article.id, r[-1], to_json(candidate) if candidate else None,
                     json.dumps(own, sort_keys=True) if own else None))
    event_memo.store(con, current, rows, prices, replace_all=full)
    candidates: list[EventCandidate] = []
    refused: dict[str, str] = {}
    for candidate_json, refused_json in event_memo.results(con, current):
        if candidate_json:
            candidates.append(from_json(candidate_json))
        for key, reason in json.loads(refused_json or "{}").items():
            refused.setdefault(key, reason)  # oldest article first: its reason is kept
    why = ("" if not rows else "asked to derive every article" if full
           else "no results under this code and reference data yet (a first run, or new rules or data)" if first
           else f"new or changed articles, and those naming {len(changed)} tickers whose prices changed" if changed
           else "new or changed articles")
    return Derivation(group_candidates(candidates), refused, len(rows), why)


def derive_and_merge(con: duckdb.DuckDBPyConnection, names: Mapping[str, str], now: datetime,
                     full: bool = False) -> tuple[Derivation, MergeReport]:
    """The ``prediction_events`` step: derive (``derive_changed``) and merge every article's events into the
    warehouse; the candidates cover every article, so a stored event not among them is withdrawn (kept, with
    the reason)."""
    derivation = derive_changed(con, names, full)
    return derivation, merge_events(con, derivation.candidates, now, complete=True, refused=derivation.refused)
