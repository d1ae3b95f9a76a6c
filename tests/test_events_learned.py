"""The learned price model (pipeline.events.learned): a second look at price levels when the rules find nothing.
Invented headlines; the reference prices are those of the shipped asset table for 2026 articles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.events import ArticleIn, derive_events
from pipeline.events.learned import MODEL_PATH, PriceModel, default_model
from tests.test_events_templates import NAMES, WEDNESDAY


def both(title: str) -> tuple[list[str], list[str]]:
    """(questions of the rules alone, questions with the learned model) for one headline."""
    tickers = tuple(t for t, n in NAMES.items() if re.search(rf"\b({re.escape(t)}|{re.escape(n)})\b", title, re.I))
    article = ArticleIn("a1", title, "", None, None, "Test Wire", WEDNESDAY, tickers, ())
    return ([e.event_title for e in derive_events([article], NAMES, learned=False)],
            [e.event_title for e in derive_events([article], NAMES)])


@pytest.mark.parametrize(("headline", "question"), [
    ("Solana Price Prediction: $300 Next?", "Will Solana close above $300 on March 31, 2026?"),
    ("Can Cardano Bulls Make It to $1?", "Will Cardano close above $1 on March 31, 2026?"),
    ("Is $10 XRP Realistic This Year?", "Will XRP close above $10 on December 31, 2026?"),
])
def test_the_model_finds_phrasings_the_rules_miss(headline: str, question: str) -> None:
    rules, learned = both(headline)
    assert rules == []
    assert learned == [question]


@pytest.mark.parametrize("headline", [
    "What Happens to Solana Should It Break $300 in March?",  # a condition
    "Cardano Fails to Break $1 Again",  # a move that failed
    "Analysts Say XRP May Never Trade Below $1 Again",  # a level denied
    "Solana Treasury Firm Buys $300 Million of SOL",  # an amount bought, not a price
    "Is SOL Price Headed to $150?",  # no direction in the words, the level next to the reference price
])
def test_the_model_keeps_the_guideline_s_refusals(headline: str) -> None:
    assert both(headline) == ([], [])


def test_the_shipped_model_is_what_training_writes(tmp_path: Path) -> None:
    from pipeline.events.price_training import train

    about = train(tmp_path / "model.json")
    assert about["candidates"] > 500 and 0 < about["positive"] < about["candidates"]
    assert json.loads((tmp_path / "model.json").read_text()) == json.loads(MODEL_PATH.read_text())
    model = default_model()
    assert 0.5 <= model.threshold < 1.0 and len(model.weights) > 100
    assert "test" not in model.about["trained_on"]


def test_a_broken_model_file_says_how_to_rebuild_it(tmp_path: Path) -> None:
    broken = tmp_path / "model.json"
    broken.write_text('{"weights": {}', encoding="utf-8")
    with pytest.raises(ValueError, match="price_training"):
        PriceModel.load(broken)
