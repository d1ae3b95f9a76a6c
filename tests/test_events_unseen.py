"""The unseen-news evaluation set (models/eval/events_unseen.jsonl): its shape, its split, the majority rule,
and the scoring that `python -m pipeline.events.evaluate --split` prints."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import datetime

import pytest

from models.splits import TEST_FROM, TEST_PUBLISHERS, split_of
from pipeline.events.unseen import (
    PART_PATHS,
    VALIDATION_PATH,
    Item,
    agreement,
    load_unseen,
    majority,
    score,
)
from tests.conftest import PROJECT

HELD_BACK = ("u.today", "decrypt.co", "bitcoinmagazine.com")


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return load_unseen()


def test_the_set_is_large_and_from_many_publishers(items: list[Item]) -> None:
    assert len(items) >= 1000
    assert len({it.key for it in items}) == len(items)
    assert len({it.domain for it in items}) >= 8
    by_split = Counter(it.split for it in items)
    assert by_split["test"] >= 500 and by_split["dev"] >= 500, by_split
    assert len({it.domain for it in items if it.split == "test"}) >= 5


def test_no_held_back_publisher(items: list[Item]) -> None:
    for it in items:
        assert not any(it.domain == d or it.domain.endswith("." + d) for d in HELD_BACK), it.key


def test_every_item_is_read_by_three_readers_and_dated_2024_to_2026(items: list[Item]) -> None:
    for it in items:
        assert len(it.readers) == 3, it.key
        assert datetime(2024, 1, 1) <= it.published_at < datetime(2027, 1, 1), it.key
        for reader in it.readers:
            for e in reader["events"]:
                assert e["date"] > it.published_at.strftime("%Y-%m-%d"), it.key


def test_split_is_by_publisher_and_by_date() -> None:
    assert split_of(next(iter(TEST_PUBLISHERS)), datetime(2024, 1, 1)) == "test"
    assert split_of("example-news.com", TEST_FROM) == "test"
    assert split_of("example-news.com", datetime(2024, 1, 1)) == "dev"


def test_a_split_that_disagrees_with_the_rule_is_refused(tmp_path, items: list[Item]) -> None:
    line = json.loads((PROJECT / "models" / "eval" / "events_unseen.jsonl").read_text().splitlines()[0])
    line["split"] = "dev" if line["split"] == "test" else "test"
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="disagrees with the rule"):
        load_unseen(path)


def _event(asset: str, threshold: float, date: str) -> dict:
    return {"asset": asset, "kind": "price_threshold", "comparator": "above", "threshold": threshold, "date": date,
            "subject": None}


def test_majority_needs_two_readers_for_a_question_and_keeps_their_date() -> None:
    readers = [
        {"events": [_event("BTC", 100000, "2026-12-31")]},
        {"events": [_event("btc", 100000.0, "2026-12-31"), _event("ETH", 5000, "2026-12-31")]},
        {"events": []},
    ]
    gold, should, oos = majority(readers)
    assert should and not oos
    assert [(g.asset, g.threshold, g.dates, g.date_ambiguous) for g in gold] == [("BTC", 100000.0, ("2026-12-31",), False)]


def test_majority_with_dates_that_disagree_accepts_any_of_them() -> None:
    readers = [{"events": [_event("BTC", 1, "2026-12-31")]}, {"events": [_event("BTC", 1, "2026-11-30")]},
               {"events": []}]
    (gold,), _, _ = majority(readers)
    assert gold.date_ambiguous and gold.dates == ("2026-11-30", "2026-12-31")


def test_agreement_is_reported(items: list[Item]) -> None:
    a = agreement(items)
    assert a["readers_per_item"] == 3
    assert 0.0 <= a["event_or_not_fleiss_kappa"] <= 1.0
    assert a["majority_says_event"] >= 100


def test_score_counts_right_wrong_and_missed() -> None:
    from pipeline.events.derive import EventCandidate

    def item(key: str, readers: list[dict]) -> Item:
        gold, should, oos = majority(readers)
        return Item(key, "P", "p.example", datetime(2026, 11, 1), "t", "", "test", tuple(readers), gold, should, oos)

    yes = [{"events": [_event("BTC", 100000, "2026-11-30")]}] * 3
    items = [item("right", yes), item("missed", yes), item("spurious", [{"events": []}] * 3)]

    def derive(it: Item) -> EventCandidate | None:
        if it.key == "missed":
            return None
        return EventCandidate("pevt_x", "Will Bitcoin close above $100,000 on November 30, 2026?", "", None, None,
                              it.key, it.published_at, datetime(2026, 11, 30), ("Yes", "No"), ("BTC",), "BTC",
                              "price_threshold", "above", 100000.0, "USD", "", "")

    report = score(items, derive)
    assert (report["gold"], report["derived"], report["correct"]) == (2, 2, 1)
    assert report["precision"] == 0.5 and report["recall"] == 0.5
    assert sorted(e["why"] for e in report["errors"]) == ["derived, but the readers saw no event", "missed"]


def test_cli_prints_the_dev_part() -> None:
    out = subprocess.run([sys.executable, "-m", "pipeline.events.evaluate", "--split", "dev", "--json"], cwd=PROJECT,
                         capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(out.stdout)
    assert report["split"] == "dev" and report["articles"] >= 500
    assert {"precision", "recall", "by_kind", "errors", "agreement"} <= set(report)


def test_the_validation_set_is_development_items_the_unseen_set_does_not_hold(items: list[Item]) -> None:
    """models/eval/events_validation.jsonl: development items (by the split rule) read by three readers after the
    rules were last changed on dev; none of them is in the unseen set, none of a held-back publisher."""
    val = load_unseen(VALIDATION_PATH)
    assert len(val) >= 800 and {it.split for it in val} == {"val"}
    assert all(split_of(it.domain, it.published_at) == "dev" for it in val)
    assert all(len(it.readers) == 3 for it in val)
    assert not {it.key for it in val} & {it.key for it in items}
    assert not any(it.domain == d or it.domain.endswith("." + d) for it in val for d in HELD_BACK)


ARCHIVE_PARTS = [p for p in PART_PATHS if p.startswith("archive")]


@pytest.mark.parametrize("part", ARCHIVE_PARTS)
def test_the_archive_sets_are_development_headlines_no_other_set_holds(items: list[Item], part: str) -> None:
    """models/eval/events_archive*.jsonl: development headlines (no summaries) read by three readers after the rules
    were last changed; none is in the unseen or validation sets or another part, none of a held-back publisher."""
    assert len(ARCHIVE_PARTS) >= 4
    arch = load_unseen(PART_PATHS[part])
    assert len(arch) >= 3000 and {it.split for it in arch} == {part}
    assert all(split_of(it.domain, it.published_at) == "dev" and not it.summary for it in arch)
    assert all(len(it.readers) == 3 for it in arch)
    others = {it.key for it in items} | {it.key for it in load_unseen(VALIDATION_PATH)}
    for other in ARCHIVE_PARTS:
        if other != part:
            others |= {it.key for it in load_unseen(PART_PATHS[other])}
    assert not {it.key for it in arch} & others
    assert not any(it.domain == d or it.domain.endswith("." + d) for it in arch for d in HELD_BACK)


def test_a_validation_item_of_the_test_part_is_refused(tmp_path) -> None:
    line = json.loads(VALIDATION_PATH.read_text(encoding="utf-8").splitlines()[0])
    line["published_at"] = "2025-06-01T00:00:00"  # after TEST_FROM: a test item, whatever its label says
    bad = tmp_path / "val.jsonl"
    bad.write_text(json.dumps(line) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="disagrees with the rule"):
        load_unseen(bad)
