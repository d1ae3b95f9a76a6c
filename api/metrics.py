"""``GET /metrics`` in the Prometheus text format, and the hooks other components call to feed it.

Each app has its own ``CollectorRegistry`` (never prometheus-client's global one), so several apps in one process
(tests, workers) neither collide nor mix their counts. ``MetricsMiddleware`` labels requests by the matched route's
path TEMPLATE (``/crypto-news/{accessKey}``), never by the concrete path: an access key must not reach a label,
and concrete paths would make one time series per key. Unmatched paths share the label ``unmatched``.

Compute units are counted from each keyed response's final ``X-CU-Cost`` (a refunded request says 0), by the
API its route charges. PDF queue depth and browser restarts are read from the PDF pool at scrape time. The
``record_cu`` hook takes no app handle: it updates the metrics of the app whose request or lifespan is running
(a context variable set by the middleware), else of the app started last in this process.

Several workers (``serve --workers N``): a scrape reports the whole server, whichever worker answers it
(``api.metrics_shared``). Each worker copies its PDF pool's queue depth and browser restarts into its files every
``POOL_READ_SECONDS``, so the other workers' part of them is at most that old. The snapshot gauges are the
answering worker's: every worker opens the newest published snapshot within CRYPTOWIRE_SNAPSHOT_POLL_SECONDS.
"""

from __future__ import annotations

import asyncio
import glob
import os
import struct
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route

from api.access import APIS
from api.metrics_shared import claim_worker, drop_dead_workers, shared_dir
from api.snapshots import Snapshot, SnapshotManager

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

_KEY = "metrics"
UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# From a cached GraphQL page (sub-millisecond) to a slow PDF (up to the 60 s deadline).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
POOL_READ_SECONDS = 1.0  # how often each of several workers copies its PDF pool's state into its files


