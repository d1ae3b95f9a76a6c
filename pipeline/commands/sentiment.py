"""`cryptowire sentiment ...`: the sentiment model's commands. Heavy imports happen inside the commands."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.commands.output import json_option

sentiment_app = typer.Typer(help="The sentiment model: evaluate the shipped weights.", no_args_is_help=True,
                            rich_markup_mode=None)  # Click's help, as pipeline/cli.py


@sentiment_app.command("eval")
def eval_command(
    data: Path = typer.Option(None, "--data", help="CSV with a header and `text,label` columns "
                              "(labels: negative, neutral, positive). Without it: the full report (below)."),
    json_output: bool = json_option(help="Print the figures as JSON."),
    baselines: bool = typer.Option(True, "--baselines/--no-baselines",
                                   help="Also measure VADER and a logistic-regression head on frozen embeddings "
                                   "(most of a small run's time: --no-baselines for a quick check)."),
    holdout: bool = typer.Option(False, "--holdout", help="Keep only rows (by `id`) of the CryptoLin held-out "
                                 "validation split; use with the CryptoLin CSV."),
    cryptolin: Path = typer.Option(None, "--cryptolin", help="CryptoLin's train.csv, the model's training data "
                                   "(default: ../shared/data/sentiment/cryptolin/train.csv beside the checkout)."),
    previous: str = typer.Option(None, "--previous", help="Git revision of the previous model's weights, "
                                 "compared in the full report (default: the last commit before the current model)."),
) -> None:
    """Evaluate the shipped sentiment model. With --data: one labelled CSV (accuracy, macro-F1, per-class
    figures, confusion matrix, throughput, two baselines). Without: the full report, in one run: the news
    corpus's test part, CryptoLin's held-out split, today's feed headlines and the archive's validation headlines
    for the shipped model, the previous model and the baselines; per-asset sentiment on the multi-asset
    headlines; tickers on the labelled sets."""
    from models.sentiment import ModelLoadError
    from models.sentiment.data import cryptolin_csv
    from models.sentiment.evaluate import evaluate, format_report
    from pipeline.commands.output import emit_json, fail
    from warehouse.config import get_settings

    if data is None:
        from models.sentiment.report import format_full, full_report

        try:
            from models.sentiment.report import PREVIOUS_REVISION

            report = full_report(cryptolin or cryptolin_csv(),
                                 cache_dir=get_settings().models_dir, previous=previous or PREVIOUS_REVISION,
                                 baselines=baselines)
        except (FileNotFoundError, ValueError, ModelLoadError) as exc:
            fail(str(exc))
            return
        if json_output:
            emit_json(report)
        else:
            typer.echo(format_full(report))
        return
    try:
        result = evaluate(data, baselines=baselines, holdout=holdout, cache_dir=get_settings().models_dir,
                          cryptolin=cryptolin or cryptolin_csv())
    except (FileNotFoundError, ValueError, ModelLoadError) as exc:
        fail(str(exc))
        return
    if json_output:
        emit_json(result)
    else:
        typer.echo(format_report(result))


def register(app: typer.Typer) -> None:
    app.add_typer(sentiment_app, name="sentiment")
