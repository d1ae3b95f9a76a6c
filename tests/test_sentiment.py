"""The sentiment model: the real shipped weights, built offline from the base package plus the delta."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models.sentiment import ModelLoadError, Prediction, SentimentModel, article_text, build_model, load_model
from models.sentiment.data import NEWS_DEV, cryptolin_csv, cryptolin_splits, read_labelled_csv
from models.sentiment.delta import CONFIG_FILE, DELTA_FILE, WEIGHTS_DIR
from models.sentiment.metrics import classification_report
from tests.conftest import PROJECT

CRYPTOLIN = cryptolin_csv()  # the corpus tier only
# The project's own labelled feed headlines (models/eval/README.md): what the behaviour tests read.
FEED_ROWS = read_labelled_csv(PROJECT / "models" / "eval" / "sentiment_feeds.csv")
FEED_SET = Path(__file__).resolve().parents[1] / "models" / "eval" / "sentiment_feeds.csv"


@pytest.fixture(scope="module")
def model(sentiment_cache: Path) -> SentimentModel:
    return load_model(cache_dir=sentiment_cache)


def test_loads_offline_from_package_and_delta(model: SentimentModel) -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert load_model() is model  # once per process
    assert len(model.version) == 12 and int(model.version, 16) >= 0
    assert model.labels == ("negative", "neutral", "positive")


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Bitcoin soars to a new all-time high as institutional investors pile in", "positive"),
        ("Coinbase reports record quarterly profit as trading volume jumps", "positive"),
        ("Crypto exchange hacked, $200 million in user funds stolen", "negative"),
        ("Bitcoin crashes 30% as panic selling wipes out billions", "negative"),
    ],
)
def test_clear_headlines_get_the_right_label(model: SentimentModel, text: str, label: str) -> None:
    (p,) = model.predict([text])
    assert p.label == label, p
    assert (p.score > 0.3) if label == "positive" else (p.score < -0.3)


def test_prediction_fields_are_consistent(model: SentimentModel) -> None:
    texts = [e.text for e in FEED_ROWS[:50]]
    for p in model.predict(texts):
        assert isinstance(p, Prediction)
        assert abs(p.p_negative + p.p_neutral + p.p_positive - 1) < 1e-5
        assert -1 <= p.score <= 1 and abs(p.score - (p.p_positive - p.p_negative)) < 2e-6
        probs = {"negative": p.p_negative, "neutral": p.p_neutral, "positive": p.p_positive}
        assert probs[p.label] == max(probs.values())


def test_batch_and_single_predictions_agree(model: SentimentModel) -> None:
    valid = FEED_ROWS
    texts = [e.text for e in valid[:40]] + ["", "Bitcoin " * 100]  # mixed lengths, an empty and a truncated one
    batched = model.predict(texts)
    alone = [model.predict([t])[0] for t in texts]
    assert [p.label for p in batched] == [p.label for p in alone]
    for b, a in zip(batched, alone, strict=True):
        for field in ("score", "p_negative", "p_neutral", "p_positive"):
            assert abs(getattr(b, field) - getattr(a, field)) <= 1e-4, (b, a)
    assert model.predict(list(reversed(texts))) == list(reversed(batched))  # same batch → identical results


def test_empty_and_whitespace_text_is_neutral_zero(model: SentimentModel) -> None:
    out = model.predict(["", "   \n\t", "Bitcoin crashes 30% as panic selling wipes out billions"])
    assert out[0] == out[1] == Prediction("neutral", 0.0, 0.0, 1.0, 0.0)
    assert out[2].label == "negative"
    assert model.predict([]) == []


def test_version_is_stable_across_loads(model: SentimentModel, sentiment_cache: Path) -> None:
    again = build_model(threads=1, cache_dir=sentiment_cache)
    assert again.version == model.version and again.backend == model.backend == "int8"
    texts = [e.text for e in FEED_ROWS[:30]]
    assert again.predict(texts) == model.predict(texts)
    config = json.loads((WEIGHTS_DIR / CONFIG_FILE).read_text())
    assert (WEIGHTS_DIR / DELTA_FILE).stat().st_size == config["delta"]["bytes"] <= 25_000_000


def test_int8_stays_within_a_hundredth_of_the_float_model(model: SentimentModel) -> None:
    fp32 = build_model(backend="fp32")
    assert fp32.version != model.version  # results differ slightly, so rows scored by each are told apart
    # On the 482 feed headlines: the same label for at least 95 % (0.969-0.971 measured for the last three models;
    # quantizing every product, the feed-forward outputs too, gave 0.92). Which way the ~15 flips fall moves macro-F1
    # on so few headlines by 0.002 (28e3244707c7, bb73be59a000) to 0.022 (564451789351), so the hundredth is
    # checked on the 2,511 development headlines (0.0007 measured for 564451789351).
    for rows, agree, gap in ((FEED_ROWS, 0.95, 0.025), (read_labelled_csv(NEWS_DEV), 0.97, 0.01)):
        texts, gold = [e.text for e in rows], [e.label for e in rows]
        int8_labels, fp32_labels = [p.label for p in model.predict(texts)], [p.label for p in fp32.predict(texts)]
        assert sum(a == b for a, b in zip(int8_labels, fp32_labels, strict=True)) >= agree * len(texts)
        f1_int8 = classification_report(gold, int8_labels)["macro_f1"]
        f1_fp32 = classification_report(gold, fp32_labels)["macro_f1"]
        assert abs(f1_int8 - f1_fp32) <= gap, (len(rows), f1_int8, f1_fp32)


def test_feed_headlines_eval_set_is_well_formed_and_the_model_reads_it_like_a_trader(model: SentimentModel) -> None:
    """models/eval/sentiment_feeds.csv: today's feed headlines, labelled by hand (models/eval/README.md)."""
    with FEED_SET.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    tagging = [json.loads(line)["text"] for line in (FEED_SET.parent / "tagging.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == tagging  # the same 482 headlines, in the same order
    assert {r["label"] for r in rows} == {"negative", "neutral", "positive"}
    predicted = [p.label for p in model.predict([r["text"] for r in rows])]
    report = classification_report([r["label"] for r in rows], predicted)
    # 0.680 measured for model da65c4de96f9 (VADER 0.451): a broken delta or tokenizer lands far below
    assert report["macro_f1"] >= 0.64, report


def test_a_damaged_cached_graph_is_built_again(model: SentimentModel, sentiment_cache: Path, tmp_path: Path) -> None:
    (cached,) = sentiment_cache.glob(f"sentiment-{model.version}-*.onnx")
    damaged = tmp_path / cached.name
    damaged.write_bytes(cached.read_bytes()[:1000])
    again = build_model(cache_dir=tmp_path)
    assert again.version == model.version
    assert damaged.stat().st_size == cached.stat().st_size
    texts = [e.text for e in FEED_ROWS[:30]]
    assert again.predict(texts) == model.predict(texts)


def test_missing_calibration_texts_or_unknown_backend_raise_clear_errors(tmp_path: Path) -> None:
    shutil.copytree(WEIGHTS_DIR, tmp_path / "w")
    (tmp_path / "w" / "calibration.txt").unlink()
    with pytest.raises(ModelLoadError, match=r"calibration texts .* missing.*--calibration-only"):
        build_model(tmp_path / "w")
    with pytest.raises(ValueError, match="backend must be one of"):
        build_model(backend="fp16")


def test_missing_delta_raises_a_clear_error(tmp_path: Path) -> None:
    shutil.copytree(WEIGHTS_DIR, tmp_path / "w")
    (tmp_path / "w" / DELTA_FILE).unlink()
    with pytest.raises(ModelLoadError, match=r"missing.*python -m models\.train"):
        build_model(tmp_path / "w")


def test_corrupt_delta_fails_the_checksum(tmp_path: Path) -> None:
    shutil.copytree(WEIGHTS_DIR, tmp_path / "w")
    path = tmp_path / "w" / DELTA_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="checksum mismatch"):
        build_model(tmp_path / "w")


def test_article_text_uses_title_and_start_of_summary() -> None:
    assert article_text("Bitcoin jumps", "") == "Bitcoin jumps"
    assert article_text("Bitcoin jumps", "<p>Price rose &amp; volume\n grew.</p>") == "Bitcoin jumps. Price rose & volume grew."
    assert article_text("Bitcoin jumps", "Bitcoin jumps - Price rose") == "Bitcoin jumps. Price rose"
    long = article_text("T", "word " * 500)
    assert long.startswith("T. word") and len(long) < 320


def _write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def _cli():
    from pipeline.cli import app

    return app


def test_eval_command_on_a_small_csv(tmp_path: Path) -> None:
    rows = [(e.text, e.label) for e in FEED_ROWS[:30]] + [("  ", "neutral")]
    _write_csv(tmp_path / "small.csv", rows)
    # Without the training data (as in a clone alone): the figures that need it are left out, saying why.
    absent = ["--cryptolin", str(tmp_path / "no-cryptolin.csv")]
    result = CliRunner().invoke(_cli(), ["sentiment", "eval", "--data", str(tmp_path / "small.csv"), "--json", *absent])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["rows"] == 31 and figures["empty_texts"] == 1 and figures["rows_seen_in_training"] is None
    assert "no-cryptolin.csv: no overlap count, no LR baseline" in figures["without_training_data"]
    m = figures["model"]
    assert sum(map(sum, m["confusion"])) == 31 and 0 <= m["macro_f1"] <= 1 and m["texts_per_second"] > 0
    assert m["version"] == load_model().version and m["backend"] == "int8"
    assert figures["float_model"]["backend"] == "fp32"
    assert isinstance(figures["float_model"]["macro_f1_int8_minus_fp32"], float)
    assert set(figures["baselines"]) == {"vader"}

    text = CliRunner().invoke(_cli(), ["sentiment", "eval", "--data", str(tmp_path / "small.csv"), "--no-baselines", *absent])
    assert text.exit_code == 0, text.output
    assert "macro-F1" in text.output and "confusion" in text.output and "texts/s" in text.output
    assert "note: CryptoLin's train.csv is not at" in text.output
    held = CliRunner().invoke(_cli(), ["sentiment", "eval", "--data", str(tmp_path / "small.csv"), "--holdout", *absent])
    assert held.exit_code != 0 and "--holdout needs CryptoLin's train.csv" in held.output


def test_eval_command_rejects_a_csv_without_labels(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("headline,sentiment\nBitcoin up,positive\n", encoding="utf-8")
    result = CliRunner().invoke(_cli(), ["sentiment", "eval", "--data", str(tmp_path / "bad.csv")])
    assert result.exit_code != 0
    assert "missing column(s) label, text" in result.output


@pytest.mark.corpus("cryptolin")
def test_cryptolin_held_out_split_tools(tmp_path: Path) -> None:
    """models/eval/cryptolin_holdout_blind.csv (`python -m models.agreement`) labels exactly the held-out ids, and
    `sentiment eval --holdout` refuses a CSV that is not CryptoLin."""
    from models.agreement import blind_labels

    reader = blind_labels()
    assert sorted(reader) == sorted(e.id for e in cryptolin_splits(CRYPTOLIN)[1])
    assert set(reader.values()) == {"negative", "neutral", "positive"}

    # no `id` column: rows are numbered by line, and some line numbers are held-out ids by accident
    _write_csv(tmp_path / "other.csv", [(f"Headline number {i}", "neutral") for i in range(60)])
    result = CliRunner().invoke(
        _cli(), ["sentiment", "eval", "--data", str(tmp_path / "other.csv"), "--holdout", "--no-baselines"]
    )
    assert result.exit_code != 0
    assert "this CSV is not CryptoLin" in result.output and "drop --holdout" in result.output

    # with the training data: the overlap with the training split is counted, and the LR baseline trained on it
    train = cryptolin_splits(CRYPTOLIN)[0]
    _write_csv(tmp_path / "seen.csv", [(e.text, e.label) for e in train[:20]])
    seen = CliRunner().invoke(
        _cli(), ["sentiment", "eval", "--data", str(tmp_path / "seen.csv"), "--json", "--cryptolin", str(CRYPTOLIN)]
    )
    assert seen.exit_code == 0, seen.output
    figures = json.loads(seen.output)
    assert figures["rows_seen_in_training"] == 20 and set(figures["baselines"]) == {"vader", "lr_frozen_embeddings"}


def test_todays_news_test_part_and_per_asset_figures_hold(model: SentimentModel) -> None:
    """The news corpus's test part (never trained on) and the multi-asset headlines: a broken delta, tokenizer or
    per-asset input lands far below the figures in models/MODEL_CARD.md."""
    from models.sentiment.data import NEWS_TEST, read_labelled_csv
    from models.sentiment.report import per_asset

    rows = read_labelled_csv(NEWS_TEST)
    report = classification_report([r.label for r in rows], [p.label for p in model.predict([r.text for r in rows])])
    assert report["macro_f1"] >= 0.64, report
    assets = per_asset(model)["all"]
    assert assets["asset_labels"] >= 1000
    assert assets["per_asset"]["macro_f1"] >= assets["headline_label_for_every_asset"]["macro_f1"] - 0.01, assets


def test_full_report_from_one_command_without_the_corpora(tmp_path: Path) -> None:
    # the previous model is compared when its git revision is there; left out here to keep the test short
    absent = ["--cryptolin", str(tmp_path / "no-cryptolin.csv"), "--previous", "no-such-revision"]
    result = CliRunner().invoke(_cli(), ["sentiment", "eval", "--no-baselines", "--json", *absent])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert set(report["sets"]) == {"news_test", "feeds", "archive_val"}  # CryptoLin's held-out split needs the corpus
    assert "skipped" in report["cryptolin_holdout"]
    assert report["sets"]["news_test"]["shipped"]["n"] == 1359
    assert report["sets"]["archive_val"]["shipped"]["n"] == 7514
    assert set(report["per_asset"]) >= {"dev", "test", "all"}
    assert report["tickers"]["dated_news_2024_2026"]["headlines"] == 400
    assert report["tickers"]["dated_news_2024_2026_test_part"]["headlines"] == 186
    assert "tickers dated_news_2024_2026_test_part: precision >= 0.97" in report["goals"]
    assert "skipped" in report["tickers"]["dated_cryptolin_2018_2022"]
    assert "news_test_macro_f1 >= 0.80" in report["goals"]
    assert report["previous_model"] == "skipped: no weights at git revision no-such-revision"
    from models.sentiment.report import format_full

    text = format_full(report)
    assert "per-asset sentiment" in text and "goals:" in text and "news_test (1359 headlines)" in text


def test_a_soup_of_the_shipped_delta_with_itself_reads_like_it(tmp_path: Path) -> None:
    """`python -m models.soup` averages two deltas tensor by tensor; averaging a model with itself changes nothing
    that matters, keeps the frozen word embeddings out of the delta, and refuses a weight outside 0..1."""
    from models.soup import soup

    path = soup(WEIGHTS_DIR, WEIGHTS_DIR, 0.3, tmp_path / "soup")
    assert path.stat().st_size < 15_000_000  # the word embeddings stay the base's: not stored
    texts = ["Bitcoin ETF inflows hit a record as BTC tops $100K", "Exchange hacked, $40M in ETH drained",
             "Ethereum developers schedule a call for Thursday"]
    ours = build_model(backend="fp32").predict(texts)
    souped = build_model(tmp_path / "soup", backend="fp32").predict(texts)
    assert [p.label for p in souped] == [p.label for p in ours]
    assert all(abs(a.score - b.score) < 0.02 for a, b in zip(ours, souped, strict=True))
    with pytest.raises(ValueError, match="within 0..1"):
        soup(WEIGHTS_DIR, WEIGHTS_DIR, 1.5, tmp_path / "bad")


def test_word_embeddings_are_tuned_only_when_the_recipe_says() -> None:
    from models.sentiment.training import Recipe, new_net

    assert not new_net(Recipe()).encoder.embeddings.word_embeddings.weight.requires_grad
    assert new_net(Recipe(train_word_embeddings=True)).encoder.embeddings.word_embeddings.weight.requires_grad


def test_per_asset_rows_pair_single_asset_headlines_and_more_rounds_add_pairings() -> None:
    from models.sentiment.data import per_asset_examples

    news = read_labelled_csv(NEWS_DEV)[:400]
    one, two = per_asset_examples(news), per_asset_examples(news, rounds=2)
    assert one and two[: len(one)] == one  # the first round is what a single round gives
    pairs = [e for e in two[len(one):] if e.id.startswith("pair:")]
    assert pairs and len(pairs) == len(two) - len(one)
    assert {e.id for e in pairs} - {e.id for e in one}  # new pairings, not the same again
    for e in two:
        assert e.text.split(":", 1)[0]  # every row names the asset it asks about


# A Ctrl-C that lands inside Thread.start (while predict() starts its batch threads): the thread runs, but Python's
# exit handler never learns of it. With a pool kept for the process, the interpreter then waited for that thread
# at exit forever (seen once: `cryptowire materialize` printed "stopped by SIGINT" and stayed alive).
_INTERRUPTED_START = """
import sys, threading
from pathlib import Path
from models.sentiment import load_model
model = load_model(threads=2, cache_dir=Path(sys.argv[1]))
texts = [f"Bitcoin rallies for the {n}th day as ETF inflows grow" for n in range(200)]
start = threading.Thread.start
def start_then_interrupt(self):
    start(self)
    if self.name.startswith("sentiment"):
        raise KeyboardInterrupt  # after the thread runs, before the pool records it: as a signal can land
threading.Thread.start = start_then_interrupt
try:
    model.predict(texts)
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


def test_a_ctrl_c_while_predict_starts_its_threads_lets_the_process_exit(sentiment_cache: Path) -> None:
    load_model(cache_dir=sentiment_cache)  # the int8 graph built once, in the cache the subprocess reads
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _INTERRUPTED_START, str(sentiment_cache)], cwd=PROJECT,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit after the interrupted predict(): a batch thread outlived it ({exc})")
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr[-2000:]
