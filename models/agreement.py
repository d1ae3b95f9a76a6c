"""How far an independent reader agrees with CryptoLin's held-out labels, beside the shipped model.

    .venv/bin/python -m models.agreement [--json]

`models/eval/cryptolin_holdout_blind.csv` (`id,label`) holds a blind reading of the 321 held-out headlines by one
annotator of the team, who saw the texts only (models/eval/README.md). If that reader agrees with the gold labels
no better than the model does, the remaining errors are as much in the labels' ambiguity as in the model.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from models.sentiment.data import cryptolin_csv, cryptolin_splits
from models.sentiment.metrics import classification_report

BLIND = Path(__file__).resolve().parent / "eval" / "cryptolin_holdout_blind.csv"


def blind_labels(path: Path = BLIND) -> dict[str, str]:
    with path.open(encoding="utf-8", newline="") as f:
        return {row["id"]: row["label"] for row in csv.DictReader(f)}


def agreement(data: Path, blind: Path = BLIND) -> dict[str, Any]:
    from models.sentiment import load_model

    valid = cryptolin_splits(data)[1]
    reader = blind_labels(blind)
    missing = [e.id for e in valid if e.id not in reader]
    if missing:
        raise ValueError(f"{blind} has no label for {len(missing)} held-out ids (first: {missing[0]}); "
                         "it must cover the whole held-out split")
    gold = [e.label for e in valid]
    annotator = [reader[e.id] for e in valid]
    model = load_model()
    predicted = [p.label for p in model.predict([e.text for e in valid])]

    def pair(truth: list[str], other: list[str]) -> dict[str, Any]:
        r = classification_report(truth, other)
        return {"accuracy": round(r["accuracy"], 4), "macro_f1": round(r["macro_f1"], 4), "confusion": r["confusion"]}

    return {
        "rows": len(valid),
        "model_version": model.version,
        "annotator_vs_cryptolin": pair(gold, annotator),
        "model_vs_cryptolin": pair(gold, predicted),
        "model_vs_annotator": pair(annotator, predicted),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=cryptolin_csv(),
                        help="CryptoLin train.csv (default: ../shared beside the checkout)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = agreement(args.data)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['rows']} held-out CryptoLin headlines, model {result['model_version']} "
          "(confusion rows = first named, columns = second; negative, neutral, positive)")
    for name in ("annotator_vs_cryptolin", "model_vs_cryptolin", "model_vs_annotator"):
        r = result[name]
        print(f"  {name.replace('_', ' '):<24} accuracy {r['accuracy']:.4f}  macro-F1 {r['macro_f1']:.4f}  "
              f"confusion {r['confusion']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
