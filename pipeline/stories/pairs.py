"""Same story or not: a logistic model over what two articles share, learned from labelled pairs.

The features (``FEATURES``) are the encoder's cosines (title + lede, title alone), the numbers, tickers, content
words and names the two state, their distance in time, whether one outlet published both, and whether they are
generic price pieces (outlets write one per asset and day: two of them share tickers and wording, not news). The weights and the
threshold live in ``pair_model.json``, written by ``python -m pipeline.stories.train`` from the development pairs
of ``models/eval/story_pairs.jsonl`` only (docs/stories.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.stories.cluster import Item

MODEL_FILE = Path(__file__).with_name("pair_model.json")
WINDOW_HOURS = 48.0
# Below this cosine of title + lede two articles are not one story (the lowest of the 574 same pairs of the dev
# part is 0.42), and are not looked at one by one: the sparse features cost Python time per pair.
MIN_COS_TEXT = 0.40

# Order matters: it is the order of the weights in pair_model.json.
FEATURES = (
    "cos_text", "cos_title", "cos_text_sq", "gap",  # dense: computed for every candidate at once
    "shared_number", "title_number_conflict", "ticker_conflict", "shared_ticker",  # 0/1
    "title_words", "lede_words", "names",  # Jaccard overlap, 0..1
    "same_source",  # 0/1
    "price_pieces", "one_price_piece",  # both / one of the two a generic price piece, 0/1
    "sentence_max", "sentence_mean_best", "title_to_sentence",  # cosines between the two's sentences
)
N_DENSE = 4
N_SENTENCE = 3  # the last ones


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def _sentences(item: Item) -> np.ndarray:
    return item.sent_vecs if item.sent_vecs is not None and len(item.sent_vecs) else item.title_vec[None, :]


def sentence_features_many(a: Item, others: Sequence[Item]) -> np.ndarray:
    """``sentence_features`` of ``a`` against each of ``others`` (one row each), with one matrix product: the
    grouping scores a new article against every candidate of its window at once."""
    blocks = [_sentences(b) for b in others]
    if not blocks:
        return np.zeros((0, N_SENTENCE))
    sizes = np.array([len(m) for m in blocks])
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    # within 0..1, as sparse_headroom assumes
    m = np.clip(_sentences(a) @ np.concatenate(blocks).T, 0.0, 1.0)  # a's sentences x all the others'
    best_of_a = np.maximum.reduceat(m, starts, axis=1)  # each sentence of a against each other article
    best_of_b = m.max(axis=0)  # each sentence of the others against a
    return np.column_stack([
        best_of_a.max(axis=0),
        (best_of_a.mean(axis=0) + np.add.reduceat(best_of_b, starts) / sizes) / 2,
        np.maximum(best_of_a[0], m[:, starts].max(axis=0)),
    ])


def sentence_features(a: Item, b: Item) -> list[float]:
    """The best cosine between any sentence of one and any of the other; the mean over both sides of each
    sentence's best match; the best match of either title (row 0) among the other's sentences."""
    return [float(v) for v in sentence_features_many(a, [b])[0]]


def word_features(a: Item, b: Item) -> list[float]:
    """The sparse features before the sentence ones, for one pair."""
    return [
        float(bool(a.numbers & b.numbers)),
        float(bool(a.title_numbers and b.title_numbers and not a.title_numbers & b.title_numbers)),
        float(bool(a.tickers and b.tickers and not a.tickers & b.tickers)),
        float(bool(a.tickers & b.tickers)),
        _jaccard(a.title_words, b.title_words),
        _jaccard(a.lede_words, b.lede_words),
        _jaccard(a.names, b.names),
        float(bool(a.source) and a.source == b.source),
        float(a.price_piece and b.price_piece),
        float(a.price_piece != b.price_piece),
    ]


def sparse_features(a: Item, b: Item) -> list[float]:
    """The features after the dense ones, for one pair."""
    return [*word_features(a, b), *sentence_features(a, b)]


def features(a: Item, b: Item) -> list[float]:
    ct, cti = float(a.text_vec @ b.text_vec), float(a.title_vec @ b.title_vec)
    gap = abs((a.published_at - b.published_at).total_seconds()) / 3600 / WINDOW_HOURS
    return [ct, cti, ct * ct, gap, *sparse_features(a, b)]


@dataclass(frozen=True)
class PairModel:
    weights: tuple[float, ...]  # one per feature
    bias: float
    threshold: float  # probability of "same" at or above which two articles are one story

    @property
    def threshold_logit(self) -> float:
        return math.log(self.threshold / (1 - self.threshold))

    @property
    def sparse_headroom(self) -> float:
        """The most the sparse features (each within 0..1) can add to a logit: candidates whose dense part is
        further below the threshold cannot reach it, and are not looked at one by one."""
        return sum(max(0.0, w) for w in self.weights[N_DENSE:])

    def dense_logits(self, cos_text: np.ndarray, cos_title: np.ndarray, gap: np.ndarray) -> np.ndarray:
        w = self.weights
        return self.bias + w[0] * cos_text + w[1] * cos_title + w[2] * cos_text * cos_text + w[3] * gap

    def sparse_logits(self, a: Item, others: Sequence[Item]) -> np.ndarray:
        """The sparse features' part of the logit of ``a`` against each of ``others``, the sentence part in one matrix product."""
        words = np.array([word_features(a, b) for b in others]).reshape(len(others), -1)
        return (words @ np.asarray(self.weights[N_DENSE:-N_SENTENCE])
                + sentence_features_many(a, others) @ np.asarray(self.weights[-N_SENTENCE:]))

    def probability(self, a: Item, b: Item) -> float:
        x = features(a, b)
        if x[0] < MIN_COS_TEXT:
            return 0.0
        z = self.bias + float(np.dot(self.weights, x))
        return 1 / (1 + math.exp(-z))

    def to_json(self, extra: dict[str, object]) -> str:
        return json.dumps({"features": list(FEATURES), "weights": [round(w, 6) for w in self.weights],
                           "bias": round(self.bias, 6), "threshold": self.threshold, **extra}, indent=2) + "\n"


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iterations: int = 50) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method (the bias is not penalised)."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    penalty = np.diag(np.r_[np.full(x.shape[1], l2), 0.0])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-xb @ w))
        grad = xb.T @ (p - y) + penalty @ w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-9:
            break
    return w[:-1], float(w[-1])


def predict(x: np.ndarray, weights: Sequence[float], bias: float) -> np.ndarray:
    return 1 / (1 + np.exp(-(x @ np.asarray(weights) + bias)))


@lru_cache(maxsize=1)
def load(path: Path = MODEL_FILE) -> PairModel:
    data = json.loads(path.read_text())
    if tuple(data["features"]) != FEATURES:
        raise ValueError(f"{path}: features {data['features']} are not this code's {list(FEATURES)}; "
                         "retrain with `python -m pipeline.stories.train`")
    return PairModel(tuple(float(w) for w in data["weights"]), float(data["bias"]), float(data["threshold"]))
