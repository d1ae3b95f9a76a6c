"""Measure event derivation against the hand-labelled articles in models/eval/events.jsonl.

    .venv/bin/python -m pipeline.events.evaluate [--json] [--errors]
    .venv/bin/python -m pipeline.events.evaluate --cryptolin [--json]
    .venv/bin/python -m pipeline.events.evaluate --split dev|test|all [--json] [--errors]

Each line of the set is one article (title, summary, publication time) with a hand label: should an event
be derived, and if so its asset, kind, comparator, threshold and resolution date. Tickers come from the
project's tagger (``models.tagging``), as in the pipeline. An article's derived event counts as correct only
when every labelled field matches; precision = correct / derived, recall = correct / labelled positives.

The rules were written with that set in view, so its figures are in-sample. ``--cryptolin`` runs the rules on
2,146 real headlines they were not written from (CryptoLin, read from ../shared) and scores every derived
event against a hand judgment (models/eval/events_cryptolin.jsonl): precision only, as most are unlabelled.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from models.scoring import ratio
from models.tagging import get_tagger, load_registry
from pipeline.events.derive import ArticleIn, EventCandidate, derive_article, derive_events
from pipeline.events.mentions import AssetFinder
from pipeline.events.templates import KINDS

PROJECT = Path(__file__).resolve().parents[2]
EVAL_PATH = PROJECT / "models" / "eval" / "events.jsonl"
# Unseen headlines: CryptoLin (../shared/data/sentiment/cryptolin/train.csv, 2,146 real crypto headlines, read
# in place; models.sentiment.data.cryptolin_csv). Only the events derived from it are judged by hand, by
# CryptoLin id, in this file.
CRYPTOLIN_JUDGED = PROJECT / "models" / "eval" / "events_cryptolin.jsonl"
FIELDS = ("asset", "kind", "comparator", "threshold", "date")



@dataclass(frozen=True)
class Row:
    key: str
    origin: str
    title: str
    summary: str
    source_name: str
    published_at: datetime
    label: dict[str, Any]

    @property
    def positive(self) -> bool:
        return bool(self.label.get("derive"))


def load_rows(path: Path = EVAL_PATH) -> list[Row]:
    if not path.exists():
        raise FileNotFoundError(f"no labelled set at {path}: it ships with the project (models/eval/events.jsonl)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            rows.append(Row(d["key"], d["origin"], d["title"], d.get("summary") or "", d.get("source_name") or "",
                            datetime.fromisoformat(d["published_at"]), d["label"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: malformed line ({exc}); each line needs key, origin, title, "
                             "published_at and label") from exc
    return rows


Tag = Callable[[str, str, datetime | None], tuple[tuple[str, ...], tuple[str, ...]]]


def eval_tagging() -> tuple[Tag, Mapping[str, str], str]:
    """(tag function, ticker -> name, where tickers came from). Tickers are those of the article's date, as the
    pipeline tags them (a 2024 "Polygon" is MATIC, not POL)."""
    tagger = get_tagger()

    def tag(title: str, summary: str, at: datetime | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        tags = tagger.tag(title, summary, at)
        return tuple(tags.symbols), tuple(tags.topics)

    return tag, {a.symbol: a.name for a in load_registry()}, f"models.tagging tagger {tagger.version}"


def _matches(label: Mapping[str, Any], event: EventCandidate) -> list[str]:
    """The labelled fields the derived event gets wrong."""
    wrong = []
    for field in FIELDS:
        want = label.get(field)
        if field == "threshold":
            got = event.threshold
            ok = (want is None and got is None) or (
                want is not None and got is not None and math.isclose(float(want), got, rel_tol=1e-9)
            )
        elif field == "date":
            got = event.date.strftime("%Y-%m-%d") if not (event.date.hour or event.date.minute) else \
                event.date.isoformat()
            ok = want == got
        else:
            got = getattr(event, field)
            ok = want == got
        if not ok:
            wrong.append(f"{field}: want {want!r}, got {got!r}")
    return wrong


def evaluate(path: Path = EVAL_PATH, learned: bool = True) -> dict[str, Any]:
    rows = load_rows(path)
    tag, names, tickers_from = eval_tagging()
    finder = AssetFinder(names)
    articles: list[ArticleIn] = []
    derived: dict[str, EventCandidate | None] = {}
    for row in rows:
        tickers, topics = tag(row.title, row.summary, row.published_at)
        article = ArticleIn(row.key, row.title, row.summary, None, None, row.source_name, row.published_at,
                            tickers, topics)
        articles.append(article)
        derived[row.key] = derive_article(article, names, finder, learned=learned)

    counts = {k: {"labelled": 0, "derived": 0, "correct": 0} for k in (*KINDS, "all")}
    by_origin: dict[str, dict[str, int]] = {}
    errors: list[dict[str, Any]] = []
    detect_tp = detect_fp = detect_fn = 0
    missed_no_ticker = 0
    tickers_of = {a.id: a.tickers for a in articles}
    for row in rows:
        event = derived[row.key]
        origin = by_origin.setdefault(row.origin, {"articles": 0, "labelled": 0, "derived": 0, "correct": 0})
        origin["articles"] += 1
        if row.positive:
            counts[row.label["kind"]]["labelled"] += 1
            counts["all"]["labelled"] += 1
            origin["labelled"] += 1
        if event is not None:
            counts[event.kind]["derived"] += 1
            counts["all"]["derived"] += 1
            origin["derived"] += 1
        if row.positive and event is not None:
            detect_tp += 1
        elif event is not None:
            detect_fp += 1
        elif row.positive:
            detect_fn += 1
        wrong = _matches(row.label, event) if (row.positive and event is not None) else []
        if row.positive and event is not None and not wrong:
            counts[event.kind]["correct"] += 1
            counts["all"]["correct"] += 1
            origin["correct"] += 1
            continue
        if not row.positive and event is None:
            continue
        if row.positive and event is None:
            no_ticker = row.label["asset"] not in tickers_of[row.key]
            missed_no_ticker += no_ticker
            why = "not derived" + (" (the tagger gave no " + row.label["asset"] + " ticker)" if no_ticker else "")
        elif not row.positive:
            why = "derived, but the label says no event"
        else:
            why = "; ".join(wrong)
        errors.append({
            "key": row.key, "title": row.title, "published_at": row.published_at.isoformat(), "why": why,
            "derived": None if event is None else {
                "title": event.event_title, "asset": event.asset, "kind": event.kind,
                "comparator": event.comparator, "threshold": event.threshold, "date": event.date.isoformat(),
            },
        })

    all_ = counts["all"]
    return {
        "command": ".venv/bin/python -m pipeline.events.evaluate --json",
        "labelled_set": str(path.relative_to(path.parents[2])) if len(path.parents) > 2 else str(path),
        "tickers_from": tickers_from,
        "articles": len(rows),
        "labelled_positive": all_["labelled"],
        "labelled_out_of_scope": sum(1 for r in rows if r.label.get("out_of_scope")),
        "derived": all_["derived"],
        "correct": all_["correct"],
        "precision": ratio(all_["correct"], all_["derived"]),
        "recall": ratio(all_["correct"], all_["labelled"]),
        "detection": {
            "precision": ratio(detect_tp, detect_tp + detect_fp),
            "recall": ratio(detect_tp, detect_tp + detect_fn),
            "false_positives": detect_fp,
            "missed": detect_fn,
            "missed_because_no_ticker": missed_no_ticker,
        },
        "by_kind": {k: v for k, v in counts.items() if k != "all"},
        "by_origin": by_origin,
        "distinct_events": len(derive_events(articles, names, learned=learned)),
        "errors": errors,
    }


def evaluate_cryptolin(csv_path: Path, learned: bool = True, judged_path: Path = CRYPTOLIN_JUDGED) -> dict[str, Any]:
    """Derive events from the CryptoLin headlines (published at noon UTC on their date) and score each derived
    event against its hand judgment. Precision only: the 2,146 headlines are not all labelled."""
    import csv

    if not csv_path.exists():
        raise FileNotFoundError(f"no CryptoLin headlines at {csv_path.resolve()}: pass --cryptolin-csv PATH "
                                "(the corpus lives in ../shared beside the checkout)")
    judged = {}
    for line in judged_path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            judged[str(d["id"])] = d["label"]
    tag, names, tickers_from = eval_tagging()
    finder = AssetFinder(names)
    derived, correct, unjudged, errors = 0, 0, [], []
    with csv_path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        published = datetime.fromisoformat(row["date"][:10]).replace(hour=12)
        tickers, topics = tag(row["text"], "", published)
        event = derive_article(ArticleIn(row["id"], row["text"], "", None, None, "CryptoLin", published, tickers,
                                         topics), names, finder, learned=learned)
        if event is None:
            continue
        derived += 1
        label = judged.get(row["id"])
        shown = {"id": row["id"], "text": row["text"], "derived": event.event_title}
        if label is None:
            unjudged.append(shown)
        elif label.get("derive") and not _matches(label, event):
            correct += 1
        else:
            errors.append({**shown, "why": "; ".join(_matches(label, event)) if label.get("derive") else
                           "derived, but judged: no event"})
    return {
        "command": ".venv/bin/python -m pipeline.events.evaluate --cryptolin --json",
        "headlines": len(rows),
        "tickers_from": tickers_from,
        "derived": derived,
        "correct": correct,
        "precision": ratio(correct, derived),
        "unjudged": unjudged,
        "errors": errors,
    }


def evaluate_unseen(split: str, path: Path | None = None, learned: bool = True) -> dict[str, Any]:
    """Precision and recall on the unseen-news set's ``split`` (dev, test or all; val: the validation set; archive:
    the archive's development headlines), with reader agreement."""
    from pipeline.events.unseen import PART_PATHS, UNSEEN_PATH, agreement, load_unseen, score

    path = path or PART_PATHS.get(split, UNSEEN_PATH)
    items = load_unseen(path)
    chosen = [it for it in items if split == "all" or it.split == split]
    tag, names, tickers_from = eval_tagging()
    finder = AssetFinder(names)

    def derive(it: Any) -> EventCandidate | None:
        tickers, topics = tag(it.title, it.summary, it.published_at)
        return derive_article(ArticleIn(it.key, it.title, it.summary, None, None, it.publisher, it.published_at,
                                        tickers, topics), names, finder, learned=learned)

    report = score(chosen, derive)
    return {
        "command": f".venv/bin/python -m pipeline.events.evaluate --split {split} --json",
        "labelled_set": str(path.relative_to(PROJECT)) if path.is_relative_to(PROJECT) else str(path),
        "split": split,
        "tickers_from": tickers_from,
        "agreement": agreement(chosen),
        "should_derive": sum(1 for it in chosen if it.should_derive),
        "out_of_scope": sum(1 for it in chosen if it.out_of_scope),
        **report,
    }


