"""Read-side queries over a serving snapshot for sentiment over time and trending tickers and topics.

Both are anchored to the snapshot's **newest dated article** (the latest ``published_at`` among articles whose
date is real, ``date_inferred`` false) **at or before the snapshot's publication** (``snapshot_info.created_at``;
the command line also caps it at its own clock), never to the clock: the same snapshot gives the same answer at
any time. Ingest takes a date up to a day past the fetch as real, so one article dated in the near future would
otherwise move every window past the news and leave trending empty; such an article still counts in its own
buckets, it just never anchors.

Sentiment series (``sentiment`` table, copied from the warehouse's ``asset_sentiment``): buckets of an hour or a
day, and weeks (Monday 00:00 UTC) summed from the day buckets when asked. A range covers the buckets from the one
holding ``since`` to the one holding ``until``; only buckets with at least one article are returned.

Trending (``news`` table): the latest window is ``(anchor - window, anchor]``; the baseline is the
``BASELINE / window`` windows of the same length just before it (168 hours or 7 days), empty windows counting as
0, but only the windows the snapshot has data for: those that start at or after its **oldest dated article**
(time before the data began is not "no mention"). Below ``MIN_BASELINE`` such windows (a day of hours, two days)
nothing is ranked. An item trends when it has at least ``MIN_COUNT`` mentions in the latest window and more than
its baseline mean; items are ranked by z-score ``(count - mean) / max(std, 1)`` (the floor keeps items never or
rarely seen before from unbounded scores), then by count, then by name. A baseline shorter than the full one comes
with a note (``_notes``: messages for the answer's ``extensions.notes``).

Renamed assets (``assets`` table, copied from the warehouse's ``crypto_assets`` at publish): tagging gives an
article the symbol its asset had on the article's day (MATIC before 2024-09-04, POL since), and a ticker's series
stays that ticker's. ``rename_hints`` says when a range reaches across a rename, and ``name_hint`` what symbol a
name (``bitcoin``) stands for. A snapshot without the table (an older cryptowire's) gives no hints.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import duckdb

from warehouse.cursors import Instant, iso_ms
from warehouse.read import has_column, snapshot_fact

INTERVALS = {"HOUR": timedelta(hours=1), "DAY": timedelta(days=1), "WEEK": timedelta(weeks=1)}
MAX_BUCKETS = {"HOUR": 24 * 31, "DAY": 732, "WEEK": 262}  # 31 days of hours, 2 years of days, 5 years of weeks
DEFAULT_BUCKETS = {"HOUR": 24 * 7, "DAY": 30, "WEEK": 26}  # without `since`: the last week, month, half-year
WINDOWS = {"HOUR": timedelta(hours=1), "DAY": timedelta(days=1)}
BASELINE = timedelta(days=7)
# Baseline windows with data a ranking needs (a day of hours, two days): with less, a first burst of news would
# rank everything it names. Fewer than the full baseline but at least these: ranked, with a note.
MIN_BASELINE = {"HOUR": 24, "DAY": 2}
MIN_COUNT = 3
STD_FLOOR = 1.0
_US = timedelta(microseconds=1)


# A ticker as `assetSentiment` and `cryptowire plot sentiment` take it: what tagging writes, and nothing to quote.
TICKER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,19}")


def ticker_problem(ticker: str) -> str | None:
    """What is wrong with ``ticker`` as a symbol (to follow the argument's name in a message), or None."""
    if TICKER_RE.fullmatch(ticker):
        return None
    return f"must be a symbol such as BTC (letters, digits, '.' or '-', at most 20; got {ticker[:40]!r})"


class RangeError(ValueError):
    """A sentiment range that cannot be served; the message says what to do. For a range too wide, ``problem``
    says why, ``fits`` names the finest coarser interval that covers the range as asked (None when none does),
    and ``earliest`` the earliest ``since`` that keeps the range's end for the asked interval and for each
    coarser one that does not fit either (so that the command line can give the same advice in its terms)."""

    def __init__(self, message: str, problem: str | None = None, fits: str | None = None,
                 earliest: dict[str, datetime] | None = None) -> None:
        super().__init__(message)
        self.problem = problem
        self.fits = fits
        self.earliest = earliest or {}


def shown_instant(at: datetime) -> str:
    """A plain date at midnight (what DAY and WEEK bounds are), else the ISO instant: both are valid `since`."""
    return at.date().isoformat() if at == datetime(at.year, at.month, at.day) else iso_ms(at)


def _too_wide(req: SentimentRequest, start: datetime, end: datetime, last: datetime) -> RangeError:
    """The error for a range holding more buckets than ``req.interval`` allows, with advice that works: a coarser
    interval only when its own buckets fit, else the earliest ``since`` per interval (narrowing ``since`` alone
    to one bucket of the old advice could still be too wide)."""
    buckets = (end - start) // INTERVALS[req.interval]
    problem = (f"`assetSentiment` with interval {req.interval} returns at most {MAX_BUCKETS[req.interval]} buckets; "
               f"the range from {iso_ms(start)} to {iso_ms(end)} holds {buckets}")
    names = list(INTERVALS)  # finest first
    fits = None
    earliest: dict[str, datetime] = {}
    for name in names[names.index(req.interval):]:
        step = INTERVALS[name]
        name_end = bucket_start(last, name) + step
        if name != req.interval and (name_end - bucket_start(start, name)) // step <= MAX_BUCKETS[name]:
            fits = name
            break
        earliest[name] = name_end - step * MAX_BUCKETS[name]  # after `start`, so always representable
    own = f"`since` {shown_instant(earliest[req.interval])} or later"
    if fits is not None:
        advice = f"interval {fits} fits this range, or pass {own}"
    else:
        advice = f"narrow it: pass {own}" + "".join(
            f", or interval {name} with `since` {shown_instant(at)} or later"
            for name, at in earliest.items() if name != req.interval
        )
    return RangeError(f"{problem}: {advice}", problem, fits, earliest)


def bucket_start(at: datetime, interval: str) -> datetime:
    """The start of the bucket holding ``at``: the hour, the day, or the week's Monday (UTC)."""
    if interval == "HOUR":
        return at.replace(minute=0, second=0, microsecond=0)
    day = datetime(at.year, at.month, at.day)
    return day - timedelta(days=day.weekday()) if interval == "WEEK" else day


@dataclass(frozen=True)
class SentimentRequest:
    ticker: str
    interval: str  # HOUR | DAY | WEEK
    since: Instant | None = None
    until: Instant | None = None


def resolve_range(req: SentimentRequest, anchor: datetime | None) -> tuple[datetime, datetime] | None:
    """``[first bucket start, last bucket end)``; missing ``until`` is the anchor (``newest_dated``), missing
    ``since`` the default number of buckets before it. None when there is nothing to anchor to. A ``since`` after
    ``until``, given or the anchor, is a RangeError."""
    try:
        return _resolve_range(req, anchor)
    except OverflowError:  # e.g. until 9999-12-31: its bucket ends past the last representable time
        raise RangeError("`since` and `until` must be dates between the years 2 and 9998") from None


def _resolve_range(req: SentimentRequest, anchor: datetime | None) -> tuple[datetime, datetime] | None:
    step = INTERVALS[req.interval]
    if req.since is not None and req.until is not None and req.since.at >= req.until.upper_exclusive():
        raise RangeError(
            f"`since` ({iso_ms(req.since.at)}) is after `until` ({iso_ms(req.until.upper_exclusive() - _US)}): "
            "pass the earlier instant as `since`"
        )
    if req.since is not None and req.until is None and anchor is not None and req.since.at > anchor:
        # The default `until` is the anchor: a `since` after it is a reversed range, refused as an explicit one is
        # (it could only answer nothing, and charge for it).
        raise RangeError(
            f"`since` ({iso_ms(req.since.at)}) is after `until`, which defaults to the snapshot's newest dated "
            f"article ({iso_ms(anchor)}): pass an earlier `since`, or an `until` after it too"
        )
    if req.until is not None:
        last = req.until.upper_exclusive() - _US
    elif anchor is not None:
        last = anchor
    else:
        return None
    end = bucket_start(last, req.interval) + step
    start = (bucket_start(req.since.at, req.interval) if req.since is not None
             else end - step * DEFAULT_BUCKETS[req.interval])
    if (end - start) // step > MAX_BUCKETS[req.interval]:
        raise _too_wide(req, start, end, last)
    return start, end


def max_buckets(req: SentimentRequest, anchor: datetime | None = None) -> int:
    """Buckets a request may return, known before it runs (its cost): the range's own count when both ends are
    given, or when only ``since`` is and the snapshot's ``anchor`` (``newest_dated``, the default ``until``) is
    known; the limit when only ``since`` is and the anchor is not; else the default count."""
    if req.since is not None and (req.until is not None or anchor is not None):
        found = resolve_range(req, anchor)
        assert found is not None
        return (found[1] - found[0]) // INTERVALS[req.interval]
    if req.since is not None:
        return MAX_BUCKETS[req.interval]
    return DEFAULT_BUCKETS[req.interval]


def has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """A table, or a view (a partitioned snapshot serves its tables as views over the parts)."""
    return bool(con.execute(
        "SELECT 1 FROM duckdb_tables() WHERE table_name = $t AND database_name = current_database() "
        "UNION ALL SELECT 1 FROM duckdb_views() WHERE view_name = $t AND database_name = current_database()",
        {"t": table},
    ).fetchall())


def published(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """When the snapshot was published (``snapshot_info.created_at``, naive UTC; a set's is its head's), or None
    for a file that does not say."""
    if not has_column(con, "snapshot_info", "created_at"):
        return None
    return con.execute("SELECT max(created_at) FROM snapshot_info").fetchall()[0][0]


def newest_dated(con: duckdb.DuckDBPyConnection, now: datetime | None = None) -> datetime | None:
    """The anchor: the newest article whose date is real (any article in snapshots that cannot tell), at or before
    the snapshot's publication and ``now`` (naive UTC) when given: an article dated after them is a date in the
    future (ingest accepts up to a day ahead), which would move every window past the news."""
    where = ["NOT date_inferred"] if has_column(con, "news", "date_inferred") else []
    caps = [at for at in (published(con), now) if at is not None]
    if caps:
        where.append("published_at <= $cap")
    sql = "SELECT max(published_at) FROM news" + (" WHERE " + " AND ".join(where) if where else "")
    return con.execute(sql, {"cap": min(caps)} if caps else {}).fetchall()[0][0]


def oldest_dated(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """Where the snapshot's data begins: its oldest article whose date is real (any article in snapshots that
    cannot tell). Trending's baseline covers no time before it."""
    dated = " WHERE NOT date_inferred" if has_column(con, "news", "date_inferred") else ""
    return con.execute("SELECT min(published_at) FROM news" + dated).fetchall()[0][0]


def data_start(con: duckdb.DuckDBPyConnection, anchor: datetime) -> datetime | None:
    """Where the snapshot's continuous data begins, looking back from ``anchor`` (its newest dated article): the
    start of the oldest of the days before it that all hold a dated article, or the oldest dated article when every
    day of the baseline does. One article of weeks ago in a new home's first fetch is no history: its days between
    are empty, and trending must not read them as zero mentions."""
    oldest = oldest_dated(con)
    if oldest is None:
        return None
    dated = " AND NOT date_inferred" if has_column(con, "news", "date_inferred") else ""
    days = {int(k) for (k,) in con.execute(
        "SELECT DISTINCT (epoch_us($anchor) - epoch_us(published_at)) // $day FROM news "
        f"WHERE published_at <= $anchor AND published_at > $anchor - INTERVAL 9 DAY{dated}",
        {"anchor": anchor, "day": timedelta(days=1) // _US},
    ).fetchall()}
    gap = next(k for k in range(0, 10) if k not in days)
    return oldest if gap >= 9 else max(oldest, anchor - timedelta(days=gap))


def known_ticker(con: duckdb.DuckDBPyConnection, ticker: str, facts: dict[str, Any] | None = None) -> bool:
    """Whether the snapshot lists ``ticker`` (``filter_values``, what the `tickers` field lists: every ticker of
    any article, dated or not, or event). ``facts``: the snapshot's memo (see ``snapshot_fact``)."""
    known = snapshot_fact(facts, "tickers", lambda: frozenset(
        str(v).upper() for (v,) in con.execute("SELECT value FROM filter_values WHERE kind = 'tickers'").fetchall()
    ))
    return ticker.strip().upper() in known


@dataclass(frozen=True)
class Asset:
    """An asset as the snapshot's ``assets`` table has it. ``former``: the symbol tagging gives news dated before
    ``renamed`` (the day the rename took effect, UTC); None for an asset never renamed (or of unknown date)."""

    symbol: str
    name: str
    names: tuple[str, ...]  # the name and its aliases
    former: str | None
    renamed: date | None

    @property
    def renamed_at(self) -> datetime:
        """The first instant under ``symbol`` (naive UTC); only for a renamed asset."""
        assert self.renamed is not None
        return datetime(self.renamed.year, self.renamed.month, self.renamed.day)


def assets(con: duckdb.DuckDBPyConnection, facts: dict[str, Any] | None = None) -> dict[str, Asset]:
    """The snapshot's assets by symbol (``warehouse.publish.write_assets``); empty for a snapshot without them."""

    def read() -> dict[str, Asset]:
        if not has_table(con, "assets"):
            return {}
        rows = con.execute("SELECT symbol, name, aliases, former_symbols, renamed FROM assets").fetchall()
        return {
            str(symbol).upper(): Asset(str(symbol).upper(), str(name), (str(name), *map(str, aliases or [])),
                                       str(former[0]).upper() if former and renamed is not None else None, renamed)
            for symbol, name, aliases, former, renamed in rows
        }

    return snapshot_fact(facts, "assets", read)


def ask_api(ticker: str) -> str:
    """How `assetSentiment` is asked about ``ticker`` (the command line words it its own way)."""
    return f'ask assetSentiment(ticker: "{ticker}")'


def rename_hints(con: duckdb.DuckDBPyConnection, ticker: str, start: datetime | None = None,
                 end: datetime | None = None, facts: dict[str, Any] | None = None,
                 ask: Callable[[str], str] = ask_api) -> list[str]:
    """What to ask instead when ``ticker``'s asset was renamed and the range ``[start, end)`` (None: unbounded)
    reaches across the rename: before it for the current symbol (news then is tagged with the former one), after
    it for the former symbol. Only symbols the snapshot lists are suggested (asking another would be refused)."""
    ticker = ticker.strip().upper()
    found = assets(con, facts)
    hints = []
    mine = found.get(ticker)
    for asset in found.values():
        if asset.former is None or asset.renamed is None:
            continue
        at, day = asset.renamed_at, asset.renamed.isoformat()
        if asset is mine and (start is None or start < at) and known_ticker(con, asset.former, facts):
            hints.append(f"{ticker} was {asset.former} until {day}: news before then counts under {asset.former}; "
                         f"{ask(asset.former)}")
        if asset.former == ticker and (end is None or end > at) and known_ticker(con, asset.symbol, facts):
            hints.append(f"{ticker} became {asset.symbol} on {day}: news from then on counts under {asset.symbol}; "
                         f"{ask(asset.symbol)}")
    return hints


def series_hints(con: duckdb.DuckDBPyConnection, series: dict[str, Any], facts: dict[str, Any] | None = None,
                 ask: Callable[[str], str] = ask_api) -> list[str]:
    """``rename_hints`` for the range a ``sentiment_series`` answer covers (none when it has no range)."""
    if series["since"] is None or series["until"] is None:
        return []
    start, end = (datetime.fromisoformat(series[k].rstrip("Z")) for k in ("since", "until"))
    return rename_hints(con, series["ticker"], start, end, facts, ask)


def unknown_ticker_hints(con: duckdb.DuckDBPyConnection, ticker: str, facts: dict[str, Any] | None = None,
                         ask: Callable[[str], str] = ask_api) -> list[str]:
    """For a ticker the snapshot does not list: the symbol it had before or after a rename, or the symbol of the
    name it is, when the snapshot lists that one."""
    hints = rename_hints(con, ticker, None, None, facts, ask)
    named = name_hint(con, ticker, facts, ask)
    return hints + ([named] if named is not None else [])


def name_hint(con: duckdb.DuckDBPyConnection, text: str, facts: dict[str, Any] | None = None,
              ask: Callable[[str], str] = ask_api) -> str | None:
    """When ``text`` is not a symbol but an asset's name or alias (case-insensitive: ``bitcoin``), the symbol to
    ask for instead (and the former one, for the news of before a rename), among those the snapshot lists."""
    wanted = text.strip().lower()
    found = assets(con, facts)
    if wanted.upper() in found:
        return None
    hints = []
    for asset in found.values():
        if wanted not in (n.lower() for n in asset.names):
            continue
        symbols = [s for s in (asset.symbol, asset.former) if s is not None and known_ticker(con, s, facts)]
        if not symbols:
            continue
        hint = f"{text.strip()!r} is {asset.name}'s name, not its symbol: {ask(symbols[0])}"
        if len(symbols) > 1 and asset.renamed is not None:
            hint += f" ({symbols[1]} for news before {asset.renamed.isoformat()})"
        hints.append(hint)
    return "; ".join(hints) or None


def _bucket(start: datetime, step: timedelta, articles: int, pos: int, neu: int, neg: int, scored: int,
            score_sum: float) -> dict[str, Any]:
    return {
        "start": iso_ms(start), "end": iso_ms(start + step), "articles": articles, "positive": pos, "neutral": neu,
        "negative": neg, "scored": scored, "meanScore": round(score_sum / scored, 6) if scored else None,
    }


def sentiment_series(con: duckdb.DuckDBPyConnection, req: SentimentRequest,
                     facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{ticker, interval, since, until, buckets}`` for one ticker; raises RangeError for a range too wide.
    ``facts``: the snapshot's memo (see ``snapshot_fact``)."""
    ticker = req.ticker.strip().upper()
    anchor = snapshot_fact(facts, "newest_dated", lambda: newest_dated(con))
    found = resolve_range(req, anchor)
    out: dict[str, Any] = {"ticker": ticker, "interval": req.interval, "since": None, "until": None, "buckets": []}
    if found is None:
        return out
    start, end = found
    out["since"], out["until"] = iso_ms(start), iso_ms(end)
    # a snapshot published before the series existed has none
    if not snapshot_fact(facts, "has_sentiment", lambda: has_table(con, "sentiment")):
        return out
    grain = "hour" if req.interval == "HOUR" else "day"
    rows = con.execute(
        """SELECT bucket_start, articles, positive, neutral, negative, scored, coalesce(mean_score * scored, 0)
           FROM sentiment WHERE ticker = ? AND grain = ? AND bucket_start >= ? AND bucket_start < ?
           ORDER BY bucket_start""",
        [ticker, grain, start, end],
    ).fetchall()
    step = INTERVALS[req.interval]
    if req.interval != "WEEK":
        out["buckets"] = [_bucket(r[0], step, *r[1:]) for r in rows]
        return out
    weeks: dict[datetime, list[float]] = {}
    for day, *figures in rows:  # a week's mean is weighted by its days' scored articles
        acc = weeks.setdefault(bucket_start(day, "WEEK"), [0, 0, 0, 0, 0, 0.0])
        for i, v in enumerate(figures):
            acc[i] += v
    out["buckets"] = [
        _bucket(week, step, int(a), int(p), int(n), int(g), int(s), float(t))
        for week, (a, p, n, g, s, t) in sorted(weeks.items())
    ]
    return out


def trending(con: duckdb.DuckDBPyConnection, kind: str, window: str, first: int,
             facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``first`` tickers (``kind`` = tickers) or topics standing out in the latest window. ``facts``: the
    snapshot's memo (see ``snapshot_fact``): the ranking depends on nothing but the snapshot, so it is computed once per
    snapshot, kind and window (a scan of a week of news) and each request takes its ``first``."""
    if kind not in ("tickers", "topics"):
        raise ValueError(f"kind must be tickers or topics, not {kind!r}")
    ranked = snapshot_fact(facts, f"trending:{kind}:{window}", lambda: _ranking(con, kind, window, facts))
    return {**ranked, "items": ranked["items"][:first]}


def _ranking(con: duckdb.DuckDBPyConnection, kind: str, window: str, facts: dict[str, Any] | None) -> dict[str, Any]:
    step = WINDOWS[window]
    windows = BASELINE // step
    anchor = snapshot_fact(facts, "newest_dated", lambda: newest_dated(con))
    out: dict[str, Any] = {
        "window": window, "windowStart": None, "windowEnd": None, "baselineStart": None,
        "baselineWindows": 0, "minCount": MIN_COUNT, "items": [], "_notes": [],
    }
    if anchor is None:
        return out
    # The baseline's windows that lie wholly in the data (at or after the oldest dated article): before it, a
    # window's zero is no data, not no mention. Mentions in the window holding the oldest article are left out too.
    oldest = snapshot_fact(facts, "data_start", lambda: data_start(con, anchor))
    covered = windows if oldest is None else max(0, min(windows, (anchor - oldest) // step - 1))
    start = anchor - step * (covered + 1)
    out["windowStart"], out["windowEnd"] = iso_ms(anchor - step), iso_ms(anchor)
    out["baselineStart"], out["baselineWindows"] = iso_ms(start), covered
    unit = "hour" if window == "HOUR" else "day"
    if covered < windows and oldest is not None:
        begins = f"the snapshot's dated news runs without a day's gap from {iso_ms(oldest)}"
        if covered < MIN_BASELINE[window]:
            out["_notes"].append(
                f"{begins}: the baseline has {covered} of its {windows} {unit}s of data, and trending needs at "
                f"least {MIN_BASELINE[window]}: nothing is ranked until then (`baselineWindows` says how many)")
            return out
        out["_notes"].append(
            f"{begins}: the baseline has {covered} of its {windows} {unit}s of data (from `baselineStart`): the "
            "figures rest on less history than usual")
    told_apart = snapshot_fact(facts, "news_date_inferred", lambda: has_column(con, "news", "date_inferred"))
    dated = "AND NOT date_inferred" if told_apart else ""
    # k = 0 is the latest window (anchor - step, anchor]; k = 1 .. covered the baseline, newest first.
    rows = con.execute(
        f"""WITH m AS (
                SELECT unnest({kind}) AS name, (epoch_us($anchor) - epoch_us(published_at)) // $step AS k
                FROM news WHERE published_at <= $anchor AND published_at > $from {dated}
            ),
            per AS (SELECT name, k, count(*) AS n FROM m GROUP BY ALL)
            SELECT name, coalesce(sum(n) FILTER (WHERE k = 0), 0) AS c,
                   coalesce(sum(n) FILTER (WHERE k > 0), 0) AS total,
                   coalesce(sum(n * n) FILTER (WHERE k > 0), 0) AS squares
            FROM per GROUP BY name HAVING c >= $min""",
        {"anchor": anchor, "step": step // _US, "from": start, "min": MIN_COUNT},
    ).fetchall()
    items = []
    for name, count, total, squares in rows:
        mean = total / covered
        std = math.sqrt(max(0.0, squares / covered - mean * mean))
        if count <= mean:
            continue
        z = (count - mean) / max(std, STD_FLOOR)
        items.append({
            "name": name, "count": int(count), "baselineMean": round(mean, 4), "baselineStd": round(std, 4),
            "ratio": round(count / mean, 4) if mean > 0 else None, "zScore": round(z, 4),
        })
    items.sort(key=lambda i: (-i["zScore"], -i["count"], i["name"]))
    out["items"] = items
    return out
