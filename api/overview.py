"""``GET /``: a small read-only overview page, server-rendered, with no external assets and no script.

What it shows comes from the served snapshot: freshness (publication time and age, newest dated article, row counts),
articles per source per day over the last 14 days of the data, the daily mean sentiment of the 5 most mentioned
tickers over the last 30 days of the data (an inline SVG chart, from the snapshot's daily sentiment buckets), and the 10 latest prediction events
that are not withdrawn (a withdrawn event is no longer a question: the page counts them, the API lists them).

A snapshot never changes, so its aggregates are computed once (SQL on the snapshot, in a worker thread) and kept
with the heavy sections already rendered, keyed by the snapshot file; a request only renders the time-dependent
parts (ages, events' OPEN/CLOSED status). With no snapshot yet the page says what to run, with status 503.

This module also owns the lookup of the snapshot manager for the components that only read (overview, metrics):
the news component's manager when it is there, else one opened here.
"""

from __future__ import annotations

import asyncio
import html
import logging
import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute, Route

from api.snapshots import Snapshot, SnapshotManager
from warehouse.read import has_column
from warehouse.trends import has_table

log = logging.getLogger("cryptowire.api")

_KEY = "overview"
_OWN_SNAPSHOTS = "snapshots"  # a manager opened here when the news component is absent
HEATMAP_DAYS = 14
HEATMAP_SOURCES = 12  # more sources are summed into one "other sources" row
CHART_DAYS = 30
CHART_TICKERS = 5
EVENTS = 10
FRESH_SECONDS = 30 * 60  # the feeds are polled every 10 minutes: older than this means the pipeline stalled
COLORS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00")  # distinguishable with colour blindness

HEADERS = {
    # Nothing but this document and its inline styles may load; a title that slipped past escaping could not run.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # ages change every second; the heavy parts are cached server-side
}


# --------------------------------------------------------------------------------------------- snapshot manager


def snapshot_manager(state: Any) -> SnapshotManager | None:
    """The snapshot manager the app already has: the news component's, else the one opened here (or None)."""
    manager = getattr(state.extras.get("news"), "snapshots", None)
    if isinstance(manager, SnapshotManager):
        return manager
    return state.extras.get(_OWN_SNAPSHOTS)


async def ensure_snapshots(state: Any) -> SnapshotManager:
    """Start a manager of our own if the app has none (no news component); call from a component's startup."""
    manager = snapshot_manager(state)
    if manager is None:
        s = state.settings
        manager = SnapshotManager(s.snapshots_dir, s.snapshot_poll_seconds, cache_size=0)
        state.extras[_OWN_SNAPSHOTS] = manager
        await manager.start()
    return manager


async def release_snapshots(state: Any) -> None:
    """Stop the manager opened by ``ensure_snapshots`` (never the news component's); safe to call twice."""
    manager = state.extras.pop(_OWN_SNAPSHOTS, None)
    if manager is not None:
        await manager.stop()


# --------------------------------------------------------------------------------------------- aggregates


@dataclass(frozen=True)
class Facts:
    """What the page shows about one snapshot, computed once."""

    name: str
    created_at: datetime
    articles: int
    events: int
    withdrawn: int  # of ``events``, withdrawn: left out of ``latest_events``
    newest: datetime | None  # the first item in serving order: an undated item counts at its fetch time
    newest_dated: datetime | None  # as `cryptowire status`: undated items left out; None if not told apart
    dated: bool  # the snapshot tells undated items apart (its news table has date_inferred)
    oldest: datetime | None
    sources: int
    tickers: int
    topics: int
    heatmap_html: str
    chart_html: str
    latest_events: list[tuple[str, datetime, list[str], str | None]]  # title, date, tags, source url; not withdrawn
    seconds: float  # time taken to compute


