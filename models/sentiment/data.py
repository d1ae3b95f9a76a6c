"""Labelled sentiment data: reading `text,label` CSVs and the fixed validation split of CryptoLin."""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

LABELS: tuple[str, ...] = ("negative", "neutral", "positive")

# The held-out split: a stratified 15 % of CryptoLin, chosen by a salted hash of the row id, so it does not
# depend on row order, library versions or random generators. Never train on it.
VALID_FRACTION = 0.15
SPLIT_SALT = "cryptowire-sentiment-v1"


@dataclass(frozen=True)
class Example:
    text: str
    label: str
    id: str = ""
    votes: tuple[str, ...] = ()  # the readers' labels, when several read it (soft labels for training)

    def soft(self) -> list[float]:
        """The share of votes per label (the label alone when there are no votes)."""
        votes = self.votes or (self.label,)
        return [sum(v == label for v in votes) / len(votes) for label in LABELS]


NEWS_DEV = Path(__file__).resolve().parents[1] / "eval" / "sentiment_news_dev.csv"
NEWS_TEST = Path(__file__).resolve().parents[1] / "eval" / "sentiment_news_test.csv"


def shared_sentiment_dir() -> Path:
    """`../shared/data/sentiment` beside the project checkout."""
    return (Path(__file__).resolve().parents[3] / "shared" / "data" / "sentiment").resolve()


def cryptolin_csv() -> Path:
    """CryptoLin's `train.csv` in ``shared_sentiment_dir()``: where every command and test looks for it by default."""
    return shared_sentiment_dir() / "cryptolin" / "train.csv"


def read_labelled_csv(path: str | Path) -> list[Example]:
    """Rows of a CSV with at least `text` and `label` columns (an `id` column is kept when present)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such CSV file: {path} (give a CSV with a header and `text,label` columns)")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        columns = set(reader.fieldnames or [])
        missing = {"text", "label"} - columns
        if missing:
            raise ValueError(
                f"{path}: missing column(s) {', '.join(sorted(missing))}; found {sorted(columns)}. "
                "The CSV needs a header with `text` and `label` columns."
            )
        rows: list[Example] = []
        for line, row in enumerate(reader, start=2):
            label = (row["label"] or "").strip().lower()
            if label not in LABELS:
                raise ValueError(
                    f"{path}:{line}: label {row['label']!r} is not one of {', '.join(LABELS)}"
                )
            votes = tuple(v for v in (row.get("votes") or "").split("|") if v)
            if any(v not in LABELS for v in votes):
                raise ValueError(f"{path}:{line}: votes {row['votes']!r} are not all among {', '.join(LABELS)}")
            rows.append(Example(text=row["text"] or "", label=label, id=(row.get("id") or str(line)), votes=votes))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def _split_key(example_id: str) -> str:
    return hashlib.sha256(f"{SPLIT_SALT}:{example_id}".encode()).hexdigest()


def split_cryptolin(rows: list[Example], fraction: float = VALID_FRACTION) -> tuple[list[Example], list[Example]]:
    """(train, valid): per label, the `fraction` of rows with the smallest salted id hash go to valid."""
    valid_ids: set[str] = set()
    for label in LABELS:
        ids = sorted((r.id for r in rows if r.label == label), key=_split_key)
        valid_ids.update(ids[: round(len(ids) * fraction)])
    train = [r for r in rows if r.id not in valid_ids]
    valid = [r for r in rows if r.id in valid_ids]
    return train, valid


def cryptolin_splits(path: str | Path) -> tuple[list[Example], list[Example]]:
    """(train, valid) of CryptoLin's train.csv at ``path`` (the commands default to ``shared_sentiment_dir()``)."""
    return split_cryptolin(read_labelled_csv(path))


def asset_text(name: str, text: str) -> str:
    """The model input asking about one asset of a text ("Ethereum: BTC rallies as ETH slides")."""
    return f"{name}: {text}"


def per_asset_examples(news: list[Example], seed: int = 0, rounds: int = 1) -> list[Example]:
    """Training rows for per-asset sentiment, built from headlines that name one asset only: each such
    headline asked about its asset, and pairs of them joined ("<h1>; <h2>") asked about each asset in turn,
    with that headline's label and votes; ``rounds`` pairings, each of a new shuffle. No multi-asset headline is
    used, so all of them stay for measuring."""
    import random

    from models.tagging import get_tagger, load_registry

    tag, names = get_tagger().tag, {a.symbol: a.name for a in load_registry()}
    single = []
    for e in news:
        tickers = [t for t in tag(e.text, "").symbols if t in names]
        if len(tickers) == 1:
            single.append((names[tickers[0]], e))
    rows = [Example(asset_text(name, e.text), e.label, f"asset:{e.id}", e.votes) for name, e in single]
    rng = random.Random(seed)
    shuffled = single[:]
    for _ in range(rounds):
        rng.shuffle(shuffled)
        for (n1, e1), (n2, e2) in zip(shuffled[0::2], shuffled[1::2], strict=False):
            if n1 == n2:
                continue
            joined = f"{e1.text.rstrip('.')}; {e2.text}"
            rows.append(Example(asset_text(n1, joined), e1.label, f"pair:{e1.id}:{e2.id}", e1.votes))
            rows.append(Example(asset_text(n2, joined), e2.label, f"pair:{e2.id}:{e1.id}", e2.votes))
    return rows