def _print_unseen(report: dict[str, Any], errors: bool) -> None:
    a = report["agreement"]
    print(f"unseen news, {report['split']} part: {report['articles']} articles from {len(report['publishers'])} "
          f"publishers ({report['labelled_set']})")
    print(f"tickers from: {report['tickers_from']}")
    print(f"readers: {a.get('readers_per_item')} per item; event or not: Fleiss kappa "
          f"{a.get('event_or_not_fleiss_kappa')}, unanimous on {a.get('event_or_not_unanimous')}; "
          f"{a.get('majority_says_event')} items a majority says give an event "
          f"({a.get('of_which_all_readers_wrote_the_same_questions')} with identical questions from all)")
    print(f"gold events (kinds derived: {len(report['by_kind'])}): {report['gold']}; derived {report['derived']}, correct {report['correct']}: "
          f"precision {report['precision']}, recall {report['recall']}")
    for kind, c in report["by_kind"].items():
        print(f"  {kind:18} gold {c['gold']:3}  derived {c['derived']:3}  correct {c['correct']:3}  "
              f"precision {c['precision']}  recall {c['recall']}")
    shown = report["errors"] if errors else []
    for e in shown:
        print(f"- {e['key']} ({e['published_at'][:10]}): {e['title']}\n    {e['why']}; gold: {e['gold'] or '-'}"
              + (f"; derived: {e['derived']}" if e["derived"] else ""))
    if not errors and report["errors"]:
        print(f"{len(report['errors'])} errors (--errors lists them)")


