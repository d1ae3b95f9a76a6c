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


def fleiss_kappa(votes: Sequence[Sequence[str]], categories: Sequence[str] = LABELS) -> float:
    """Fleiss' kappa of items that each got the same number of votes (e.g. three readers per headline)."""
    if not votes:
        return 0.0
    k = len(votes[0])
    if k < 2 or any(len(v) != k for v in votes):
        raise ValueError("every item needs the same number (>= 2) of votes")
    totals = dict.fromkeys(categories, 0)
    agreement = 0.0
    for item in votes:
        counts = [sum(1 for v in item if v == c) for c in categories]
        for c, n in zip(categories, counts, strict=True):
            totals[c] += n
        agreement += sum(n * (n - 1) for n in counts) / (k * (k - 1))
    p_bar = agreement / len(votes)
    p_e = sum((n / (len(votes) * k)) ** 2 for n in totals.values())
    return (p_bar - p_e) / (1 - p_e) if p_e < 1 else 1.0
