"""Tickers as of the article's date, measured on two sets read by three blind readers each:

- ``models/eval/tagging_news.jsonl``: 400 news headlines of 2024-2026 (texts included; split by publisher and
  date, models.splits);
- ``models/eval/tagging_cryptolin.jsonl``: 400 CryptoLin headlines of 2018-2022 (ids only: the texts are read
  from CryptoLin's train.csv, ``--cryptolin``; a quarter by id hash is the test part).

    .venv/bin/python -m models.tagging.dated [--cryptolin CSV] [--split dev|test|all] [--json] [--errors]

Precision over every ticker; recall over all tickers and over mainstream assets (the assets with a reference
price in pipeline/events/data/asset_reference.csv: the large caps a prediction market lists). Each headline is
tagged with its date, so a 2021 "Polygon" must be MATIC.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

from models.scoring import ratio
from models.tagging.registry import load_registry
from models.tagging.tagger import Tagger, get_tagger

EVAL_DIR = Path(__file__).resolve().parents[1] / "eval"
REFERENCE_CSV = Path(__file__).resolve().parents[2] / "pipeline" / "events" / "data" / "asset_reference.csv"


def mainstream() -> frozenset[str]:
    """Symbols (current and former) of the assets with a reference price."""
    with REFERENCE_CSV.open(encoding="utf-8", newline="") as fh:
        priced = {r["ticker"] for r in csv.DictReader(fh) if r["field"] == "price_usd"}
    return frozenset(s for a in load_registry() if a.symbol in priced for s in (a.symbol, *a.former_symbols))


def load_set(name: str, cryptolin: Path | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (EVAL_DIR / f"tagging_{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    if name == "cryptolin":
        if cryptolin is None or not cryptolin.is_file():
            raise FileNotFoundError(f"the CryptoLin texts are not at {cryptolin}: pass --cryptolin CSV")
        with cryptolin.open(encoding="utf-8", newline="") as fh:
            texts = {r["id"]: r["text"] for r in csv.DictReader(fh)}
        for row in rows:
            row["text"] = texts[row["id"]]
    return rows


def score(rows: list[dict[str, Any]], tagger: Tagger, main: frozenset[str]) -> dict[str, Any]:
    tp = fp = fn = main_tp = main_fn = 0
    errors = []
    for row in rows:
        gold = set(row["tickers"])
        pred = set(tagger.tag(row["text"], "", date.fromisoformat(row["date"])).symbols)
        tp, fp, fn = tp + len(gold & pred), fp + len(pred - gold), fn + len(gold - pred)
        main_tp += len(gold & pred & main)
        main_fn += len((gold - pred) & main)
        if gold != pred:
            errors.append({"id": row["id"], "date": row["date"], "text": row["text"],
                           "missed": sorted(gold - pred), "extra": sorted(pred - gold)})

    return {"headlines": len(rows), "precision": ratio(tp, tp + fp), "recall": ratio(tp, tp + fn),
            "mainstream_recall": ratio(main_tp, main_tp + main_fn), "tp": tp, "fp": fp, "fn": fn, "errors": errors}


def evaluate(cryptolin: Path | None, split: str = "all", tagger: Tagger | None = None) -> dict[str, Any]:
    tagger = tagger or get_tagger()
    main = mainstream()
    out: dict[str, Any] = {"tagger_version": tagger.version, "split": split}
    for name in ("news", "cryptolin"):
        try:
            rows = load_set(name, cryptolin)
        except FileNotFoundError as exc:
            out[name] = {"skipped": str(exc)}
            continue
        out[name] = score([r for r in rows if split == "all" or r["split"] == split], tagger, main)
    return out


def main(argv: list[str] | None = None) -> int:
    from models.sentiment.data import cryptolin_csv

    parser = argparse.ArgumentParser(prog="python -m models.tagging.dated", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cryptolin", type=Path, default=cryptolin_csv(),
                        help="CryptoLin's train.csv, for the texts of the 2018-2022 set (default: ../shared)")
    parser.add_argument("--split", choices=("dev", "test", "all"), default="all")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--errors", action="store_true")
    args = parser.parse_args(argv)
    report = evaluate(args.cryptolin, args.split)
    if not args.errors:
        for part in ("news", "cryptolin"):
            report[part].pop("errors", None)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for part in ("news", "cryptolin"):
        r = report[part]
        if "skipped" in r:
            print(f"{part}: skipped ({r['skipped']})")
            continue
        print(f"{part:9} {args.split:4} n={r['headlines']:3}  precision {r['precision']}  recall {r['recall']}  "
              f"mainstream recall {r['mainstream_recall']}")
        for e in r.get("errors", []):
            print(f"  - {e['date']} {e['text'][:100]}  missed {e['missed']} extra {e['extra']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
