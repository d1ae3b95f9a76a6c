"""Average two sentiment deltas over the same packaged encoder (a two-model "soup") into a third delta.

    .venv/bin/python -m models.soup --a DIR --b DIR --weight 0.6 --out DIR

The result is ``weight`` x model b + (1 - weight) x model a, tensor by tensor (encoder and head), written in the
shipped form (int8 delta, models/sentiment/delta.py). Both must be fine-tunes of the same base encoder from the
same head initialisation (``models.train`` always uses head seed 0), so that their weights can be averaged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from models.sentiment.delta import apply_delta, encode_delta, read_delta, write_delta
from models.sentiment.net import load_encoder


def soup(a: Path, b: Path, weight: float, out: Path) -> Path:
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"--weight must be within 0..1, not {weight}")
    base = load_encoder().state_dict()
    (da, ca, va), (db, cb, vb) = read_delta(a), read_delta(b)
    if ca["base"]["weights_sha256"] != cb["base"]["weights_sha256"]:
        raise ValueError("the two deltas were trained over different base encoders; they cannot be averaged")
    sa, sb = apply_delta(base, da), apply_delta(base, db)
    # tensors both left as they were (the frozen word embeddings) stay bit-exact, so the delta does not store them
    mixed = {k: (1 - weight) * sa[k].float() + weight * sb[k].float()
             if sa[k].is_floating_point() and not torch.equal(sa[k], sb[k]) else sa[k] for k in sa}
    delta = encode_delta(base, mixed)
    for k in ("head.weight", "head.bias"):
        delta[k] = ((1 - weight) * da[k].float() + weight * db[k].float()).contiguous()
    config = dict(cb)
    config["training"] = {**cb["training"], "soup": {"a": va, "b": vb, "weight_of_b": weight,
                                                     "a_training": ca["training"].get("data"),
                                                     "command": f"python -m models.soup --weight {weight}"}}
    path, _ = write_delta(out, delta, config)
    for name in ("calibration.txt",):
        if (b / name).is_file():
            (out / name).write_bytes((b / name).read_bytes())
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m models.soup", description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True, help="directory of the first delta")
    ap.add_argument("--b", type=Path, required=True, help="directory of the second delta")
    ap.add_argument("--weight", type=float, required=True, help="weight of the second delta, 0..1")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    path = soup(args.a, args.b, args.weight, args.out)
    print(json.dumps({"wrote": str(path), "bytes": path.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
