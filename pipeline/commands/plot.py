"""`cryptowire plot sentiment`: a ticker's sentiment over time as a PNG (or SVG, PDF), from the latest serving
snapshot (readable while a run writes the warehouse), with the same buckets as the API's `assetSentiment`."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pipeline.commands.output import (
    emit_json,
    fail,
    file_damage,
    json_option,
    open_latest_snapshot,
    require_out_dir,
    unreadable_snapshot,
    unwritable,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from warehouse.cursors import Instant
    from warehouse.trends import RangeError

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")  # the chart is written in the format --out's suffix names

plot_app = typer.Typer(help="Charts of the served data, written as image files.", no_args_is_help=True,
                       rich_markup_mode=None)  # Click's help, as pipeline/cli.py


def days_shown(series: dict[str, Any]) -> str:
    """The first and last day the series covers: its ``until`` is exclusive (the day after the last one)."""
    last = datetime.fromisoformat(series["until"].rstrip("Z")) - timedelta(microseconds=1)
    return f"{series['since'][:10]} to {last.date().isoformat()}"


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.rstrip("Z"))


def render_sentiment_chart(series: dict[str, Any], out: Path, width: float = 10.0, height: float = 6.0,
                           dpi: int = 100) -> None:
    """Mean score per bucket (top) over stacked article counts by label (bottom), in the format of ``out``'s
    suffix (png, svg or pdf)."""
    import matplotlib.pyplot as plt

    fig = sentiment_figure(series, width, height, dpi)
    try:
        fig.savefig(out, format=out.suffix[1:].lower())
    finally:
        plt.close(fig)


def score_line(buckets: list[dict[str, Any]]) -> tuple[list[datetime], list[float]]:
    """The mean-score line's points: one per bucket with a mean score, at the bucket's start, and a gap (NaN,
    where matplotlib breaks a line) wherever the next point's bucket does not follow at once: buckets with no
    article are not listed, and no data is not a trend between the buckets around them."""
    xs: list[datetime] = []
    ys: list[float] = []
    last_end: datetime | None = None
    for b in buckets:
        start = _utc(b["start"])
        if b["meanScore"] is None:  # articles, none scored: no point, and no line across it either
            last_end = None
            continue
        if xs and last_end != start:
            xs.append(start)
            ys.append(math.nan)
        xs.append(start)
        ys.append(float(b["meanScore"]))
        last_end = _utc(b["end"])
    return xs, ys


def sentiment_figure(series: dict[str, Any], width: float = 10.0, height: float = 6.0, dpi: int = 100) -> Figure:
    """The chart of ``render_sentiment_chart``, not yet written (close it with ``plt.close``). Its x-axis spans
    the series' whole range, ``since`` to ``until``, as the title says, not just the buckets that have data; the
    score line breaks where buckets are missing (``score_line``)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never a display
    import matplotlib.pyplot as plt

    buckets = series["buckets"]
    starts = [_utc(b["start"]) for b in buckets]
    ends = [_utc(b["end"]) for b in buckets]
    width_days = [(e - s).total_seconds() / 86400 * 0.85 for s, e in zip(starts, ends, strict=True)]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(width, height), dpi=dpi,
                                      gridspec_kw={"height_ratios": [3, 2]})
    try:
        xs, ys = score_line(buckets)
        top.axhline(0, color="#888", linewidth=0.8)
        if xs:
            top.plot(xs, ys, marker="o", markersize=3, color="#0072b2")
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
        bottom.set_xlim(_utc(series["since"]), _utc(series["until"]))  # shared with the top axis
        fig.autofmt_xdate()
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    return fig


def _check_ticker(value: str) -> str:
    """--ticker as `assetSentiment`'s `ticker`: a bad symbol is a mistake in the command line (exit 2, usage)."""
    from warehouse.trends import ticker_problem

    value = value.strip()
    problem = ticker_problem(value)
    if problem is not None:
        raise typer.BadParameter(problem)
    return value