# The daily buckets of asset_sentiment (the snapshot's `sentiment`, as `assetSentiment` serves them: dated articles
# only); the most mentioned tickers are those with the most articles in the window.
SERIES_SQL = """
WITH w AS (SELECT ticker AS t, CAST(bucket_start AS DATE) AS d, articles, scored, mean_score
           FROM sentiment WHERE grain = 'day' AND bucket_start >= ?),
     top AS (SELECT t, sum(articles) AS n FROM w GROUP BY t ORDER BY n DESC, t LIMIT ?)
SELECT w.t, top.n, w.d, w.mean_score, w.scored FROM w JOIN top USING (t)
WHERE w.scored > 0 ORDER BY top.n DESC, w.t, w.d
"""
# Snapshots published before the sentiment table existed: the same figures from news.
OLD_SERIES_SQL = """
WITH w AS (SELECT CAST(published_at AS DATE) AS d, unnest(tickers) AS t, sentiment_score AS s
           FROM news WHERE published_at >= ?),
     top AS (SELECT t, count(*) AS n FROM w GROUP BY t ORDER BY n DESC, t LIMIT ?)
SELECT w.t, top.n, w.d, avg(w.s), count(w.s) FROM w JOIN top USING (t)
WHERE w.s IS NOT NULL GROUP BY ALL ORDER BY top.n DESC, w.t, w.d
"""


def compute(snap: Snapshot) -> Facts:
    """All aggregates for ``snap``, in a worker thread. Each scan is bounded to the recent window: ``news`` is
    sorted by ``published_at`` so zone maps skip the older row groups."""
    started = time.perf_counter()
    with snap.reader() as reader:
        con = reader.con
        created_at = con.execute("SELECT created_at FROM snapshot_info").fetchall()[0][0]
        newest = oldest = newest_dated = None
        # Snapshots published before the column existed cannot tell undated items apart: the page says so then.
        dated = has_column(con, "news", "date_inferred")
        if snap.articles:
            newest = con.execute("SELECT published_at FROM news WHERE pos = 0").fetchall()[0][0]
            if dated:
                newest_dated = con.execute("SELECT max(published_at) FROM news WHERE NOT date_inferred").fetchall()[0][0]
            oldest = con.execute("SELECT published_at FROM news WHERE pos = ?", [snap.articles - 1]).fetchall()[0][0]
        counts = dict(con.execute("SELECT kind, count(*) FROM filter_values GROUP BY kind").fetchall())
        heatmap_html = chart_html = ""
        if newest is not None:
            end = min(newest, created_at).date()  # an item dated in the future does not move the charts past the news
            heat_days = [end - timedelta(days=i) for i in range(HEATMAP_DAYS - 1, -1, -1)]
            rows = con.execute(
                """SELECT source_name, CAST(published_at AS DATE) AS d, count(*) FROM news
                   WHERE published_at >= ? GROUP BY ALL""",
                [datetime.combine(heat_days[0], datetime.min.time())],
            ).fetchall()
            heatmap_html = render_heatmap(heat_days, rows)
            chart_days = [end - timedelta(days=i) for i in range(CHART_DAYS - 1, -1, -1)]
            has_series = has_table(con, "sentiment")  # a view in a partitioned snapshot
            series = con.execute(
                SERIES_SQL if has_series else OLD_SERIES_SQL,
                [datetime.combine(chart_days[0], datetime.min.time()), CHART_TICKERS],
            ).fetchall()
            chart_html = render_chart(chart_days, series)
        # A withdrawn event is a question no article asks any more: listed among the latest it would read as
        # open (or closed) beside the question that replaced it. Snapshots from before withdrawal have none.
        live = "withdrawn_reason IS NULL" if has_column(con, "events", "withdrawn_reason") else "true"
        events = con.execute(
            f"SELECT event_title, date, tags, source_url FROM events WHERE {live} ORDER BY pos LIMIT ?", [EVENTS]
        ).fetchall()
        withdrawn = con.execute(f"SELECT count(*) FROM events WHERE NOT ({live})").fetchall()[0][0]
    return Facts(
        name=snap.name, created_at=created_at, articles=snap.articles, events=snap.events, withdrawn=int(withdrawn),
        newest=newest,
        newest_dated=newest_dated, dated=dated,
        oldest=oldest, sources=int(counts.get("newsSources", 0)), tickers=int(counts.get("tickers", 0)),
        topics=int(counts.get("newsTopics", 0)), heatmap_html=heatmap_html, chart_html=chart_html,
        latest_events=[(str(t), d, list(tags or []), u) for t, d, tags, u in events],
        seconds=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------------------------- rendering


def e(value: object) -> str:
    """HTML-escape anything that came from data (titles, sources, tickers, tags, URLs)."""
    return html.escape(str(value), quote=True)


def fmt_time(dt: datetime | None) -> str:
    return "—" if dt is None else dt.strftime("%Y-%m-%d %H:%M UTC")


def fmt_age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 90:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 90:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} days"


