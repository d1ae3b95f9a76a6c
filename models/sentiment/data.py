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


def shared_sentiment_dir() -> Path:
    """`../shared/data/sentiment` beside the project checkout."""
    return (Path(__file__).resolve().parents[3] / "shared" / "data" / "sentiment").resolve()


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
            rows.append(Example(text=row["text"] or "", label=label, id=(row.get("id") or str(line))))
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