def _check_interval(value: str | None) -> str | None:
    if value is not None and value.lower() not in ("hour", "day", "week"):
        raise typer.BadParameter(f"unknown --interval {value!r}: choose hour, day or week")
    return value


def _check_instant(value: str | None) -> str | None:
    """--since / --until read as the API reads `since` / `until`; one that cannot be read is a usage error."""
    from warehouse.cursors import CursorError, parse_instant

    if value is not None:
        try:
            parse_instant(value)
        except CursorError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def _range_advice(exc: RangeError) -> str:
    """``exc``'s advice for a range too wide, as ``warehouse.trends`` gives it, in the command line's terms."""
    from warehouse.trends import shown_instant

    assert exc.problem is not None
    own = next(iter(exc.earliest))  # the interval asked for
    keep = f"--since {shown_instant(exc.earliest[own])} or later"
    if exc.fits is not None:
        return (f"{exc.problem}: --interval {exc.fits.lower()} fits this range, or leave out --interval to pick it; "
                f"or keep --interval {own.lower()} with {keep}")
    return f"{exc.problem}: narrow it: pass {keep}" + "".join(
        f", or --interval {name.lower()} with --since {shown_instant(at)} or later"
        for name, at in exc.earliest.items() if name != own
    )


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


def _check_range(ctx: typer.Context, since: str, until: str, since_at: Instant, until_at: Instant,
                 interval: str | None) -> None:
    """With both --since and --until the range is the command line's alone: one that cannot be served (reversed,
    or too wide for its interval) is a mistake in it whatever the snapshot holds, refused as a usage error (exit 2)
    before the snapshot is opened. (With --since alone the range ends at the snapshot's newest dated article: its
    errors depend on the data, and exit 1.)"""
    from warehouse.trends import RangeError, SentimentRequest, resolve_range

    if since_at.at >= until_at.upper_exclusive():
        raise typer.BadParameter(
            f"--since {since} is after --until {until}: swap them (--since is where the range starts, --until the "
            "last day or instant it covers)", ctx=ctx, param_hint=["--since", "--until"])
    name = interval.upper() if interval else (_fitting(since_at, until_at, None) or "WEEK")
    try:
        resolve_range(SentimentRequest("", name, since_at, until_at), None)
    except RangeError as exc:
        hint = ["--since", "--until"] + (["--interval"] if interval else [])
        raise typer.BadParameter(_range_advice(exc) if exc.problem else str(exc), ctx=ctx, param_hint=hint) from None


def _ask_cli(ticker: str) -> str:
    """How the command line is asked about ``ticker`` (``warehouse.trends`` hints name `assetSentiment` otherwise)."""
    return f"plot it with `--ticker {ticker}`"


