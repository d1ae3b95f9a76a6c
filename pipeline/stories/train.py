"""Learn the pair model (``pipeline/stories/pair_model.json``) from the development pairs only.

    python -m pipeline.stories.train [--cache DIR] [--target-precision 0.90]

The weights are a logistic regression over ``pipeline.stories.pairs.FEATURES``. The threshold is the lowest
probability at which the pairs' five-fold cross-validated precision reaches the target: chosen on held-out folds
of the development part, so the figure it prints is not the in-sample one. The test pairs are never read here.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.stories import pairs
from pipeline.stories.evaluate import EVAL_DIR, load_items

FOLDS = 5
THRESHOLDS = tuple(round(0.30 + 0.05 * k, 2) for k in range(14))  # 0.30 .. 0.95


def dev_pairs() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (EVAL_DIR / "story_pairs.jsonl").read_text().splitlines() if line.strip()]
    return [p for p in rows if p["split"] == "dev"]


def _pr(prob: np.ndarray, gold: np.ndarray, t: float) -> tuple[float, float]:
    pred = prob >= t
    tp = int((pred & gold).sum())
    fp, fn = int((pred & ~gold).sum()), int((~pred & gold).sum())
    return (tp / (tp + fp) if tp + fp else 1.0), (tp / (tp + fn) if tp + fn else 0.0)


def train(cache: Path | None, target_precision: float, l2: float = 1.0) -> tuple[pairs.PairModel, dict[str, Any]]:
    by_key = {it.id: it for it in load_items(cache)}
    rows = dev_pairs()
    x = np.array([pairs.features(by_key[p["a"]], by_key[p["b"]]) for p in rows])
    gold = np.array([p["label"] == "same" for p in rows])
    fold = np.random.default_rng(0).integers(0, FOLDS, len(rows))
    cv = np.zeros(len(rows))
    for f in range(FOLDS):
        w, b = pairs.fit(x[fold != f], gold[fold != f].astype(float), l2)
        cv[fold == f] = pairs.predict(x[fold == f], w, b)
    curve = {t: _pr(cv, gold, t) for t in THRESHOLDS}
    reaching = [t for t in THRESHOLDS if curve[t][0] >= target_precision]
    threshold = reaching[0] if reaching else THRESHOLDS[-1]
    w, b = pairs.fit(x, gold.astype(float), l2)
    model = pairs.PairModel(tuple(float(v) for v in w), b, threshold)
    report = {
        "trained": datetime.now(UTC).strftime("%Y-%m-%d"), "pairs": len(rows), "same": int(gold.sum()), "l2": l2,
        "target_precision": target_precision,
        "cv_precision": round(curve[threshold][0], 3), "cv_recall": round(curve[threshold][1], 3),
        "cv_curve": {f"{t:.2f}": [round(p, 3), round(r, 3)] for t, (p, r) in curve.items()},
    }
    return model, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, help="keep the items' embeddings in this directory")
    ap.add_argument("--target-precision", type=float, default=0.90)
    ap.add_argument("--out", type=Path, default=pairs.MODEL_FILE)
    args = ap.parse_args(argv)
    model, report = train(args.cache, args.target_precision)
    args.out.write_text(model.to_json({"trained_on": "models/eval/story_pairs.jsonl, split dev", **report}))
    print(json.dumps({k: v for k, v in report.items() if k != "cv_curve"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
