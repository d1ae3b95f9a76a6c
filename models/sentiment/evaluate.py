"""Evaluation of the shipped model on a `text,label` CSV, with two baselines measured in the same run:
the VADER lexicon (compound >= 0.05 positive, <= -0.05 negative, else neutral) and a logistic-regression head
on frozen mean-pooled embeddings of the packaged encoder, trained on the CryptoLin training split."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from models.sentiment.data import Example, cryptolin_splits, read_labelled_csv
from models.sentiment.metrics import classification_report


def vader_labels(texts: list[str]) -> list[str]:
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    analyzer = SentimentIntensityAnalyzer()
    out = []
    for text in texts:
        compound = analyzer.polarity_scores(text)["compound"]
        out.append("positive" if compound >= 0.05 else "negative" if compound <= -0.05 else "neutral")
    return out


def frozen_embeddings(texts: list[str], max_tokens: int = 64, batch: int = 64) -> Any:
    """Mean-pooled, L2-normalised embeddings of the untouched base encoder (as sentence-transformers does)."""
    import torch

    from models.sentiment.net import load_encoder, load_tokenizer, pad_batch

    tokenizer, encoder = load_tokenizer(), load_encoder().eval()
    encoded = tokenizer(texts, truncation=True, max_length=max_tokens)["input_ids"]
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    out = torch.zeros((len(texts), encoder.config.hidden_size))
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            idx = order[start : start + batch]
            ids, mask = pad_batch([encoded[i] for i in idx], tokenizer.pad_token_id)
            hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).float()
            out[idx] = torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)
    return out.numpy()


def lr_baseline_labels(texts: list[str], train: list[Example]) -> list[str]:
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=2000, C=10.0)
    clf.fit(frozen_embeddings([e.text for e in train]), [e.label for e in train])
    return [str(x) for x in clf.predict(frozen_embeddings(texts))]


def evaluate(data: str | Path, *, baselines: bool = True, holdout: bool = False,
             backend: str | None = None, cache_dir: Path | None = None,
             cryptolin: Path | None = None) -> dict[str, Any]:
    """Figures for the shipped model (and baselines) on `data`. `holdout` keeps only the rows of a CryptoLin
    CSV that belong to the held-out validation split (matched by `id`). With the shipped int8 backend, the float
    (fp32 torch) model is measured too, so that the cost of int8 shows in every run. `cryptolin` is CryptoLin's
    train.csv (the model's training data): without it, --holdout is refused, and the overlap with the training
    split and the baseline trained on it are left out, saying why."""
    from models.sentiment.model import build_model, load_model

    rows = read_labelled_csv(data)
    have_cryptolin = cryptolin is not None and Path(cryptolin).is_file()
    if holdout and not have_cryptolin:
        raise FileNotFoundError(f"--holdout needs CryptoLin's train.csv, not found at {cryptolin}: pass --cryptolin PATH")
    train, valid = cryptolin_splits(cryptolin) if have_cryptolin else ([], [])
    if holdout:
        valid_texts = {e.id: e.text.strip() for e in valid}
        rows = [r for r in rows if r.id in valid_texts]
        if not rows:
            raise ValueError(f"{data}: no row has an `id` of the CryptoLin held-out split; drop --holdout")
        # ids alone could match by accident (a CSV without an `id` column numbers its rows by line)
        stray = next((r for r in rows if r.text.strip() != valid_texts[r.id]), None)
        if stray is not None:
            raise ValueError(
                f"{data}: --holdout keeps the CryptoLin held-out rows by `id`, but the row with id {stray.id!r} "
                "does not have CryptoLin's text for that id: this CSV is not CryptoLin (or has no `id` column); "
                "drop --holdout to evaluate on all of its rows"
            )
    texts, gold = [r.text for r in rows], [r.label for r in rows]
    train_texts = {e.text.strip().lower() for e in train}

    model = _measure(lambda: load_model(cache_dir=cache_dir) if backend is None
                     else build_model(backend=backend, cache_dir=cache_dir), texts, gold)
    result: dict[str, Any] = {
        "data": str(data),
        "rows": len(rows),
        "empty_texts": sum(1 for t in texts if not t.strip()),
        "rows_seen_in_training": sum(1 for t in texts if t.strip().lower() in train_texts) if train else None,
        "model": model,
    }
    if not train:
        result["without_training_data"] = f"CryptoLin's train.csv is not at {cryptolin}: no overlap count, no LR baseline"
    if model["backend"] == "int8":
        result["float_model"] = _measure(lambda: build_model(backend="fp32"), texts, gold)
        result["float_model"]["macro_f1_int8_minus_fp32"] = round(model["macro_f1"] - result["float_model"]["macro_f1"], 4)
    if baselines:
        result["baselines"] = {
            "vader": classification_report(gold, vader_labels(texts)),
        }
        if train:
            result["baselines"]["lr_frozen_embeddings"] = {
                **classification_report(gold, lr_baseline_labels(texts, train)),
                "trained_on": f"CryptoLin training split ({len(train)} rows, held-out 15% excluded)",
            }
    return result


def _measure(build: Any, texts: list[str], gold: list[str]) -> dict[str, Any]:
    started = time.perf_counter()
    model = build()
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    predictions = model.predict(texts)
    seconds = time.perf_counter() - started
    return {
        "version": model.version,
        "backend": model.backend,
        "max_tokens": model.max_tokens,
        **classification_report(gold, [p.label for p in predictions]),
        "texts_per_second": round(len(texts) / seconds, 1) if seconds > 0 else None,
        "seconds": round(seconds, 3),
        "load_seconds": round(load_seconds, 3),
    }


def format_report(result: dict[str, Any]) -> str:
    def block(name: str, rep: dict[str, Any]) -> list[str]:
        lines = [f"{name}: accuracy {rep['accuracy']:.4f}  macro-F1 {rep['macro_f1']:.4f}"]
        for label, c in rep["per_class"].items():
            lines.append(f"  {label:<9} precision {c['precision']:.3f}  recall {c['recall']:.3f}  "
                         f"F1 {c['f1']:.3f}  n={c['support']}")
        return lines

    m = result["model"]
    seen = result["rows_seen_in_training"]
    lines = [f"data: {result['data']} ({result['rows']} rows, {result['empty_texts']} empty"
             + (f", {seen} also in the training split)" if seen is not None else ")")]
    if "without_training_data" in result:
        lines.append(f"  note: {result['without_training_data']}")
    lines += block(f"model {m['version']} ({m['backend']}, {m['max_tokens']} tokens)", m)
    lines.append("  confusion (rows = truth, columns = predicted; " + ", ".join(m["labels"]) + "):")
    lines += ["    " + f"{label:<9}" + " ".join(f"{n:>5}" for n in row) for label, row in zip(m["labels"], m["confusion"], strict=True)]
    lines.append(f"  throughput {m['texts_per_second']} texts/s ({m['seconds']} s; model load {m['load_seconds']} s)")
    if "float_model" in result:
        f = result["float_model"]
        lines += block(f"float model {f['version']} (fp32 torch, for reference)", f)
        lines.append(f"  int8 minus fp32 macro-F1: {f['macro_f1_int8_minus_fp32']:+.4f}; throughput "
                     f"{f['texts_per_second']} texts/s")
    for name, rep in result.get("baselines", {}).items():
        lines += block(f"baseline {name}", rep)
        if "trained_on" in rep:
            lines.append(f"  trained on the {rep['trained_on']}")
    return "\n".join(lines)