def render_heatmap(days: list[date], rows: Iterable[tuple[str, date, int]]) -> str:
    per_source: dict[str, dict[date, int]] = {}
    for source, day, n in rows:
        per_source.setdefault(str(source), {})[day] = int(n)
    if not per_source:
        return "<p class=muted>No articles in the last 14 days of the data.</p>"
    ranked = sorted(per_source.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    shown = ranked[:HEATMAP_SOURCES]
    if len(ranked) > HEATMAP_SOURCES:
        other: dict[date, int] = {}
        for _, by_day in ranked[HEATMAP_SOURCES:]:
            for day, n in by_day.items():
                other[day] = other.get(day, 0) + n
        rest = len(ranked) - HEATMAP_SOURCES
        shown.append((f"{rest} other source{'s' if rest != 1 else ''}", other))
    peak = max(n for _, by_day in shown for n in by_day.values())
    head = "".join(f"<th scope=col>{d:%m-%d}</th>" for d in days)
    out = [f"<table class=heat><thead><tr><th scope=col>source</th>{head}<th scope=col>total</th></tr></thead><tbody>"]
    for source, by_day in shown:
        cells = []
        for d in days:
            n = by_day.get(d, 0)
            if n == 0:
                cells.append("<td class=zero>·</td>")
                continue
            alpha = 0.12 + 0.78 * n / peak
            ink = "#fff" if alpha > 0.55 else "#111"
            cells.append(f'<td style="background:rgba(0,114,178,{alpha:.2f});color:{ink}" title="{e(source)}, '
                         f'{d:%Y-%m-%d}: {n}">{n}</td>')
        out.append(f"<tr><th scope=row>{e(source)}</th>{''.join(cells)}<td class=total>{sum(by_day.values())}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def render_chart(days: list[date], rows: Iterable[tuple[str, int, date, float, int]]) -> str:
    series: dict[str, tuple[int, dict[date, tuple[float, int]]]] = {}
    for ticker, mentions, day, mean, n in rows:
        series.setdefault(str(ticker), (int(mentions), {}))[1][day] = (float(mean), int(n))
    if not series:
        return "<p class=muted>No ticker mentions with a sentiment score in the last 30 days of the data.</p>"
    w, h = 820, 340
    left, right, top, bottom = 58, 16, 44, 48
    pw, ph = w - left - right, h - top - bottom
    index = {d: i for i, d in enumerate(days)}

    def x(day: date) -> float:
        return left + pw * index[day] / max(1, len(days) - 1)

    def y(score: float) -> float:
        return top + ph * (1 - (max(-1.0, min(1.0, score)) + 1) / 2)

    label = "Daily mean sentiment score of " + ", ".join(series) + f" over the last {len(days)} days of the data"
    out = [f'<svg class=chart viewBox="0 0 {w} {h}" role=img aria-label="{e(label)}" '
           f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="12">',
           f"<title>{e(label)}</title>"]
    for v in (-1.0, -0.5, 0.0, 0.5, 1.0):  # y grid and labels
        yy = y(v)
        stroke = "#888" if v == 0 else "#e3e3e3"
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="{stroke}"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#555">{v:+.1f}</text>')
    step = max(1, -(-len(days) // 8))  # at most ~8 date labels, counted back from the newest day
    for i, d in enumerate(days):
        if (len(days) - 1 - i) % step == 0:
            xx = x(d)
            out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{top + ph}" y2="{top + ph + 4}" stroke="#888"/>')
            out.append(f'<text x="{xx:.1f}" y="{top + ph + 17}" text-anchor="middle" fill="#555">{d:%m-%d}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" stroke="#888"/>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{h - 6}" text-anchor="middle" fill="#333">day (UTC)</text>')
    out.append(f'<text transform="translate(14 {top + ph / 2:.0f}) rotate(-90)" text-anchor="middle" fill="#333">'
               "mean sentiment_score (−1 … +1)</text>")
    for k, (ticker, (mentions, by_day)) in enumerate(series.items()):
        color = COLORS[k % len(COLORS)]
        # Consecutive days are joined by a solid line; across days without articles the line is dashed.
        ordered = sorted(by_day)
        for a, b in zip(ordered, ordered[1:], strict=False):
            dash = "" if index[b] == index[a] + 1 else ' stroke-dasharray="4 4" stroke-opacity="0.6"'
            out.append(f'<line class=series x1="{x(a):.1f}" y1="{y(by_day[a][0]):.1f}" x2="{x(b):.1f}" y2="{y(by_day[b][0]):.1f}" '
                       f'stroke="{color}" stroke-width="2"{dash}/>')
        for d in sorted(by_day):
            mean, n = by_day[d]
            out.append(f'<circle cx="{x(d):.1f}" cy="{y(mean):.1f}" r="3" fill="{color}"><title>{e(ticker)} '
                       f"{d:%Y-%m-%d}: {mean:+.3f} over {n} article{'s' if n != 1 else ''}</title></circle>")
        lx = left + k * (pw / CHART_TICKERS)  # legend across the top
        out.append(f'<rect x="{lx:.0f}" y="12" width="14" height="14" rx="2" fill="{color}"/>')
        out.append(f'<text x="{lx + 20:.0f}" y="24" fill="#222">{e(ticker)} ({mentions:,} '
                   f"mention{'s' if mentions != 1 else ''})</text>")
    out.append("</svg>")
    return "".join(out)


def render_events(facts: Facts, now: datetime) -> str:
    note = ""
    if facts.withdrawn:
        n = facts.withdrawn
        them = "them" if n != 1 else "it"
        note = (f"<p class=muted>{n:,} withdrawn event{'s are' if n != 1 else ' is'} left out: no article asks "
                f"{them} any more (the rules changed, or the articles were edited). The API still lists {them}, with status <code>WITHDRAWN</code> and the "
                "reason.</p>")
    if not facts.latest_events:
        if facts.withdrawn:
            return "<p class=muted>No prediction events in this snapshot that are not withdrawn.</p>" + note
        return "<p class=muted>No prediction events in this snapshot.</p>"
    out = ["<table class=events><thead><tr><th scope=col>event</th><th scope=col>resolves</th>"
           "<th scope=col>status</th><th scope=col>tags</th></tr></thead><tbody>"]
    for title, when, tags, url in facts.latest_events:
        closed = when <= now  # as the API computes it for an event not withdrawn: CLOSED once its time has passed
        shown = e(title)
        if url and url.lower().startswith(("https://", "http://")):
            shown = f'<a href="{e(url)}" rel="noopener noreferrer">{shown}</a>'
        day = f"{when:%Y-%m-%d}" if when.time() == datetime.min.time() else fmt_time(when)
        status = '<span class="badge closed">CLOSED</span>' if closed else '<span class="badge open">OPEN</span>'
        chips = " ".join(f"<span class=tag>{e(t)}</span>" for t in tags)
        out.append(f"<tr><td>{shown}</td><td class=nowrap>{day}</td><td>{status}</td><td>{chips}</td></tr>")
    out.append("</tbody></table>")
    out.append(note)
    return "".join(out)


STYLE = """
:root { color-scheme: light; --ink: #1d1d1f; --muted: #666; --line: #e4e4e7; --bg: #f7f7f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       background: var(--bg); }
header { background: #14213d; color: #fff; padding: 14px 24px; }
header h1 { margin: 0; font-size: 20px; font-weight: 600; }
header p { margin: 2px 0 0; color: #c9d1e3; }
main { max-width: 1100px; margin: 0 auto; padding: 16px 24px 32px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 14px 18px; margin: 14px 0; }
h2 { margin: 0 0 10px; font-size: 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(160px, 1fr)); gap: 10px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 18px; font-weight: 600; }
.card .s { color: var(--muted); font-size: 12px; }
.ok { color: #0a7d32; } .warn { color: #b45309; } .stale { color: #b91c1c; }
.muted { color: var(--muted); }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 4px 6px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
thead th { color: var(--muted); font-weight: 600; font-size: 12px; }
.heat td { text-align: center; font-variant-numeric: tabular-nums; min-width: 34px; border: 1px solid #fff; }
.heat td.zero { color: #bbb; } .heat td.total { font-weight: 600; }
.heat th[scope=row] { white-space: nowrap; max-width: 220px; overflow: hidden; text-overflow: ellipsis; }
.scroll { overflow-x: auto; }
.chart { width: 100%; height: auto; max-width: 820px; display: block; }
.nowrap { white-space: nowrap; }
.badge { font-size: 11px; font-weight: 700; padding: 1px 6px; border-radius: 10px; }
.badge.open { background: #dcfce7; color: #166534; } .badge.closed { background: #e5e7eb; color: #374151; }
.tag { display: inline-block; background: #eef2ff; color: #3730a3; border-radius: 4px; padding: 0 5px;
       margin: 1px 2px 1px 0; font-size: 12px; }
a { color: #1d4ed8; }
code { background: #f1f1f4; padding: 1px 4px; border-radius: 3px; }
ul.links li { margin: 4px 0; }
"""


def page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{e(title)}</title><style>{STYLE}</style></head><body>'
        f'<header><h1>cryptowire</h1><p>{e(title)}</p></header><main>{body}</main></body></html>'
    )


LINKS = """<section><h2>Explore</h2><ul class=links>
<li><a href="/crypto-news/YOUR_KEY">GraphiQL explorer</a>: open <code>/crypto-news/YOUR_KEY</code> (or
<code>/prediction-events/YOUR_KEY</code>) in a browser, with your access key in place of <code>YOUR_KEY</code>.
Browsing there needs no key, but every query is checked against it: create one with
<code>cryptowire keys create --plan free --name me</code>.</li>
<li><a href="/metrics">/metrics</a>: Prometheus metrics (requests, latency, CU charged, PDF queue, snapshot age).</li>
<li><a href="/readyz">/readyz</a> and <a href="/healthz">/healthz</a>: readiness and liveness.</li>
<li>Documentation: <code>README.md</code> and <code>docs/</code> in the cryptowire repository.</li>
</ul></section>"""


def _age_class(seconds: float) -> str:
    return "ok" if seconds <= FRESH_SECONDS else ("warn" if seconds <= 6 * 3600 else "stale")


def newest_card(facts: Facts, now: datetime) -> tuple[str, str, str]:
    """The newest dated article, as `cryptowire status` counts it: an undated item carries its fetch time, so one
    would make stale feeds look fresh. An older snapshot cannot tell them apart: the label says what it shows."""
    if facts.dated:
        label, at, none = "newest dated article", facts.newest_dated, "no dated articles"
    else:
        label, at, none = "newest item (fetch time if undated)", facts.newest, "no articles yet"
    return label, fmt_time(at), f"{fmt_age((now - at).total_seconds())} ago" if at else none


def render_overview(facts: Facts, now: datetime) -> str:
    snap_age = (now - facts.created_at).total_seconds()
    cards = [
        ("snapshot published", fmt_time(facts.created_at),
         f'<span class="{_age_class(snap_age)}">{fmt_age(snap_age)} ago</span>'),
        newest_card(facts, now),
        ("articles", f"{facts.articles:,}", f"since {facts.oldest:%Y-%m-%d}" if facts.oldest else ""),
        ("prediction events", f"{facts.events:,}", f"{facts.withdrawn:,} withdrawn" if facts.withdrawn else ""),
        ("sources", f"{facts.sources:,}", f"{facts.topics:,} topic{'s' if facts.topics != 1 else ''}"),
        ("tickers", f"{facts.tickers:,}", "mentioned or with events"),
    ]
    card_html = "".join(
        f'<div class=card><div class=k>{k}</div><div class=v>{v}</div><div class=s>{s}</div></div>' for k, v, s in cards
    )
    body = (
        f"<section><h2>Pipeline freshness</h2><div class=cards>{card_html}</div>"
        f"<p class=muted>Serving snapshot <code>{e(facts.name)}</code>; all times UTC.</p></section>"
        f"<section><h2>Articles per source per day</h2><p class=muted>The last {HEATMAP_DAYS} days of the data, "
        "up to its newest item; an item without a date counts on the day it was fetched.</p>"
        f"<div class=scroll>{facts.heatmap_html or '<p class=muted>No articles yet.</p>'}"
        "</div></section>"
        f"<section><h2>Sentiment of the top {CHART_TICKERS} tickers</h2><p class=muted>Daily mean "
        f"<code>sentiment_score</code> of the articles mentioning each of the {CHART_TICKERS} most mentioned tickers, "
        f"over the last {CHART_DAYS} days of the data (articles with a real date; the daily buckets of "
        f"<code>assetSentiment</code>).</p>{facts.chart_html or '<p class=muted>No articles yet.</p>'}"
        "</section>"
        f"<section><h2>Latest prediction events</h2>{render_events(facts, now)}</section>"
        f"{LINKS}"
    )
    return page("Overview of the served data", body)


def render_not_ready(reason: str | None) -> str:
    if reason and reason.startswith("cannot open"):
        what = ("<p>A serving snapshot was published but could not be opened; the API keeps retrying. See "
                "<a href=\"/readyz\">/readyz</a> and the server log for the reason, then publish a new one with "
                "<code>cryptowire materialize</code>.</p>")
    else:
        what = ("<p>The pipeline has not published a serving snapshot yet, so there is nothing to show. Run</p>"
                "<p><code>cryptowire materialize</code></p><p>(or <code>make dev</code> to run it on a schedule "
                "from the Dagster UI), then reload this page: the API picks up a new snapshot within seconds.</p>")
    return page("No data published yet", f"<section><h2>No data published yet</h2>{what}</section>{LINKS}")


# --------------------------------------------------------------------------------------------- component


class Overview:
    def __init__(self, state: Any) -> None:
        self.state = state
        self._facts: Facts | None = None  # for the snapshot last shown; a new snapshot replaces it
        self._lock = asyncio.Lock()

    async def facts(self, snap: Snapshot) -> Facts:
        cached = self._facts
        if cached is not None and cached.name == snap.name:
            return cached
        async with self._lock:  # concurrent first requests wait for one computation
            cached = self._facts
            if cached is None or cached.name != snap.name:
                cached = await anyio.to_thread.run_sync(compute, snap)
                log.info("overview of %s computed in %.3f s", snap.name, cached.seconds)
                self._facts = cached
            return cached

    async def endpoint(self, request: Request) -> HTMLResponse:
        manager = snapshot_manager(self.state)
        with manager.acquire() if manager is not None else nullcontext() as snap:
            if snap is None:
                reason = manager.error if manager is not None else None
                return HTMLResponse(render_not_ready(reason), status_code=503,
                                    headers={**HEADERS, "Retry-After": "5"})
            facts = await self.facts(snap)
        now = datetime.now(UTC).replace(tzinfo=None)
        return HTMLResponse(render_overview(facts, now), headers=HEADERS)


def routes(state: Any) -> list[BaseRoute]:
    component = Overview(state)
    state.extras[_KEY] = component
    return [Route("/", component.endpoint, methods=["GET"], name="overview")]


async def startup(state: Any) -> None:
    await ensure_snapshots(state)


async def shutdown(state: Any) -> None:
    await release_snapshots(state)
