"""Precision and recall of "same story" on the labelled pairs: ``python -m pipeline.stories.evaluate --split dev``.

The labelled items (the 3,001 of ``models/eval/events_unseen.jsonl`` and the 871 development items of
``events_validation.jsonl``) are grouped in publication order, as the pipeline would (``--mode all``, the
default), or each pair's two items alone (``--mode pair``); a pair is predicted "same" when both items end up in
one story. Embeddings take a few minutes on a CPU; ``--cache DIR`` keeps them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.stories.cluster import Clusterer, Item
from pipeline.stories.features import (
    ENCODER_VERSION,
    embed,
    embed_sentences,
    names,
    numbers,
    price_piece,
    sentences,
    story_text,
    words,
)

EVAL_DIR = Path(__file__).resolve().parents[2] / "models" / "eval"
# The pairs of batch 3 on draw on the validation items too (development part only).
ITEM_FILES = ("events_unseen.jsonl", "events_validation.jsonl")


def load_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for name in ITEM_FILES for line in (EVAL_DIR / name).read_text().splitlines()
            if line.strip()]


def load_items(cache: Path | None = None) -> list[Item]:
    from models.tagging import get_tagger

    rows = load_rows()
    vecs = None
    tag = hashlib.sha256(f"{ENCODER_VERSION}|{','.join(ITEM_FILES)}".encode()).hexdigest()[:12]
    path = cache / f"story_eval_{tag}.npz" if cache else None
    per_item = [sentences(r["title"], r.get("summary")) for r in rows]
    if path is not None and path.exists():
        vecs = np.load(path)
        text, title, flat = vecs["text"], vecs["title"], vecs["sentences"]
    else:
        text = embed([story_text(r["title"], r.get("summary")) for r in rows])
        title = embed([r["title"] for r in rows])
        flat = np.concatenate(embed_sentences(per_item))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, text=text, title=title, sentences=flat)
    ends = np.cumsum([len(p) for p in per_item])
    tagger = get_tagger()
    items = []
    for k, r in enumerate(rows):
        at = datetime.fromisoformat(r["published_at"])
        tags = tagger.tag(r["title"], r.get("summary") or "", at)
        lede = story_text(r["title"], r.get("summary"))
        items.append(Item(
            id=r["key"], published_at=at, text_vec=text[k], title_vec=title[k],
            tickers=frozenset(h.symbol for h in tags.tickers), numbers=numbers(lede), title_numbers=numbers(r["title"]),
            source=r["domain"], title_words=words(r["title"]), lede_words=words(lede), names=names(lede),
            price_piece=price_piece(r["title"], lede), sent_vecs=flat[ends[k] - len(per_item[k]):ends[k]],
        ))
    return items


def cluster(items: list[Item]) -> dict[str, str]:
    c = Clusterer()
    got = {it.id: c.add(it) for it in sorted(items, key=lambda it: (it.published_at, it.id))}
    return {aid: c.resolve(sid) for aid, sid in got.items()}  # a story merged later: the one it is part of


def evaluate(split: str, mode: str = "all", cache: Path | None = None) -> dict[str, Any]:
    items = load_items(cache)
    by_key = {it.id: it for it in items}
    pairs = [json.loads(line) for line in (EVAL_DIR / "story_pairs.jsonl").read_text().splitlines() if line.strip()]
    pairs = [p for p in pairs if p["split"] == split]
    whole = cluster(items) if mode == "all" else {}
    tp = fp = fn = tn = 0
    for p in pairs:
        if mode == "all":
            same = whole[p["a"]] == whole[p["b"]]
        else:
            got = cluster([by_key[p["a"]], by_key[p["b"]]])
            same = got[p["a"]] == got[p["b"]]
        gold = p["label"] == "same"
        tp += same and gold
        fp += same and not gold
        fn += gold and not same
        tn += not same and not gold
    stories = len(set(whole.values())) if whole else None
    return {
        "split": split, "mode": mode, "pairs": len(pairs), "same": tp + fn, "tp": tp, "fp": fp, "fn": fn, "tn": tn,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None, "recall": round(tp / (tp + fn), 3) if tp + fn else None,
        "items": len(items), "stories": stories, "encoder": ENCODER_VERSION,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=["dev", "test"], default="dev")
    ap.add_argument("--mode", choices=["all", "pair"], default="all")
    ap.add_argument("--cache", type=Path, help="keep the items' embeddings in this directory")
    args = ap.parse_args(argv)
    print(json.dumps(evaluate(args.split, args.mode, args.cache), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
