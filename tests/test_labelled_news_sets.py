"""The project's labelled news sets for sentiment and tickers (models/eval/README.md): their shape, split,
votes and agreement, and the tagger measured on them, dated."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime

import pytest

from models.sentiment.data import LABELS, NEWS_DEV, NEWS_TEST, read_labelled_csv
from models.sentiment.metrics import fleiss_kappa
from models.splits import split_of
from tests.conftest import CORPORA, PROJECT

EVAL = PROJECT / "models" / "eval"
HELD_BACK = ("u.today", "decrypt.co", "bitcoinmagazine.com")
HELD_BACK_NAMES = re.compile(r"\bu\.?\s?today\b|\bdecrypt\b|\bbitcoin\s?magazine\b", re.I)


def test_no_labelled_item_beyond_the_shared_fixtures_is_a_held_back_publisher_s() -> None:
    """Items of u.today, decrypt.co and bitcoinmagazine.com beyond the shared fixtures are held back: none may be in
    a labelled set, by link domain or by publisher name (an archive item can name one publisher under another
    site's link)."""
    import csv

    seen = 0
    for path in sorted(EVAL.glob("*.jsonl")) + sorted(EVAL.glob("*.csv")):
        if path.suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as fh:
                rows = list(csv.DictReader(fh))
        else:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for r in rows:
            if r.get("origin") == "shared" or str(r.get("source") or "").startswith("shared:"):
                continue  # the shared fixtures (decrypt-1.xml among them) are allowed
            name = str(r.get("publisher") or r.get("source_name") or "")
            domain = str(r.get("domain") or "")
            assert not any(domain.endswith(d) for d in HELD_BACK), (path.name, r.get("key") or r.get("id"))
            assert not HELD_BACK_NAMES.search(name), (path.name, r.get("key") or r.get("id"), name)
            seen += 1
    assert seen > 20000


def test_news_sentiment_corpus_is_large_split_and_read_three_times() -> None:
    import csv

    rows = {}
    for path, split in ((NEWS_DEV, "dev"), (NEWS_TEST, "test")):
        with path.open(encoding="utf-8", newline="") as fh:
            for r in csv.DictReader(fh):
                assert split_of(r["domain"], datetime.fromisoformat(r["published_at"])) == split, r["id"]
                assert not any(r["domain"].endswith(d) for d in HELD_BACK)
                votes = r["votes"].split("|")
                assert len(votes) == 3 and set(votes) <= set(LABELS)
                assert Counter(votes)[r["label"]] >= 2  # the label is the majority of the three
                rows[r["id"]] = r
    assert len(rows) >= 3000
    assert len({r["domain"] for r in rows.values()}) >= 8
    assert all("2024" <= r["published_at"][:4] <= "2026" for r in rows.values())
    kappa = fleiss_kappa([r["votes"].split("|") for r in rows.values()])
    assert kappa > 0.6  # substantial agreement; the figure is in models/eval/README.md


def test_archive_training_headlines_are_development_only_and_unseen_elsewhere() -> None:
    """sentiment_archive*_dev.csv are trained on, sentiment_archive_val.csv checks what was trained: none of them may
    be a test-part item or repeat a labelled headline (of the corpus or of another archive batch)."""
    import csv

    from models.eval.build_sentiment_archive import fold

    files = [*sorted(EVAL.glob("sentiment_archive*_dev.csv")), EVAL / "sentiment_archive_val.csv"]
    assert "sentiment_archive_dev.csv" in {p.name for p in files}
    rows = []
    for path in files:
        with path.open(encoding="utf-8", newline="") as fh:
            part = list(csv.DictReader(fh))
        assert len(part) >= 7000 and len({r["domain"] for r in part}) >= 8, path.name
        rows += part
    for r in rows:
        assert split_of(r["domain"], datetime.fromisoformat(r["published_at"])) == "dev", r["id"]
        assert not any(r["domain"].endswith(d) for d in HELD_BACK)
        votes = r["votes"].split("|")
        assert len(votes) == 3 and Counter(votes)[r["label"]] >= 2
    others = set()
    for path in (NEWS_DEV, NEWS_TEST):
        with path.open(encoding="utf-8", newline="") as fh:
            others |= {fold(r["text"]) for r in csv.DictReader(fh)}
    assert not others & {fold(r["text"]) for r in rows}
    assert len({fold(r["text"]) for r in rows}) == len(rows)
    assert fleiss_kappa([r["votes"].split("|") for r in rows]) > 0.6


def test_soft_labels_come_from_the_votes() -> None:
    row = next(r for r in read_labelled_csv(NEWS_DEV) if len(set(r.votes)) == 2)
    soft = row.soft()
    assert sum(soft) == pytest.approx(1.0) and max(soft) == pytest.approx(2 / 3)
    assert LABELS[soft.index(max(soft))] == row.label


def test_per_asset_set_has_several_assets_per_headline() -> None:
    rows = [json.loads(line) for line in (EVAL / "sentiment_assets.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 300
    for r in rows:
        assert len(r["tickers"]) >= 2
        for t in r["tickers"].values():
            assert t["label"] in LABELS and Counter(t["votes"])[t["label"]] >= 2
    # the point of the set: assets of one headline often differ
    assert sum(len({t["label"] for t in r["tickers"].values()}) > 1 for r in rows) >= 100


def test_dated_ticker_sets() -> None:
    from models.tagging import get_tagger
    from models.tagging.dated import evaluate, load_set

    news = load_set("news")
    assert len(news) == 400 and all(r["text"] for r in news)
    report = evaluate(None, "all", get_tagger())
    assert "skipped" in report["cryptolin"]  # its texts are not in the repository
    assert report["news"]["precision"] >= 0.95 and report["news"]["mainstream_recall"] >= 0.95


@pytest.mark.corpus("cryptolin")
def test_dated_tickers_on_cryptolin_2018_2022() -> None:
    from models.tagging.dated import evaluate

    report = evaluate(CORPORA["cryptolin"], "all")["cryptolin"]
    assert report["headlines"] == 2146  # the whole of train.csv
    assert report["mainstream_recall"] >= 0.93, report
    assert report["precision"] >= 0.95, report
