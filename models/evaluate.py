"""Evaluate the shipped sentiment model (and the baselines) on the CryptoLin held-out split or any CSV.

    .venv/bin/python -m models.evaluate                    # held-out 15 % of CryptoLin
    .venv/bin/python -m models.evaluate --data X.csv --json

Same as `cryptowire sentiment eval`; see models/sentiment/evaluate.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from models.sentiment.data import cryptolin_csv
from models.sentiment.evaluate import evaluate, format_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="CSV with text,label (default: CryptoLin held-out)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--precision", choices=("int8", "fp32"), default=None, help="default: as shipped (int8)")
    parser.add_argument("--cryptolin", type=Path, default=cryptolin_csv(),
                        help="CryptoLin's train.csv, the training data (default: ../shared beside the checkout)")
    args = parser.parse_args(argv)
    holdout = args.data is None
    data = args.data or args.cryptolin
    result = evaluate(data, baselines=not args.no_baselines, holdout=holdout, backend=args.precision,
                      cryptolin=args.cryptolin)
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
