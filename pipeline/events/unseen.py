"""The unseen-news evaluation set (models/eval/events_unseen.jsonl): majority labels, reader agreement, and
precision and recall per split.

Every item is a real news item (headline and summary from a public feed snapshot; ``provenance`` names the
repository, commit and path) read by three blind readers who followed models/eval/EVENTS_GUIDELINE.md and
never saw what derivation makes of it. An event is gold when at least two readers wrote the same question
(asset, kind, comparator, threshold); its date is the one at least two readers gave, else any date a
reader gave (recorded as ``date_ambiguous``). An item should give an event when two readers say so.

Split (``split_of``): items of the ``TEST_PUBLISHERS``, and items of any publisher published on or after
``TEST_FROM``, are the test part; nobody reads them while changing rules. The rest is the development part.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from models.scoring import ratio
from models.splits import split_of

PROJECT = Path(__file__).resolve().parents[2]
UNSEEN_PATH = PROJECT / "models" / "eval" / "events_unseen.jsonl"
# Development items (by the split rule) labelled after the rules were last changed on dev: part "val", scored
# before anyone reads them, so its first figures are out of sample for the rules as they were.
VALIDATION_PATH = PROJECT / "models" / "eval" / "events_validation.jsonl"
# Development headlines of the archive (no summaries), read for events by three readers after the rules were last
# changed: part "archive", a second out-of-sample check of precision on news the rules were not written from.
ARCHIVE_PATH = PROJECT / "models" / "eval" / "events_archive.jsonl"
# A second batch of archive headlines (the rest of sentiment_archive_dev.csv), read after the learned price model
# was committed: part "archive2", its first scoring out of sample for the rules and the model alike.
ARCHIVE2_PATH = PROJECT / "models" / "eval" / "events_archive2.jsonl"
# A third batch: the 8,000 headlines of sentiment_archive2_dev.csv, read after the checks taken from archive2.
ARCHIVE3_PATH = PROJECT / "models" / "eval" / "events_archive3.jsonl"
# A fourth batch: the rest of the archive's development headlines (7,514), read on 2026-11-26 after archive3's checks
# were written and before they were committed: scored first for the rules before and after those checks.
ARCHIVE4_PATH = PROJECT / "models" / "eval" / "events_archive4.jsonl"
DEV_PARTS = ("val", "archive", "archive2", "archive3", "archive4")  # parts that hold development items only, labelled later
PART_PATHS = {"val": VALIDATION_PATH, "archive": ARCHIVE_PATH, "archive2": ARCHIVE2_PATH, "archive3": ARCHIVE3_PATH,
              "archive4": ARCHIVE4_PATH}
FOUR_KINDS = ("price_threshold", "etf_decision", "listing", "upgrade_or_launch")
Question = tuple[str, str, str | None, float | None]  # asset, kind, comparator, threshold


@dataclass(frozen=True)
class Gold:
    asset: str
    kind: str
    comparator: str | None
    threshold: float | None
    dates: tuple[str, ...]  # the majority date, or every date a reader gave when there is none
    date_ambiguous: bool
    subject: str | None


@dataclass(frozen=True)
class Item:
    key: str
    publisher: str
    domain: str
    published_at: datetime
    title: str
    summary: str
    split: str
    readers: tuple[dict[str, Any], ...]
    gold: tuple[Gold, ...]
    should_derive: bool
    out_of_scope: bool


def _question(e: Mapping[str, Any]) -> Question:
    threshold = e.get("threshold")
    return (str(e.get("asset") or "").upper(), str(e.get("kind") or ""), e.get("comparator") or None,
            None if threshold in (None, "") else float(threshold))


def majority(readers: Iterable[Mapping[str, Any]]) -> tuple[tuple[Gold, ...], bool, bool]:
    """(gold events, should derive, out of scope) from the readers' labels."""
    readers = list(readers)
    need = len(readers) // 2 + 1
    asked: Counter[Question] = Counter()
    dates: dict[Question, Counter[str]] = {}
    subjects: dict[Question, Counter[str]] = {}
    for r in readers:
        seen = set()
        for e in r.get("events") or []:
            q = _question(e)
            if q in seen:
                continue
            seen.add(q)
            asked[q] += 1
            dates.setdefault(q, Counter())[str(e.get("date"))] += 1
            if e.get("subject"):
                subjects.setdefault(q, Counter())[str(e["subject"])] += 1
    gold = []
    for q, n in asked.items():
        if n < need:
            continue
        top, votes = dates[q].most_common(1)[0]
        ambiguous = votes < need
        gold.append(Gold(*q, dates=tuple(sorted(dates[q])) if ambiguous else (top,), date_ambiguous=ambiguous,
                         subject=subjects[q].most_common(1)[0][0] if q in subjects else None))
    yes = sum(1 for r in readers if r.get("events"))
    oos = sum(1 for r in readers if r.get("out_of_scope"))
    return tuple(gold), yes >= need, oos >= need


