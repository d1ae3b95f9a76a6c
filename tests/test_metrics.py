"""``GET /metrics`` on a real server: route templates (never keys) as labels, latency histograms, snapshot age,
and the hooks other components call."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import api.metrics
from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_articles, make_events
from warehouse.config import Settings

KEY = "sekretKey-7Q2mZx9"  # distinctive: it must never show up in the metrics
BAD_KEY = "notAKey-R4nd0mW8"
NEWS_QUERY = "query { cryptoNews(first: 2) { edges { node { title } } } }"


@pytest.fixture(scope="module")
def published() -> dict[str, float]:
    return {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, published: dict[str, float]) -> Iterator[ApiServer]:
    home = tmp_path_factory.mktemp("metrics") / "home"
    published["before"] = time.time()
    build(home, Data(make_articles(30, 5), make_events(5)))
    published["after"] = time.time()
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        yield srv


def scrape(srv: ApiServer, accept: str | None = None) -> str:
    r = httpx.get(srv.url("/metrics"), headers={"accept": accept} if accept else None, timeout=30)
    assert r.status_code == 200
    return r.text


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


def test_requests_are_counted_by_route_template(server: ApiServer) -> None:
    before = scrape(server)
    for _ in range(3):
        r = httpx.post(server.url(f"/crypto-news/{KEY}"), json={"query": NEWS_QUERY}, timeout=30)
        assert r.status_code == 200, r.text
    assert httpx.post(server.url(f"/crypto-news/{BAD_KEY}"), json={"query": NEWS_QUERY}, timeout=30).status_code == 401
    for _ in range(2):
        assert httpx.get(server.url("/healthz"), timeout=30).status_code == 200
    after = scrape(server)

    def delta(**labels: str) -> float:
        return value(after, "cryptowire_http_requests_total", **labels) - value(
            before, "cryptowire_http_requests_total", **labels
        )

    assert delta(route="/crypto-news/{accessKey}", method="POST", status="200") == 3
    assert delta(route="/crypto-news/{accessKey}", method="POST", status="401") == 1
    assert delta(route="/healthz", method="GET", status="200") == 2
    # Every series of the request counter is labelled by a template (or "unmatched"), never a concrete path.
    routes = {dict(k[1])["route"] for k in samples(after) if k[0] == "cryptowire_http_requests_total"}
    assert routes and all(r == "unmatched" or r.startswith("/") for r in routes)
    assert not any("crypto-news/" in r and "{accessKey}" not in r for r in routes)


def test_access_keys_never_appear_in_metrics(server: ApiServer) -> None:
    paths = [
        f"/crypto-news/{KEY}", f"/prediction-events/{BAD_KEY}", f"/api/usage/{KEY}", f"/api/html-to-pdf/{BAD_KEY}",
        f"/no-such-route/{KEY}", f"/assets/graphiql/{KEY}.css", f"/crypto-news/{KEY}/extra",
    ]
    for path in paths:
        httpx.get(server.url(path), headers={"accept": "text/html"}, timeout=30)
    httpx.request("PROPFIND", server.url(f"/crypto-news/{KEY}"), timeout=30)
    httpx.post(server.url(f"/crypto-news/{KEY}"), json={"query": NEWS_QUERY}, timeout=30)
    for accept in (None, "application/openmetrics-text; version=1.0.0"):
        text = scrape(server, accept)
        assert "cryptowire_http_requests" in text
        assert KEY not in text and BAD_KEY not in text
        assert KEY.lower() not in text.lower()
    text = scrape(server)
    assert value(text, "cryptowire_http_requests_total", route="unmatched", method="GET", status="404") >= 2
    assert value(text, "cryptowire_http_requests_total", route="/assets/graphiql/{path}", method="GET",
                 status="404") >= 1
    assert value(text, "cryptowire_http_requests_total", route="/crypto-news/{accessKey}", method="OTHER",
                 status="405") == 1


def test_latency_histogram_per_route_template(server: ApiServer) -> None:
    before = scrape(server)
    for _ in range(4):
        assert httpx.get(server.url("/readyz"), timeout=30).status_code == 200
    after = scrape(server)
    name = "cryptowire_http_request_duration_seconds"
    count = value(after, f"{name}_count", route="/readyz", method="GET") - value(
        before, f"{name}_count", route="/readyz", method="GET")
    assert count == 4
    assert value(after, f"{name}_bucket", route="/readyz", method="GET", le="+Inf") == value(
        after, f"{name}_count", route="/readyz", method="GET")
    total = value(after, f"{name}_sum", route="/readyz", method="GET")
    assert 0 < total < 30
    buckets = [s for s in samples(after) if s[0] == f"{name}_bucket" and ("route", "/readyz") in s[1]]
    assert len(buckets) == len(api.metrics.LATENCY_BUCKETS) + 1


def test_snapshot_age_is_computed_at_scrape_time(server: ApiServer, published: dict[str, float]) -> None:
    first = scrape(server)
    now = time.time()
    age = value(first, "cryptowire_snapshot_age_seconds")
    # Published between the two marks around build(): its age is bounded by them.
    assert now - published["after"] - 1 <= age <= time.time() - published["before"] + 1
    assert value(first, "cryptowire_snapshot_loaded") == 1
    assert value(first, "cryptowire_snapshot_articles") == 30 and value(first, "cryptowire_snapshot_events") == 5
    time.sleep(0.3)
    assert value(scrape(server), "cryptowire_snapshot_age_seconds") >= age + 0.25


def test_hooks_feed_the_running_app(server: ApiServer) -> None:
    """Called outside any request (as a background task would), record_cu updates the app started last."""
    before = scrape(server)
    api.metrics.record_cu("news", 7)
    api.metrics.record_cu("pdf", 3)
    api.metrics.record_cu(KEY, 5)  # not an API name: counted as "other", the string itself never a label
    api.metrics.record_cu("events", 0)
    after = scrape(server)
    cu = "cryptowire_cu_charged_total"
    assert value(after, cu, api="news") - value(before, cu, api="news") == 7
    assert value(after, cu, api="pdf") - value(before, cu, api="pdf") == 3
    assert value(after, cu, api="other") - value(before, cu, api="other") == 5
    assert value(after, cu, api="events") == value(before, cu, api="events")
    assert KEY not in after


def test_two_apps_keep_their_own_counts() -> None:
    """Within a request, a hook updates the metrics of the app serving it, not of another app in the process."""

    def small_app() -> tuple[Starlette, Any]:
        state = SimpleNamespace(extras={}, settings=None)

        async def charge(request: Request) -> PlainTextResponse:
            api.metrics.record_cu("news", int(request.path_params["n"]))
            return PlainTextResponse("ok")

        routes = [Route("/charge/{n:int}", charge), *api.metrics.routes(state)]
        app = Starlette(routes=routes, middleware=[Middleware(api.metrics.MetricsMiddleware, state=state)])
        return app, state

    (app_a, _), (app_b, _) = small_app(), small_app()
    with ApiServer(app_a) as a, ApiServer(app_b) as b:
        for _ in range(2):
            assert httpx.get(a.url("/charge/5"), timeout=30).status_code == 200
        assert httpx.get(b.url("/charge/1"), timeout=30).status_code == 200
        text_a, text_b = scrape(a), scrape(b)
    assert value(text_a, "cryptowire_cu_charged_total", api="news") == 10
    assert value(text_b, "cryptowire_cu_charged_total", api="news") == 1
    assert value(text_a, "cryptowire_http_requests_total", route="/charge/{n:int}", method="GET", status="200") == 2
    assert value(text_b, "cryptowire_http_requests_total", route="/charge/{n:int}", method="GET", status="200") == 1
    # No snapshot manager in these apps: the snapshot is reported as not loaded, with no age.
    assert value(text_a, "cryptowire_snapshot_loaded") == 0
    assert "cryptowire_snapshot_age_seconds" not in text_a


def test_no_snapshot_yet(tmp_path: Path) -> None:
    app = create_app(Settings(home=tmp_path / "empty", pdf_prewarm=False), access=StaticKeys([KEY]))
    with ApiServer(app) as srv:
        text = scrape(srv)
    assert value(text, "cryptowire_snapshot_loaded") == 0
    assert "cryptowire_snapshot_age_seconds" not in text


def test_compute_units_are_counted_by_api_from_the_final_charge(server: ApiServer) -> None:
    before = value(scrape(server), "cryptowire_cu_charged_total", api="news")
    r = httpx.post(server.url(f"/crypto-news/{KEY}"), json={"query": NEWS_QUERY}, timeout=30)
    assert r.status_code == 200, r.text
    cost = int(r.headers["X-CU-Cost"])
    assert cost > 0
    # A request refused for bad input costs nothing and adds nothing.
    bad = httpx.post(server.url(f"/crypto-news/{KEY}"), json={"query": "query { cryptoNews(after: \"x\") { edges { cursor } } }"}, timeout=30)
    assert bad.status_code == 400
    after = value(scrape(server), "cryptowire_cu_charged_total", api="news")
    assert after - before == cost
