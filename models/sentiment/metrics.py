"""Classification figures (plain Python, no scikit-learn needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.sentiment.data import LABELS


def classification_report(truth: Sequence[str], predicted: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class precision/recall/F1/support and the confusion matrix (rows = truth)."""
    if len(truth) != len(predicted):
        raise ValueError("truth and predicted differ in length")
    index = {label: i for i, label in enumerate(LABELS)}
    confusion = [[0] * len(LABELS) for _ in LABELS]
    for t, p in zip(truth, predicted, strict=True):
        confusion[index[t]][index[p]] += 1
    per_class: dict[str, dict[str, float]] = {}
    for i, label in enumerate(LABELS):
        tp = confusion[i][i]
        predicted_n = sum(row[i] for row in confusion)
        actual_n = sum(confusion[i])
        precision = tp / predicted_n if predicted_n else 0.0
        recall = tp / actual_n if actual_n else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[label] = {"precision": precision, "recall": recall, "f1": f1, "support": actual_n}
    n = len(truth)
    return {
        "n": n,
        "accuracy": sum(confusion[i][i] for i in range(len(LABELS))) / n if n else 0.0,
        "macro_f1": sum(c["f1"] for c in per_class.values()) / len(LABELS),
        "per_class": per_class,
        "labels": list(LABELS),
        "confusion": confusion,
    }