def load_unseen(path: Path = UNSEEN_PATH) -> list[Item]:
    if not path.exists():
        raise FileNotFoundError(f"no unseen-news set at {path}: it ships with the project")
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            published = datetime.fromisoformat(d["published_at"])
            gold, should, oos = majority(d["readers"])
            items.append(Item(d["key"], d["publisher"], d["domain"], published, d["title"], d.get("summary") or "",
                              d["split"], tuple(d["readers"]), gold, should, oos))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: malformed line ({exc})") from exc
        rule = split_of(items[-1].domain, published)
        if items[-1].split != rule and not (items[-1].split in DEV_PARTS and rule == "dev"):
            raise ValueError(f"{path}:{n}: split {items[-1].split!r} disagrees with the rule (split_of)")
    return items


def development_items(parts: tuple[str, ...] = DEV_PARTS) -> list[Item]:
    """Development items with readers' labels: the dev part of the unseen set and the later ``parts``."""
    items = [it for it in load_unseen(UNSEEN_PATH) if it.split == "dev"]
    for part in parts:
        if PART_PATHS[part].exists():
            items += load_unseen(PART_PATHS[part])
    return items


def agreement(items: list[Item]) -> dict[str, Any]:
    """How far the three readers agree: on "does it give an event" (Fleiss' kappa, unanimity) and, where a
    majority says yes, on the exact question."""
    n_items = len(items)
    if not n_items:
        return {}
    k = len(items[0].readers)
    p_yes_total = 0.0
    p_bar = 0.0
    unanimous = 0
    for it in items:
        yes = sum(1 for r in it.readers if r.get("events"))
        p_yes_total += yes
        p_bar += (yes * (yes - 1) + (k - yes) * (k - yes - 1)) / (k * (k - 1))
        unanimous += yes in (0, k)
    p_bar /= n_items
    p = p_yes_total / (n_items * k)
    p_e = p * p + (1 - p) * (1 - p)
    kappa = (p_bar - p_e) / (1 - p_e) if p_e < 1 else 1.0
    majority_yes = [it for it in items if it.should_derive]
    same_question = sum(
        1 for it in majority_yes
        if len({frozenset(_question(e) for e in r.get("events") or []) for r in it.readers}) == 1
    )
    return {
        "items": n_items,
        "readers_per_item": k,
        "event_or_not_fleiss_kappa": round(kappa, 4),
        "event_or_not_unanimous": round(unanimous / n_items, 4),
        "majority_says_event": len(majority_yes),
        "of_which_all_readers_wrote_the_same_questions": same_question,
        "gold_events": sum(len(it.gold) for it in items),
        "gold_with_ambiguous_date": sum(1 for it in items for g in it.gold if g.date_ambiguous),
    }


def matches(gold: Gold, asset: str, kind: str, comparator: str | None, threshold: float | None, day: str) -> bool:
    same_threshold = (gold.threshold is None and threshold is None) or (
        gold.threshold is not None and threshold is not None and math.isclose(gold.threshold, threshold, rel_tol=1e-9)
    )
    return (gold.asset, gold.kind, gold.comparator) == (asset, kind, comparator) and same_threshold and day in gold.dates


# What derivation ships: the four kinds and token unlocks (scheduled votes are labelled but not derived yet).
SHIPPED_KINDS = (*FOUR_KINDS, "token_unlock")


def score(items: list[Item], derive: Callable[[Item], Any], kinds: tuple[str, ...] = SHIPPED_KINDS) -> dict[str, Any]:
    """Precision and recall of ``derive`` (item -> EventCandidate or None) over ``items``, by kind."""
    by_kind = {k: {"gold": 0, "derived": 0, "correct": 0} for k in (*kinds, "all")}
    errors = []
    for it in items:
        event = derive(it)
        golds = [g for g in it.gold if g.kind in kinds]
        if golds:
            by_kind[golds[0].kind]["gold"] += 1
            by_kind["all"]["gold"] += 1
        if event is None:
            if golds:
                errors.append(_error(it, None, "missed"))
            continue
        day = event.date.strftime("%Y-%m-%d")
        ok = any(matches(g, event.asset, event.kind, event.comparator, event.threshold, day) for g in golds)
        bucket = by_kind.setdefault(event.kind, {"gold": 0, "derived": 0, "correct": 0})
        bucket["derived"] += 1
        by_kind["all"]["derived"] += 1
        if ok:
            bucket["correct"] += 1
            by_kind["all"]["correct"] += 1
        else:
            errors.append(_error(it, event, "wrong question" if golds else "derived, but the readers saw no event"))

    for c in by_kind.values():
        c["precision"] = ratio(c["correct"], c["derived"])
        c["recall"] = ratio(c["correct"], c["gold"])
    return {"articles": len(items), **by_kind.pop("all"), "by_kind": by_kind, "errors": errors,
            "publishers": dict(Counter(it.domain for it in items).most_common())}


def _error(it: Item, event: Any, why: str) -> dict[str, Any]:
    return {
        "key": it.key, "title": it.title, "published_at": it.published_at.isoformat(), "why": why,
        "gold": [f"{g.asset} {g.kind} {g.comparator or ''} {g.threshold or ''} {'|'.join(g.dates)}".replace("  ", " ")
                 for g in it.gold],
        "derived": None if event is None else event.event_title,
    }
