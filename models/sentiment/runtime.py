"""ONNX Runtime inference: the fine-tuned network exported to ONNX, its matrix products in int8 with static scales.

Static (calibrated) activation scales are fixed numbers, so a text's result never depends on its batch neighbours;
dynamic int8 computes the scale per batch and was rejected for that (MODEL_CARD.md, "Inference"). The int8 graph
(≈59 MB) is not shipped: it is built from the package plus the delta on first use and cached, keyed by the model
version, this recipe and the ONNX Runtime version.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from models.sentiment.errors import ModelLoadError

RECIPE = "onnx-int8-static-matmul-v2"
# Calibration texts, next to the delta: model inputs (article_text) of the bundled sample feeds, our own content.
CALIBRATION_FILE = "calibration.txt"
CALIBRATION_BATCH = 32
OPSET = 17
BUILD_PREFIX = "sentiment-onnx-"  # a build's temp directory, beside the cache file
# Every build holds this lock shared while its temp directory exists; one taken exclusively proves that no build
# is running, so any temp directory left is a killed build's (the fp32 export alone is 86 MB).
BUILD_LOCK = ".sentiment-build.lock"


def ort_version() -> str:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ModelLoadError(
            "onnxruntime is not installed; install the project's dependencies (`make setup`, or "
            "`.venv/bin/pip install -e .`)"
        ) from exc
    return str(onnxruntime.__version__)


def calibration_texts(path: Path) -> list[str]:
    if not path.is_file():
        raise ModelLoadError(f"the int8 calibration texts {path} are missing; restore them from git "
                             "(`git checkout -- models/sentiment/weights`) or write them with "
                             "`python -m models.train --calibration-only`")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def cache_file(cache_dir: Path, version: str) -> Path:
    return cache_dir / f"sentiment-{version}-int8.onnx"  # the version covers delta, recipe, ORT and calibration


def pad(encoded: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id lists to the longest one (dynamic padding), as int64 arrays."""
    width = max(len(ids) for ids in encoded)
    ids = np.full((len(encoded), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(encoded), width), dtype=np.int64)
    for i, row in enumerate(encoded):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


class _Calibration:
    """The ``CalibrationDataReader`` protocol of onnxruntime.quantization, over tokenized calibration texts."""

    def __init__(self, texts: list[str], tokenizer: Any, max_tokens: int) -> None:
        encoded = tokenizer(texts, truncation=True, max_length=max_tokens)["input_ids"]
        encoded.sort(key=len)
        self._batches = []
        for start in range(0, len(encoded), CALIBRATION_BATCH):
            ids, mask = pad(encoded[start : start + CALIBRATION_BATCH], tokenizer.pad_token_id)
            self._batches.append({"input_ids": ids, "attention_mask": mask})
        self._it: Iterator[dict[str, np.ndarray]] = iter(self._batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._batches)


@contextmanager
def _building(directory: Path) -> Iterator[None]:
    fd = os.open(directory / BUILD_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def remove_leftover_builds(directory: Path, fix: bool = True) -> list[str]:
    """Delete the temp directories of int8 builds a killed process left in ``directory`` (a data home's
    ``models/``), unless a build is running there. One line per directory removed (with ``fix=False``, that
    would be); creates nothing when ``fix`` is false."""

    def leftovers() -> list[Path]:
        return sorted(p for p in directory.glob(f"{BUILD_PREFIX}*") if p.is_dir())

    if not directory.is_dir() or not leftovers():
        return []
    try:
        fd = os.open(directory / BUILD_LOCK, os.O_RDWR | (os.O_CREAT if fix else 0), 0o644)
    except FileNotFoundError:  # no build of this version ever ran here: the directories are older versions'
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return []  # a build is running: its directory is no leftover
        done = []
        for path in leftovers():  # again, under the lock: a build seen above may have finished since
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            if fix:
                shutil.rmtree(path, ignore_errors=True)
            done.append(f"{'removed' if fix else 'would remove'} {path.name}/ ({size / 1e6:.0f} MB), "
                        "a sentiment model build whose process was killed")
        return done
    finally:
        if fd is not None:
            os.close(fd)


def build_int8(net: Any, tokenizer: Any, max_tokens: int, calibration: list[str], out: Path) -> None:
    """Export ``net`` (eval mode) to ONNX and write its int8 form, calibrated on ``calibration``, to ``out``."""
    import onnx
    import torch
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    out.parent.mkdir(parents=True, exist_ok=True)
    with _building(out.parent), tempfile.TemporaryDirectory(prefix=BUILD_PREFIX, dir=out.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        example = (torch.ones((2, 8), dtype=torch.long), torch.ones((2, 8), dtype=torch.long))
        with warnings.catch_warnings(), torch.inference_mode():
            # The tracer warns about two shape-dependent branches in transformers' masking; both take the same
            # way for every input here (mask as long as the ids, at least [CLS] and [SEP]), and the tests
            # check batch-vs-single agreement and agreement with the torch network.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                net, example, str(fp32), input_names=["input_ids", "attention_mask"], output_names=["logits"],
                dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                              "logits": {0: "batch"}},
                opset_version=OPSET, dynamo=False,
            )
        # The feed-forward output products stay fp32: their inputs (GELU outputs) are long-tailed, and one fixed
        # uint8 scale for them moved 7 % of labels away from the float model; without them, 3 % (MODEL_CARD.md).
        keep_fp32 = [node.name for node in onnx.load(str(fp32)).graph.node
                     if node.op_type == "MatMul" and "/output/dense/" in node.name and "/attention/" not in node.name]
        quiet = logging.getLogger()
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # the quantizer logs a "consider pre-processing" notice at WARNING
        try:
            # Only MatMul: the int8 products are the speed-up; LayerNorm, softmax and GELU stay fp32 (quantizing
            # more cost macro-F1, measured). Weights per output channel, activations uint8 (AVX2 u8*s8 kernels).
            quantize_static(
                str(fp32), str(Path(tmp) / "int8.onnx"), _Calibration(calibration, tokenizer, max_tokens),
                quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"], per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=keep_fp32,
            )
        finally:
            quiet.setLevel(level)
        os.replace(Path(tmp) / "int8.onnx", out)


def open_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def logits(session: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return session.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