def register(app: typer.Typer) -> None:
    @plot_app.command("sentiment")
    def sentiment(
        ctx: typer.Context,
        ticker: str = typer.Option(..., "--ticker", callback=_check_ticker, help="The ticker, e.g. BTC."),
        out: Path = typer.Option(..., "--out", help="The image file to write: .png, .svg or .pdf, in a directory "
                                 "that exists."),
        interval: str | None = typer.Option(
            None, "--interval", callback=_check_interval, help="hour, day or week (default: with --since, the "
            "finest whose buckets fit the range: hour up to 31 days, day up to 2 years, week up to 5 years; "
            "without, day)."),
        since: str = typer.Option(None, "--since", callback=_check_instant, help="From this date or ISO time "
                                  "(default: 30 days, 168 hours or 26 weeks before --until)."),
        until: str = typer.Option(None, "--until", callback=_check_instant, help="To this date (that whole day) "
                                  "or ISO time (default: the newest dated article at or before the snapshot's "
                                  "publication)."),
        as_json: bool = json_option(help="Print the file, range and bucket count as JSON."),
    ) -> None:
        """Chart a ticker's daily (or hourly, weekly) mean sentiment and article counts, as `assetSentiment`."""
        import duckdb

        from warehouse.config import get_settings
        from warehouse.cursors import parse_instant
        from warehouse.trends import (
            RangeError,
            SentimentRequest,
            has_table,
            known_ticker,
            newest_dated,
            sentiment_series,
            series_hints,
            unknown_ticker_hints,
        )

        # Read and checked already by the options' callbacks (a bad value exits 2 with the usage).
        since_at, until_at = (parse_instant(v) if v is not None else None for v in (since, until))
        if since_at is not None and until_at is not None:
            _check_range(ctx, since, until, since_at, until_at, interval)  # a usage error, as the callbacks'
        if out.suffix.lower() not in IMAGE_SUFFIXES:  # a mistake in the command line: a usage error (exit 2)
            raise typer.BadParameter(f"{out}: name a .png, .svg or .pdf file (the chart is written in the format its "
                                     "suffix names)", ctx=ctx, param_hint="--out")
        require_out_dir(out, f"{ticker.lower()}{out.suffix}")
        settings = get_settings()
        if not settings.home.is_dir():  # a wrong CRYPTOWIRE_HOME is likelier than a snapshot to repair
            home = settings.home.absolute()
            what = "is not a directory" if home.exists() else "does not exist"
            fail(f"the data home {home} {what}: check CRYPTOWIRE_HOME (the directory `cryptowire materialize` "
                 "wrote to), or run `cryptowire materialize` to create it and publish a snapshot")
        con, path = open_latest_snapshot(settings.snapshots_dir)
        try:
            if not has_table(con, "sentiment"):  # as `assetSentiment` refuses it: no bucket to plot, whatever the range
                fail(f"the latest snapshot ({path.name}) was published by an older cryptowire and has no sentiment "
                     "buckets (its `sentiment` table came later): run `cryptowire materialize` to publish a new one, "
                     "then plot again")
            # The range's end when --until is not given: never past the snapshot's publication nor this clock.
            facts: dict[str, Any] = {"newest_dated": newest_dated(con, now=datetime.now(UTC).replace(tzinfo=None))}
            newest = facts["newest_dated"]
            if since_at is not None and until_at is None and newest is not None and since_at.at > newest:
                fail(f"--since {since} is after the newest dated article ({newest.isoformat(timespec='minutes')}): "
                     "choose an earlier --since, or give --until too")
            fits = _fitting(since_at, until_at, facts["newest_dated"])
            name = interval.upper() if interval else ("DAY" if since_at is None else fits or "WEEK")
            try:
                series = sentiment_series(con, SentimentRequest(ticker, name, since_at, until_at), facts)
            except RangeError as exc:  # --since alone (see _check_range): the same advice as `assetSentiment`'s
                fail(_range_advice(exc) if exc.problem else f"{exc} (here: --since, --until, --interval)")
            known = bool(series["buckets"]) or known_ticker(con, ticker, facts)
            # A renamed asset's news is under the symbol it had then (MATIC before POL): said, never merged.
            hints = series_hints(con, series, facts, _ask_cli) if known else unknown_ticker_hints(
                con, ticker, facts, _ask_cli)
        except duckdb.Error as exc:
            if not file_damage(exc):
                raise
            fail(unreadable_snapshot(path, exc))  # a part that opened but whose blocks do not read back
        finally:
            con.close()
        if not series["buckets"]:
            listing = ("list the tickers with `cryptowire sql --snapshot \"SELECT ticker, sum(articles) FROM "
                       "sentiment WHERE grain = 'day' GROUP BY ALL ORDER BY 2 DESC\"`")
            if not known:  # as `assetSentiment` refuses it: most likely a typo, widening would not help
                advice = "; ".join(hints) if hints else "check the symbol"
                fail(f"no dated article mentions {series['ticker']}, nor does any undated one in the snapshot: "
                     f"{advice}, or {listing}")
        for hint in hints:
            typer.echo(f"note: {hint}", err=True)
        if not series["buckets"]:
            shown = f"from {series['since']} to {series['until']}" if series["since"] else "in the snapshot"
            fail(f"no dated article mentions {series['ticker']} {shown}: widen --since/--until, or {listing}")
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
