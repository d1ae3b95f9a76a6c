"""Measure the tagger against the hand-labelled headlines in models/eval/tagging.jsonl.

    .venv/bin/python -m models.tagging.evaluate [--json] [--split tune|holdout|all] [--errors]

Micro precision / recall / F1 for tickers and topics. A fixed quarter of the set (chosen by a hash of the
text, so it never moves) is held out: rules are tuned on the rest, and the held-out figures are reported
beside the tuned ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.tagging.tagger import Tagger, get_tagger

EVAL_PATH = Path(__file__).resolve().parents[1] / "eval" / "tagging.jsonl"
SPLITS = ("all", "tune", "holdout")


@dataclass(frozen=True)
class Example:
    text: str
    tickers: frozenset[str]
    topics: frozenset[str]
    source: str

    @property
    def split(self) -> str:
        return "holdout" if hashlib.sha1(self.text.encode("utf-8")).digest()[0] % 4 == 0 else "tune"


@dataclass
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    per_label: dict[str, list[int]] = field(default_factory=dict)  # label -> [tp, fp, fn]

    def add(self, gold: frozenset[str], pred: frozenset[str]) -> None:
        for label, slot in [(x, 0) for x in gold & pred] + [(x, 1) for x in pred - gold] + [(x, 2) for x in gold - pred]:
            self.per_label.setdefault(label, [0, 0, 0])[slot] += 1
        self.tp += len(gold & pred)
        self.fp += len(pred - gold)
        self.fn += len(gold - pred)

    @staticmethod
    def prf(tp: int, fp: int, fn: int) -> dict[str, float]:
        p = tp / (tp + fp) if tp + fp else 1.0
        r = tp / (tp + fn) if tp + fn else 1.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4)}

    def summary(self, per_label: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {**self.prf(self.tp, self.fp, self.fn), "tp": self.tp, "fp": self.fp, "fn": self.fn}
        if per_label:
            out["per_label"] = {
                k: {**self.prf(*v), "support": v[0] + v[2]} for k, v in sorted(self.per_label.items())
            }
        return out


def load_examples(path: Path = EVAL_PATH) -> list[Example]:
    examples = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                examples.append(Example(row["text"], frozenset(row["tickers"]), frozenset(row["topics"]), row["source"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: expected {{text, tickers, topics, source}}: {exc}") from exc
    return examples


def evaluate(split: str = "all", tagger: Tagger | None = None, path: Path = EVAL_PATH) -> dict[str, Any]:
    """Scores for one split, plus the misses (for --errors)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tagger = tagger or get_tagger()
    tickers, topics = Score(), Score()
    errors = []
    n = 0
    for ex in load_examples(path):
        if split != "all" and ex.split != split:
            continue
        n += 1
        tags = tagger.tag(ex.text)
        pred_tickers, pred_topics = frozenset(tags.symbols), frozenset(tags.topics)
        tickers.add(ex.tickers, pred_tickers)
        topics.add(ex.topics, pred_topics)
        if pred_tickers != ex.tickers or pred_topics != ex.topics:
            errors.append({
                "text": ex.text,
                "tickers": {"missed": sorted(ex.tickers - pred_tickers), "extra": sorted(pred_tickers - ex.tickers)},
                "topics": {"missed": sorted(ex.topics - pred_topics), "extra": sorted(pred_topics - ex.topics)},
            })
    return {
        "split": split,
        "headlines": n,
        "tagger_version": tagger.version,
        "tickers": tickers.summary(per_label=True),
        "topics": topics.summary(per_label=True),
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--split", choices=SPLITS, help="one split only (default: tune, holdout and all)")
    parser.add_argument("--errors", action="store_true", help="list the headlines the tagger got wrong")
    parser.add_argument("--path", type=Path, default=EVAL_PATH, help="labelled JSONL (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.path.is_file():
        parser.error(f"no labelled set at {args.path}")
    splits = [args.split] if args.split else ["tune", "holdout", "all"]
    results = {s: evaluate(s, path=args.path) for s in splits}
    if not args.errors:
        for r in results.values():
            r.pop("errors")
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for s, r in results.items():
        tk, tp = r["tickers"], r["topics"]
        print(f"{s:8} n={r['headlines']:4}  tickers P={tk['precision']:.3f} R={tk['recall']:.3f} F1={tk['f1']:.3f}"
              f"  topics P={tp['precision']:.3f} R={tp['recall']:.3f} F1={tp['f1']:.3f}")
    if args.split:
        r = results[args.split]
        print("\nper topic (P / R / support):")
        for k, v in r["topics"]["per_label"].items():
            print(f"  {k:18} {v['precision']:.2f} / {v['recall']:.2f} / {v['support']}")
        for e in r.get("errors", []):
            print(f"- {e['text']}\n    tickers {e['tickers']}  topics {e['topics']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