class Metrics:
    """One app's metrics on a registry of its own."""

    def __init__(self, snapshots: Callable[[], SnapshotManager | None] | None = None) -> None:
        self.shared = shared_dir()
        if self.shared is not None:
            claim_worker(self.shared)  # before this process makes its first value
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "cryptowire_http_requests", "HTTP requests by route template, method and status.",
            ["route", "method", "status"], registry=r,
        )
        self.latency = Histogram(
            "cryptowire_http_request_duration_seconds", "Time to answer a request, by route template and method.",
            ["route", "method"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.in_progress = Gauge("cryptowire_http_requests_in_progress", "Requests being answered.", registry=r,
                                 multiprocess_mode="livesum")
        self.cu_charged = Counter(
            "cryptowire_cu_charged", "Compute units charged to access keys, by API.", ["api"], registry=r
        )
        for api in APIS:  # present (at 0) from the start, so rate() works from the first charge
            self.cu_charged.labels(api)
        self.pdf_queue_depth = Gauge("cryptowire_pdf_queue_depth", "PDF requests waiting for a renderer.", registry=r,
                                     multiprocess_mode="livesum")
        self.browser_restarts = Counter(
            "cryptowire_pdf_browser_restarts", "Chromium browsers replaced (age, memory or crash).", registry=r
        )
        self._restarts_seen = 0
        self.snapshot = SnapshotCollector(snapshots or (lambda: None))
        r.register(self.snapshot)
        self.exposed = r  # what a scrape reports
        if self.shared is not None:  # every worker's files (this one's included), not this worker's values
            self.exposed = CollectorRegistry()
            SharedCollector(self.exposed, str(self.shared))
            self.exposed.register(self.snapshot)
        self.pool_reader: asyncio.Task[None] | None = None

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "OTHER"
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def record_cu(self, api: str, cost: int) -> None:
        if cost > 0:
            self.cu_charged.labels(api if api in APIS else "other").inc(cost)

    def read_pdf_pool(self, pool: Any) -> None:
        """Queue depth and browser restarts, read from the PDF pool at scrape time (and often, with several workers)."""
        if pool is None:
            return
        self.pdf_queue_depth.set(getattr(pool, "_waiting", 0))
        stats = getattr(pool, "stats", {})
        replaced = stats.get("restarts", 0) + stats.get("crashes", 0)
        if replaced > self._restarts_seen:
            self.browser_restarts.inc(replaced - self._restarts_seen)
            self._restarts_seen = replaced

    async def render(self, accept: str = "", pdf_pool: Any = None) -> tuple[bytes, str]:
        """The exposition (body, content type): the classic text format, or OpenMetrics when ``accept`` asks."""
        self.read_pdf_pool(pdf_pool)
        if self.shared is not None:
            drop_dead_workers(self.shared)
        await self.snapshot.prepare()
        encoder, content_type = choose_encoder(accept)
        return encoder(self.exposed), content_type

    async def read_pdf_pool_often(self, state: Any) -> None:
        """With several workers: a scrape reads the other workers' pool state from their files, so keep it fresh."""
        while True:
            await asyncio.sleep(POOL_READ_SECONDS)
            self.read_pdf_pool(state.extras.get("pdf_pool"))


class SharedCollector(MultiProcessCollector):
    """Every worker's files, skipping one a worker is creating at this very moment (a replacement for a killed
    worker: a scrape then read a file shorter than its header, and the whole scrape failed with a 500). Such a
    file holds no values yet; a file that stays unreadable is skipped too, instead of failing every scrape."""

    def collect(self) -> Any:
        files = [f for f in glob.glob(os.path.join(self._path, "*.db")) if _readable(f)]
        return self.merge(files, accumulate=True)


def _readable(path: str, tries: int = 3) -> bool:
    for attempt in range(tries):
        try:
            MmapedDict.read_all_values_from_file(path)
            return True
        except FileNotFoundError:  # a dead worker's live gauges, dropped meanwhile
            return False
        except (struct.error, ValueError, RuntimeError):  # being written: its header and data not all there yet
            if attempt + 1 < tries:
                time.sleep(0.01)
    return False


class SnapshotCollector(Collector):
    """Snapshot gauges computed at scrape time; the creation time is read once per snapshot file."""

    def __init__(self, snapshots: Callable[[], SnapshotManager | None]) -> None:
        self.snapshots = snapshots
        self._created: dict[str, datetime] = {}  # snapshot file name -> created_at (naive UTC)

    async def prepare(self) -> None:
        """Read the current snapshot's creation time if not known yet (before ``collect``, which is synchronous)."""
        manager = self.snapshots()
        if manager is None:
            return
        with manager.acquire() as snap:
            if snap is None or snap.name in self._created:
                return
            created = await anyio.to_thread.run_sync(_created_at, snap)
        self._created = {snap.name: created}  # only the current one is ever needed

    def collect(self) -> Any:
        manager = self.snapshots()
        snap = manager.current if manager is not None else None
        loaded = GaugeMetricFamily("cryptowire_snapshot_loaded", "1 when a serving snapshot is loaded, else 0.")
        loaded.add_metric([], 1.0 if snap is not None else 0.0)
        yield loaded
        if snap is None:
            return
        created = self._created.get(snap.name)
        if created is not None:
            age = (datetime.now(UTC).replace(tzinfo=None) - created).total_seconds()
            yield GaugeMetricFamily(
                "cryptowire_snapshot_age_seconds", "Seconds since the served snapshot was published.", value=age
            )
        yield GaugeMetricFamily("cryptowire_snapshot_articles", "Articles in the served snapshot.", value=snap.articles)
        yield GaugeMetricFamily("cryptowire_snapshot_events", "Prediction events in the served snapshot.",
                                value=snap.events)

    def describe(self) -> Any:
        return []  # values depend on the snapshot: described at collection


def _created_at(snap: Snapshot) -> datetime:
    with snap.reader() as reader:
        rows = reader.con.execute("SELECT created_at FROM snapshot_info").fetchall()
    return rows[0][0]


# --------------------------------------------------------------------------------------------- the current app

_active: ContextVar[Metrics | None] = ContextVar("cryptowire_metrics", default=None)
_started: list[Metrics] = []  # apps whose lifespan is running, oldest first


def current() -> Metrics | None:
    """The metrics of the app running this code (see the module docstring), or None outside any app."""
    return _active.get() or (_started[-1] if _started else None)


def record_cu(api: str, cost: int) -> None:
    """Count ``cost`` compute units charged on ``api`` (news, events, pdf). A counter only grows: call it with a
    request's final (net) charge, once refunds are settled; zero and negative costs are ignored."""
    m = current()
    if m is not None:
        m.record_cu(api, cost)


# --------------------------------------------------------------------------------------------- middleware


def route_template(routes: list[BaseRoute], scope: Scope) -> str | None:
    """The path template of the route Starlette picks for ``scope`` (mounts included), or None if none matches."""
    chosen: tuple[BaseRoute, Scope] | None = None
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            chosen = (route, child)
            break
        if match is Match.PARTIAL and chosen is None:
            chosen = (route, child)
    if chosen is None:
        return None
    route, child = chosen
    if isinstance(route, Mount):
        inner = route.routes
        if inner:
            rest = route_template(inner, {**scope, **child})
            return None if rest is None else route.path + rest
        return route.path + "/{path}"
    return getattr(route, "path", None)


# Which API a keyed route charges (its template without the trailing /{accessKey}).
API_BY_ROUTE = {"/crypto-news": "news", "/prediction-events": "events", "/api/html-to-pdf": "pdf"}


class MetricsMiddleware:
    """Pure ASGI middleware: counts requests and their latency by route template and status.

    ``Middleware(MetricsMiddleware, state=state)``; the metrics live in ``state.extras["metrics"]``."""

    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.metrics = metrics_for(state)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        token = _active.set(self.metrics)
        try:
            if scope["type"] != "http":  # lifespan: startup tasks inherit this app's metrics
                await self.app(scope, receive, send)
                return
            await self._http(scope, receive, send)
        finally:
            _active.reset(token)

    async def _http(self, scope: Scope, receive: Any, send: Any) -> None:
        status = 500  # if the app fails before starting a response, the server answers 500
        root_path = scope.get("root_path", "")
        entry = dict(scope)

        cu = 0

        async def send_wrapper(message: Any) -> None:
            nonlocal status, cu
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", ()):
                    if name.lower() == b"x-cu-cost" and value.isdigit():
                        cu = int(value)  # the final charge: a refunded request says 0
            await send(message)

        m = self.metrics
        m.in_progress.inc()
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            m.in_progress.dec()
            elapsed = time.perf_counter() - start
            template = self._template(scope, entry, root_path)
            m.observe(template, scope.get("method", ""), status, elapsed)
            if cu:
                m.record_cu(API_BY_ROUTE.get(template.rsplit("/", 1)[0], "other"), cu)

    @staticmethod
    def _template(scope: Scope, entry: Scope, root_path: str) -> str:
        route = scope.get("route")
        if route is None:
            return UNMATCHED
        if scope.get("root_path", "") == root_path and isinstance(route, Route):
            return route.path  # no mount on the way: Starlette's own choice
        app = scope.get("app")
        routes = getattr(getattr(app, "router", None), "routes", None)
        found = route_template(routes, entry) if routes else None
        return found or UNMATCHED


# --------------------------------------------------------------------------------------------- component API


def metrics_for(state: Any) -> Metrics:
    """This app's metrics, created on first use."""
    m = state.extras.get(_KEY)
    if m is None:
        from api.overview import snapshot_manager  # the one the news component (or the overview) opened

        m = Metrics(lambda: snapshot_manager(state))
        state.extras[_KEY] = m
    return m


def routes(state: Any) -> list[BaseRoute]:
    m = metrics_for(state)

    async def metrics_endpoint(request: Request) -> Response:
        body, content_type = await m.render(request.headers.get("accept", ""), state.extras.get("pdf_pool"))
        return Response(body, headers={"Content-Type": content_type})

    return [Route("/metrics", metrics_endpoint, methods=["GET"], name="metrics")]


async def startup(state: Any) -> None:
    from api.overview import ensure_snapshots

    await ensure_snapshots(state)
    m = metrics_for(state)
    _started.append(m)
    if m.shared is not None:
        m.pool_reader = asyncio.create_task(m.read_pdf_pool_often(state))


async def shutdown(state: Any) -> None:
    from api.overview import release_snapshots

    m = state.extras.get(_KEY)
    if m is not None and m.pool_reader is not None:
        m.pool_reader.cancel()
        m.pool_reader = None
    if m is not None and m in _started:
        _started.remove(m)
    await release_snapshots(state)