def main(argv: list[str] | None = None) -> int:
    from models.sentiment.data import cryptolin_csv

    parser = argparse.ArgumentParser(description="Precision and recall of prediction-event derivation.")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument("--errors", action="store_true", help="list every wrong, missed or spurious event")
    parser.add_argument("--path", type=Path, default=EVAL_PATH, help="labelled set (JSON lines)")
    parser.add_argument("--cryptolin", action="store_true",
                        help="precision on unseen CryptoLin headlines, derived events judged by hand")
    parser.add_argument("--cryptolin-csv", type=Path, default=cryptolin_csv(),
                        help="CryptoLin's train.csv (default: ../shared/data/sentiment/cryptolin/train.csv)")
    parser.add_argument("--rules-only", action="store_true",
                        help="the rules alone, without the learned price model (pipeline.events.learned)")
    from pipeline.events.unseen import PART_PATHS

    parser.add_argument("--split", choices=("dev", "test", "all", *PART_PATHS),
                        help="score the unseen-news set (models/eval/events_unseen.jsonl) instead: its development "
                        "part, its held-out test part, or both; val: the validation set "
                        "(models/eval/events_validation.jsonl, development items labelled later); archive, archive2, "
                        "...: development headlines without summaries (models/eval/events_archive*.jsonl)")
    args = parser.parse_args(argv)
    try:
        if args.split:
            report = evaluate_unseen(args.split, args.path if args.path != EVAL_PATH else None, not args.rules_only)
            if args.json:
                print(json.dumps(report, indent=2))
            else:
                _print_unseen(report, args.errors)
            return 0
        report = (evaluate_cryptolin(args.cryptolin_csv, not args.rules_only) if args.cryptolin
                  else evaluate(args.path, not args.rules_only))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cryptolin:
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(f"CryptoLin: {report['headlines']} headlines, {report['derived']} events derived, "
                  f"{report['correct']} judged correct (precision {report['precision']}); "
                  f"{len(report['unjudged'])} not judged yet, {len(report['errors'])} wrong")
            for e in report["errors"] + report["unjudged"]:
                print(f"- {e['id']}: {e['text']}\n    {e['derived']}" + (f"\n    {e['why']}" if "why" in e else ""))
        return 0
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    d = report["detection"]
    print(f"labelled set: {report['labelled_set']} ({report['articles']} articles, "
          f"{report['labelled_positive']} with an event, {report['labelled_out_of_scope']} out of scope)")
    print(f"tickers from: {report['tickers_from']}")
    print(f"derived {report['derived']}, correct {report['correct']}: "
          f"precision {report['precision']}, recall {report['recall']}")
    print(f"event / no event: precision {d['precision']}, recall {d['recall']} "
          f"({d['false_positives']} spurious, {d['missed']} missed, {d['missed_because_no_ticker']} of them "
          f"without the ticker from the tagger)")
    for kind, c in report["by_kind"].items():
        print(f"  {kind:18} labelled {c['labelled']:3}  derived {c['derived']:3}  correct {c['correct']:3}")
    print(f"distinct events over the set: {report['distinct_events']}")
    if args.errors:
        for e in report["errors"]:
            print(f"- {e['key']}: {e['title']}\n    {e['why']}" + (f"\n    derived: {e['derived']['title']}"
                                                                   if e["derived"] else ""))
    elif report["errors"]:
        print(f"{len(report['errors'])} errors (--errors lists them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
