"""`cryptowire plot sentiment`: a ticker's sentiment over time as a PNG (or SVG, PDF), from the latest serving
snapshot (readable while a run writes the warehouse), with the same buckets as the API's `assetSentiment`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from pipeline.commands.output import emit_json, fail, latest_snapshot, require_out_dir

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")  # the chart is written in the format --out's suffix names

plot_app = typer.Typer(help="Charts of the served data, written as image files.", no_args_is_help=True,
                       rich_markup_mode=None)  # Click's help, as pipeline/cli.py


def render_sentiment_chart(series: dict[str, Any], out: Path, width: float = 10.0, height: float = 6.0,
                           dpi: int = 100) -> None:
    """Mean score per bucket (top) over stacked article counts by label (bottom), in the format of ``out``'s
    suffix (png, svg or pdf)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never a display
    import matplotlib.pyplot as plt

    buckets = series["buckets"]
    starts = [datetime.fromisoformat(b["start"].rstrip("Z")) for b in buckets]
    ends = [datetime.fromisoformat(b["end"].rstrip("Z")) for b in buckets]
    width_days = [(e - s).total_seconds() / 86400 * 0.85 for s, e in zip(starts, ends, strict=True)]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(width, height), dpi=dpi,
                                      gridspec_kw={"height_ratios": [3, 2]})
    try:
        scored = [(s, b["meanScore"]) for s, b in zip(starts, buckets, strict=True) if b["meanScore"] is not None]
        top.axhline(0, color="#888", linewidth=0.8)
        if scored:
            top.plot([s for s, _ in scored], [m for _, m in scored], marker="o", markersize=3, color="#0072b2")
        top.set_ylim(-1.05, 1.05)
        top.set_ylabel("mean sentiment_score")
        interval = series["interval"].lower()
        top.set_title(f"{series['ticker']}: sentiment per {interval} (UTC), {series['since'][:10]} to "
                      f"{series['until'][:10]}")
        top.grid(alpha=0.3)
        below = [0] * len(buckets)
        for label, color in (("negative", "#d55e00"), ("neutral", "#999999"), ("positive", "#009e73")):
            values = [b[label] for b in buckets]
            bottom.bar(starts, values, width=width_days, bottom=below, align="edge", color=color, label=label)
            below = [a + v for a, v in zip(below, values, strict=True)]
        bottom.set_ylabel("articles")
        bottom.legend(loc="upper left", fontsize="small")
        bottom.grid(alpha=0.3, axis="y")
        fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(out, format=out.suffix[1:].lower())
    finally:
        plt.close(fig)


def register(app: typer.Typer) -> None:
    @plot_app.command("sentiment")
    def sentiment(
        ticker: str = typer.Option(..., "--ticker", help="The ticker, e.g. BTC."),
        out: Path = typer.Option(..., "--out", help="The image file to write: .png, .svg or .pdf, in a directory "
                                 "that exists."),
        interval: str = typer.Option("day", "--interval", help="hour, day or week."),
        since: str = typer.Option(None, "--since", help="From this date or ISO time (default: 30 days, 168 hours "
                                  "or 26 weeks before --until)."),
        until: str = typer.Option(None, "--until", help="To this date (that whole day) or ISO time (default: the "
                                  "newest dated article)."),
        as_json: bool = typer.Option(False, "--json", help="Print the file, range and bucket count as JSON."),
    ) -> None:
        """Chart a ticker's daily (or hourly, weekly) mean sentiment and article counts, as `assetSentiment`."""

        from warehouse.config import get_settings
        from warehouse.read import CursorError, parse_instant
        from warehouse.trends import INTERVALS, RangeError, SentimentRequest, sentiment_series

        if out.suffix.lower() not in IMAGE_SUFFIXES:
            fail(f"--out {out}: name a .png, .svg or .pdf file (the chart is written in the format its suffix names)")
        require_out_dir(out)
        name = interval.upper()
        if name not in INTERVALS:
            fail(f"unknown --interval {interval!r}: choose hour, day or week")
        try:
            bounds = [parse_instant(v) if v is not None else None for v in (since, until)]
        except CursorError as exc:
            fail(f"--since/--until: {exc}")
        settings = get_settings()
        path = latest_snapshot(settings.snapshots_dir)
        from warehouse.parts import connect_snapshot

        con = connect_snapshot(path)
        try:
            series = sentiment_series(con, SentimentRequest(ticker, name, bounds[0], bounds[1]))
        except RangeError as exc:
            fail(f"{exc} (here: --since, --until, --interval)")
        finally:
            con.close()
        if not series["buckets"]:
            shown = f"from {series['since']} to {series['until']}" if series["since"] else "in the snapshot"
            fail(f"no dated article mentions {series['ticker']} {shown}: widen --since/--until, or list the "
                 "tickers with `cryptowire sql --snapshot \"SELECT ticker, sum(articles) FROM sentiment "
                 "WHERE grain = 'day' GROUP BY ALL ORDER BY 2 DESC\"`")
        render_sentiment_chart(series, out)
        articles = sum(b["articles"] for b in series["buckets"])
        if as_json:
            emit_json({"out": str(out), "ticker": series["ticker"], "interval": name, "since": series["since"],
                       "until": series["until"], "buckets": len(series["buckets"]), "articles": articles,
                       "snapshot": path.name})
        else:
            typer.echo(f"wrote {out}: {series['ticker']} per {name.lower()}, {len(series['buckets'])} buckets, "
                       f"{articles} articles ({series['since']} to {series['until']})")

    app.add_typer(plot_app, name="plot")
