"""`cryptowire plot sentiment`: a ticker's sentiment over time as a PNG (or SVG, PDF), from the latest serving
snapshot (readable while a run writes the warehouse), with the same buckets as the API's `assetSentiment`."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pipeline.commands.output import (
    emit_json,
    fail,
    json_option,
    latest_snapshot,
    require_out_dir,
    unwritable,
)

if TYPE_CHECKING:
    from warehouse.read import Instant

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")  # the chart is written in the format --out's suffix names

plot_app = typer.Typer(help="Charts of the served data, written as image files.", no_args_is_help=True,
                       rich_markup_mode=None)  # Click's help, as pipeline/cli.py


def days_shown(series: dict[str, Any]) -> str:
    """The first and last day the series covers: its ``until`` is exclusive (the day after the last one)."""
    last = datetime.fromisoformat(series["until"].rstrip("Z")) - timedelta(microseconds=1)
    return f"{series['since'][:10]} to {last.date().isoformat()}"


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
        top.set_title(f"{series['ticker']}: sentiment per {interval} (UTC), {days_shown(series)}")
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


def _fitting(since: Instant | None, until: Instant | None, anchor: datetime | None) -> str | None:
    """The finest interval whose buckets over the range fit `assetSentiment`'s limit, or None when none does."""
    from warehouse.trends import INTERVALS, RangeError, SentimentRequest, resolve_range

    for name in INTERVALS:  # hour, day, week
        try:
            resolve_range(SentimentRequest("", name, since, until), anchor)
        except RangeError:
            continue
        return name
    return None


def register(app: typer.Typer) -> None:
    @plot_app.command("sentiment")
    def sentiment(
        ticker: str = typer.Option(..., "--ticker", help="The ticker, e.g. BTC."),
        out: Path = typer.Option(..., "--out", help="The image file to write: .png, .svg or .pdf, in a directory "
                                 "that exists."),
        interval: str | None = typer.Option(
            None, "--interval", help="hour, day or week (default: with --since, the finest whose buckets fit the "
            "range: hour up to 31 days, day up to 2 years, week up to 5 years; without, day)."),
        since: str = typer.Option(None, "--since", help="From this date or ISO time (default: 30 days, 168 hours "
                                  "or 26 weeks before --until)."),
        until: str = typer.Option(None, "--until", help="To this date (that whole day) or ISO time (default: the "
                                  "newest dated article)."),
        as_json: bool = json_option(help="Print the file, range and bucket count as JSON."),
    ) -> None:
        """Chart a ticker's daily (or hourly, weekly) mean sentiment and article counts, as `assetSentiment`."""

        from warehouse.config import get_settings
        from warehouse.read import CursorError, parse_instant
        from warehouse.trends import INTERVALS, RangeError, SentimentRequest, newest_dated, sentiment_series

        if out.suffix.lower() not in IMAGE_SUFFIXES:
            fail(f"--out {out}: name a .png, .svg or .pdf file (the chart is written in the format its suffix names)")
        require_out_dir(out, f"{ticker.lower()}{out.suffix}")
        if interval is not None and interval.upper() not in INTERVALS:
            fail(f"unknown --interval {interval!r}: choose hour, day or week")
        try:
            since_at, until_at = (parse_instant(v) if v is not None else None for v in (since, until))
        except CursorError as exc:
            fail(f"--since/--until: {exc}")
        settings = get_settings()
        path = latest_snapshot(settings.snapshots_dir)
        from warehouse.parts import connect_snapshot

        con = connect_snapshot(path)
        try:
            facts = {"newest_dated": newest_dated(con)}  # the range's end when --until is not given
            newest = facts["newest_dated"]
            if since_at is not None and until_at is None and newest is not None and since_at.at > newest:
                fail(f"--since {since} is after the newest dated article ({newest.isoformat(timespec='minutes')}): "
                     "choose an earlier --since, or give --until too")
            fits = _fitting(since_at, until_at, facts["newest_dated"])
            name = interval.upper() if interval else ("DAY" if since_at is None else fits or "WEEK")
            try:
                series = sentiment_series(con, SentimentRequest(ticker, name, since_at, until_at), facts)
            except RangeError as exc:
                hint = f"; --interval {fits.lower()} fits this range, or leave out --interval to pick it" if fits else ""
                fail(f"{exc} (here: --since, --until, --interval){hint}")
        finally:
            con.close()
        if not series["buckets"]:
            shown = f"from {series['since']} to {series['until']}" if series["since"] else "in the snapshot"
            fail(f"no dated article mentions {series['ticker']} {shown}: widen --since/--until, or list the "
                 "tickers with `cryptowire sql --snapshot \"SELECT ticker, sum(articles) FROM sentiment "
                 "WHERE grain = 'day' GROUP BY ALL ORDER BY 2 DESC\"`")
        try:
            render_sentiment_chart(series, out)
        except OSError as exc:
            fail(unwritable(out, exc))
        articles = sum(b["articles"] for b in series["buckets"])
        chosen = "" if interval else " (no --interval: " + (
            "the finest whose buckets fit the range)" if since_at else "the default without --since)")
        if as_json:
            emit_json({"out": str(out), "ticker": series["ticker"], "interval": name, "since": series["since"],
                       "until": series["until"], "buckets": len(series["buckets"]), "articles": articles,
                       "snapshot": path.name})
        else:
            typer.echo(f"wrote {out}: {series['ticker']} per {name.lower()}{chosen}, {len(series['buckets'])} "
                       f"buckets, {articles} articles ({days_shown(series)}, UTC)")

    app.add_typer(plot_app, name="plot")
