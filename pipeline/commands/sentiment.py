"""`cryptowire sentiment ...`: the sentiment model's commands. Heavy imports happen inside the commands."""

from __future__ import annotations

from pathlib import Path

import typer

sentiment_app = typer.Typer(help="The sentiment model: evaluate the shipped weights.", no_args_is_help=True)


@sentiment_app.command("eval")
def eval_command(
    data: Path = typer.Option(..., "--data", help="CSV with a header and `text,label` columns "
                              "(labels: negative, neutral, positive)."),
    json_output: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    baselines: bool = typer.Option(True, "--baselines/--no-baselines",
                                   help="Also measure VADER and a logistic-regression head on frozen embeddings "
                                   "(most of a small run's time: --no-baselines for a quick check)."),
    holdout: bool = typer.Option(False, "--holdout", help="Keep only rows (by `id`) of the CryptoLin held-out "
                                 "validation split; use with the CryptoLin CSV."),
    cryptolin: Path = typer.Option(None, "--cryptolin", help="CryptoLin's train.csv, the model's training data "
                                   "(default: ../shared/data/sentiment/cryptolin/train.csv beside the checkout)."),
) -> None:
    """Evaluate the shipped sentiment model on a labelled CSV: accuracy, macro-F1, per-class precision and
    recall, confusion matrix, throughput, and the two baselines measured in the same run."""
    from models.sentiment import ModelLoadError
    from models.sentiment.data import shared_sentiment_dir
    from models.sentiment.evaluate import evaluate, format_report
    from pipeline.commands.output import emit_json, fail
    from warehouse.config import get_settings

    try:
        result = evaluate(data, baselines=baselines, holdout=holdout, cache_dir=get_settings().models_dir,
                          cryptolin=cryptolin or shared_sentiment_dir() / "cryptolin" / "train.csv")
    except (FileNotFoundError, ValueError, ModelLoadError) as exc:
        fail(str(exc))
        return
    if json_output:
        emit_json(result)
    else:
        typer.echo(format_report(result))


def register(app: typer.Typer) -> None:
    app.add_typer(sentiment_app, name="sentiment")
