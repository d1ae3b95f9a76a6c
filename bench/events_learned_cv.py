"""Events: would a learned filter find price questions the rules miss? Cross-validated on development items only.

    python -m bench.events_learned_cv [--folds 5] [--c 1.0]

Items: the development parts of the events sets (events_unseen.jsonl split "dev", events_validation.jsonl,
events_archive*.jsonl: ``pipeline.events.unseen.development_items``); the test part is never loaded. Candidates and features are
those of ``pipeline.events.learned`` (``price_training.training_rows``): every dollar amount of the headline and
the first two summary sentences that the rules' own filters let through, with a direction and the rules'
resolution date; positive when the readers' majority asked about that asset and level. The logistic regression is
fit with folds grouped by publisher, so every figure is for publishers the model did not see.

Printed: the rules alone (in-sample: they were written while reading these parts), the model alone, and the rules
plus the model's best candidate on items where the rules derive nothing, at several thresholds; a question is
correct only when asset, kind, direction, level and date all match a gold one (pipeline.events.unseen.matches).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.events.derive import ArticleIn, derive_article  # noqa: E402
from pipeline.events.evaluate import eval_tagging  # noqa: E402
from pipeline.events.mentions import AssetFinder  # noqa: E402
from pipeline.events.price_training import TRAINING_PARTS, training_rows  # noqa: E402
from pipeline.events.unseen import SHIPPED_KINDS, development_items, matches  # noqa: E402


def rules_alone(parts: tuple[str, ...]) -> tuple[dict[str, tuple[bool, bool]], int]:
    """key -> (the rules derived an event, it is correct), and the number of items with a gold question."""
    items = development_items(parts)
    tag, names, _ = eval_tagging()
    finder = AssetFinder(names)
    out, gold_items = {}, 0
    for it in items:
        tickers, topics = tag(it.title, it.summary, it.published_at)
        event = derive_article(ArticleIn(it.key, it.title, it.summary, None, None, it.publisher, it.published_at,
                                         tickers, topics), names, finder, learned=False)
        golds = [g for g in it.gold if g.kind in SHIPPED_KINDS]
        gold_items += bool(golds)
        out[it.key] = (event is not None, event is not None and any(
            matches(g, event.asset, event.kind, event.comparator, event.threshold, f"{event.date:%Y-%m-%d}")
            for g in golds))
    return out, gold_items


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    parser = argparse.ArgumentParser(prog="python -m bench.events_learned_cv", description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--parts", default=",".join(TRAINING_PARTS),
                        help="development parts besides the unseen set's dev part (default: the shipped model's)")
    parser.add_argument("--c", type=float, default=1.0, help="inverse regularisation of the logistic regression")
    args = parser.parse_args(argv)
    parts = tuple(args.parts.split(","))
    rows, _ = training_rows(parts)
    rules, gold_items = rules_alone(parts)
    x = DictVectorizer().fit_transform([r["features"] for r in rows])
    y = np.array([r["level"] for r in rows])
    prob = np.zeros(len(rows))
    for train, test in GroupKFold(n_splits=args.folds).split(x, y, [r["publisher"] for r in rows]):
        model = LogisticRegression(C=args.c, max_iter=3000).fit(x[train], y[train])
        prob[test] = model.predict_proba(x[test])[:, 1]
    best: dict[str, int] = {}
    for i, r in enumerate(rows):
        if not r["directed"]:
            continue  # derivation skips a level with no direction
        if r["key"] not in best or prob[i] > prob[best[r["key"]]]:
            best[r["key"]] = i

    def figures(derived: int, correct: int) -> Mapping[str, Any]:
        return {"derived": derived, "correct": correct, "precision": round(correct / derived, 3) if derived else None,
                "recall": round(correct / gold_items, 3)}

    rule_d = sum(d for d, _ in rules.values())
    rule_c = sum(c for _, c in rules.values())
    out: dict[str, Any] = {
        "items": len(rules), "gold_items": gold_items, "candidates": len(rows),
        "positive_candidates": int(y.sum()),
        "rules_in_sample": figures(rule_d, rule_c), "model_alone": {}, "rules_plus_model": {},
    }
    for t in (0.5, 0.6, 0.7, 0.8, 0.9):
        chosen = [i for i in best.values() if prob[i] >= t]
        out["model_alone"][str(t)] = figures(len(chosen), sum(rows[i]["question"] for i in chosen))
        added = [i for k, i in best.items() if prob[i] >= t and not rules[k][0]]
        good = sum(rows[i]["question"] for i in added)
        out["rules_plus_model"][str(t)] = {**figures(rule_d + len(added), rule_c + good), "added": len(added),
                                           "added_correct": good}
    out["machine"] = {"platform": platform.platform(), "python": platform.python_version()}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
