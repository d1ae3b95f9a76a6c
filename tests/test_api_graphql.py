"""The GraphQL endpoints against a real server: the published queries verbatim, limits, error codes, GraphiQL,
readiness, the SDL, the cost formula, and the fast executor against graphql-core's."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import get_introspection_query, parse

from api.access import StaticKeys
from api.app import create_app
from api.cost import query_cost
from api.gql_documents import DocumentCache
from api.gql_exec import Context, coerce_variables, execute_plan, plan_operation
from api.gql_schema import SDL_PATH, sdl
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_articles, make_events, open_reader
from warehouse.config import Settings
from warehouse.published import current_snapshot

KEY = "test-key"

PUBLISHED_NEWS = """query CryptoNews($after: String, $first: Int) {
  cryptoNews(after: $after, first: $first) {
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
    edges { node { title text sentiment tickers topics sourceName newsUrl } }
  }
}"""
PUBLISHED_EVENTS = """query PredictionEvents($after: String, $first: Int) {
  predictionEvents(after: $after, first: $first) {
    pageInfo { hasNextPage endCursor }
    edges { node { id eventTitle eventDescription sourceUrl imageUrl options tags } }
  }
}"""
PUBLISHED_SHORT = "query CryptoNews { cryptoNews(first: 10) { edges { node { title sentiment tickers } } } }"


@pytest.fixture(scope="module")
def data() -> Data:
    return Data(make_articles(120, 40), make_events(40))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, data: Data) -> Path:
    home = tmp_path_factory.mktemp("graphql") / "home"
    build(home, data)
    return home


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[ApiServer]:
    with ApiServer(create_app(Settings(home=home), access=StaticKeys([KEY]))) as srv:
        yield srv


def post(srv: ApiServer, body: Any, path: str = f"/crypto-news/{KEY}", **kw: Any) -> httpx.Response:
    return httpx.post(srv.url(path), json=body, timeout=30, **kw)


def code(r: httpx.Response) -> str:
    errors = r.json()["errors"]
    assert all("code" in e["extensions"] for e in errors), errors
    return errors[0]["extensions"]["code"]


# --------------------------------------------------------------------------------------------- published queries


def test_published_news_query_verbatim(server: ApiServer, data: Data) -> None:
    r = post(server, {"query": PUBLISHED_NEWS, "variables": {"after": "2024-12-01", "first": 10}})
    assert r.status_code == 200, r.text
    news = r.json()["data"]["cryptoNews"]
    older = sorted((a for a in data.articles if a["published_at"] < __import__("datetime").datetime(2024, 12, 1)),
                   key=lambda a: (a["published_at"], a["id"]), reverse=True)
    assert [e["node"]["title"] for e in news["edges"]] == [a["title"] for a in older[:10]]
    node = news["edges"][0]["node"]
    assert set(node) == {"title", "text", "sentiment", "tickers", "topics", "sourceName", "newsUrl"}
    assert node["sentiment"] in ("Positive", "Negative", "Neutral")
    info = news["pageInfo"]
    assert info["hasNextPage"] is True and info["hasPreviousPage"] is True
    assert info["startCursor"] != info["endCursor"]
    # endCursor continues exactly where the page ended
    nxt = post(server, {"query": PUBLISHED_NEWS, "variables": {"after": info["endCursor"], "first": 10}}).json()
    assert [e["node"]["title"] for e in nxt["data"]["cryptoNews"]["edges"]] == [a["title"] for a in older[10:20]]


def test_published_events_query_verbatim_on_both_paths(server: ApiServer, data: Data) -> None:
    for path in (f"/prediction-events/{KEY}", f"/crypto-news/{KEY}"):
        r = post(server, {"query": PUBLISHED_EVENTS, "variables": {"after": "2024-12-01", "first": 10}}, path)
        assert r.status_code == 200, r.text
        events = r.json()["data"]["predictionEvents"]
        assert len(events["edges"]) == 10
        for e in events["edges"]:
            node = e["node"]
            assert re.fullmatch(r"pevt_[A-Za-z0-9]{20}", node["id"]) and node["options"] == ["Yes", "No"]
        assert events["pageInfo"]["hasNextPage"] is True
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", events["pageInfo"]["endCursor"])


def test_published_short_query_without_variables(server: ApiServer, data: Data) -> None:
    r = post(server, {"query": PUBLISHED_SHORT})
    assert r.status_code == 200, r.text
    edges = r.json()["data"]["cryptoNews"]["edges"]
    assert [e["node"]["title"] for e in edges] == [
        next(a["title"] for a in data.articles if a["id"] == i) for i in data.news_order()[:10]
    ]


def test_an_empty_filter_list_is_no_filter_as_documented(server: ApiServer, data: Data) -> None:
    def ids(args: str) -> list[str]:
        body = post(server, {"query": f"{{ cryptoNews(first: 50{args}) {{ edges {{ node {{ id }} }} }} }}"}).json()
        return [e["node"]["id"] for e in body["data"]["cryptoNews"]["edges"]]

    assert ids(", tickers: [], topics: [], sources: []") == ids("") == data.news_order()[:50]


def test_node_fields_and_filter_lists(server: ApiServer, data: Data) -> None:
    q = """{ cryptoNews(first: 1, tickers: ["eth"]) { edges { node { id title text sentiment sentimentScore
             tickers topics sourceName newsUrl imageUrl date } } }
             predictionEvents(first: 2, status: OPEN) { edges { node { id createdAt date status asset kind comparator
             threshold currency resolutionCriteria resolutionSource subject } } }
             newsSources newsTopics tickers }"""
    body = post(server, {"query": q}).json()
    assert "errors" not in body, body
    node = body["data"]["cryptoNews"]["edges"][0]["node"]
    assert "ETH" in node["tickers"] and -1 <= node["sentimentScore"] <= 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", node["date"])
    assert all(e["node"]["status"] == "OPEN" for e in body["data"]["predictionEvents"]["edges"])
    assert body["data"]["newsSources"] == sorted({a["source_name"] for a in data.articles})
    assert body["data"]["newsTopics"] == sorted({t for a in data.articles for t in a["topics"]})
    assert set(body["data"]["tickers"]) == {t for a in data.articles for t in a["tickers"]} | {
        e["asset"] for e in data.events}


# --------------------------------------------------------------------------------------------- limits and errors


def test_first_and_last_limits(server: ApiServer) -> None:
    r = post(server, {"query": "{ cryptoNews(first: 101) { edges { cursor } } }"})
    assert r.status_code == 400 and code(r) == "BAD_USER_INPUT"
    assert r.json()["errors"][0]["message"] == (
        "Requesting 101 records exceeds the `first` limit of 100: ask for at most 100 and page on with "
        "`after: pageInfo.endCursor`")
    r = post(server, {"query": "query($n: Int) { predictionEvents(last: $n) { edges { cursor } } }",
                      "variables": {"n": 250}})
    assert r.status_code == 400 and r.json()["errors"][0]["message"] == (
        "Requesting 250 records exceeds the `last` limit of 100: ask for at most 100 and page on with "
        "`before: pageInfo.startCursor`")
    r = post(server, {"query": "{ cryptoNews(first: 2, last: 2) { edges { cursor } } }"})
    assert r.status_code == 400 and code(r) == "BAD_USER_INPUT" and "both" in r.json()["errors"][0]["message"]
    r = post(server, {"query": "{ cryptoNews(first: -1) { edges { cursor } } }"})
    assert r.status_code == 400 and code(r) == "BAD_USER_INPUT"
    assert r.json()["errors"][0]["message"] == (
        "`first` on the `cryptoNews` connection must be from 1 to 100 (got -1); omit it for the default of 10")
    # trending lists have a size but no cursor: their errors say "list" and do not advise paging
    r = post(server, {"query": "{ trendingTickers(first: 0) { window } }"})
    assert r.status_code == 400 and r.json()["errors"][0]["message"] == (
        "`first` on the `trendingTickers` list must be from 1 to 100 (got 0); omit it for the default of 10")
    r = post(server, {"query": "{ trendingTopics(first: 101) { window } }"})
    assert r.status_code == 400 and r.json()["errors"][0]["message"] == (
        "Requesting 101 records exceeds the `first` limit of 100: ask for at most 100")
    r = post(server, {"query": "{ cryptoNews(first: 100) { edges { cursor } } }"})
    assert r.status_code == 200 and len(r.json()["data"]["cryptoNews"]["edges"]) == 100
    r = post(server, {"query": "{ cryptoNews { edges { cursor } } }"})
    assert len(r.json()["data"]["cryptoNews"]["edges"]) == 10  # the default


def test_page_size_zero_is_refused_and_costs_nothing(tmp_path: Path) -> None:
    """`first: 0` used to answer hasNextPage true with no endCursor (a paging loop never ended) and cost 1 CU."""
    home = tmp_path / "home"
    build(home, Data(make_articles(6, 2), make_events(4)))
    app = create_app(Settings(home=home, pdf_prewarm=False))  # the real metering
    _id, key = app.state.cw.access.store.create_key("zero", "pro", ["news", "events"])
    refused = [
        ({"query": "{ cryptoNews(first: 0) { pageInfo { hasNextPage endCursor } } }"}, "first", "cryptoNews"),
        ({"query": "{ cryptoNews(last: 0) { pageInfo { hasPreviousPage startCursor } } }"}, "last", "cryptoNews"),
        ({"query": "query($n: Int) { predictionEvents(first: $n) { edges { cursor } } }", "variables": {"n": 0}},
         "first", "predictionEvents"),
        ({"query": "{ predictionEvents(last: 0) { edges { cursor } } }"}, "last", "predictionEvents"),
    ]
    used = "{ usage { cuUsedToday } }"
    with ApiServer(app) as srv:
        for body, arg, field in refused:
            r = post(srv, body, f"/crypto-news/{key}")
            assert r.status_code == 400 and code(r) == "BAD_USER_INPUT", r.text
            assert r.json()["errors"][0]["message"] == (
                f"`{arg}` on the `{field}` connection must be from 1 to 100 (got 0); omit it for the default of 10")
        assert post(srv, {"query": used}, f"/crypto-news/{key}").json()["data"]["usage"]["cuUsedToday"] == 0
        ok = post(srv, {"query": "{ cryptoNews(first: 1) { edges { cursor } } }"}, f"/crypto-news/{key}")
        assert ok.status_code == 200 and ok.headers["X-CU-Cost"] == "2"
        assert post(srv, {"query": used}, f"/crypto-news/{key}").json()["data"]["usage"]["cuUsedToday"] == 2


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_paths_without_the_key_say_the_key_is_missing(server: ApiServer, method: str) -> None:
    """Every keyed route, called without its key segment: a 401 in that API's JSON shape, not a text 404."""
    graphql = {"/crypto-news": "/crypto-news/{accessKey}", "/prediction-events": "/prediction-events/{accessKey}"}
    rest = {"/api/html-to-pdf": "/api/html-to-pdf/{accessKey}", "/api/usage": "/api/usage/{accessKey}"}
    for base, template in {**graphql, **rest}.items():
        for path in (base, base + "/"):
            r = httpx.request(method, server.url(path), json={"query": "{ usage { plan } }"}, timeout=30)
            assert r.status_code == 401 and r.headers["content-type"] == "application/json", (path, r.text)
            body = r.json()
            if base in graphql:
                assert body["data"] is None and code(r) == "UNAUTHENTICATED", (path, body)
                message = body["errors"][0]["message"]
            else:
                assert body["error"]["code"] == "UNAUTHENTICATED", (path, body)
                message = body["error"]["message"]
            assert message.startswith(f"the access key is missing: call {template} with your key"), (path, message)
    # Unrelated unknown paths stay plain 404s.
    assert httpx.request(method, server.url("/crypto-newz/"), timeout=30).status_code == 404


def test_document_limits(server: ApiServer) -> None:
    big = "{ cryptoNews(first: 1) { edges { cursor } } }" + " " * 10_300
    r = post(server, {"query": big})
    assert r.status_code == 400 and code(r) == "QUERY_TOO_LARGE"
    deep = "{ cryptoNews { edges { node { id } } } " + "".join(
        f"... on Query {{ a{i}: usage {{ plan }} }} " for i in range(21)) + "}"
    r = post(server, {"query": deep})
    assert r.status_code == 400 and code(r) == "QUERY_TOO_COMPLEX" and "aliases" in r.json()["errors"][0]["message"]
    nested = "{ " + "... on Query { " * 11 + "cryptoNews { edges { node { id } } }" + " }" * 11 + " }"
    assert post(server, {"query": nested}).status_code == 200  # fragments do not count as depth
    frag = ("query { cryptoNews { ...E } } fragment E on NewsConnection { edges { ...N } } "
            "fragment N on NewsEdge { node { id } }")
    assert post(server, {"query": frag}).status_code == 200
    r = post(server, {"query": "{ " + "a " * 1999 + "}"})  # 2,001 tokens
    assert r.status_code == 400 and code(r) == "QUERY_TOO_COMPLEX" and "tokens" in r.json()["errors"][0]["message"]
    r = post(server, {"query": "{ " + "a " * 1998 + "}"})  # 2,000 tokens: parsed, then refused by the field limit
    assert r.status_code == 400 and code(r) == "QUERY_TOO_COMPLEX" and "200 fields" in r.json()["errors"][0]["message"]


def test_depth_limit() -> None:
    # The schema is shallow, so depth is checked on the document, before validation.
    cache = DocumentCache()
    deep = "{ a " + "{ b " * 10 + "}" * 10 + " }"
    with pytest.raises(Exception) as info:
        cache.get(deep)
    assert info.value.code == "QUERY_TOO_COMPLEX" and "10 levels" in info.value.message
    ok = "{ a " + "{ b " * 9 + "}" * 9 + " }"  # depth 10: passes the limit, then fails validation
    with pytest.raises(Exception) as info:
        cache.get(ok)
    assert info.value.code == "GRAPHQL_VALIDATION_FAILED"
    cache.get(get_introspection_query(descriptions=True))  # deep, but introspection is exempt


def _ids(n: int) -> str:
    return "{ cryptoNews { edges { node { " + "id " * n + "} } } }"


def test_an_unknown_key_is_refused_before_the_document_is_prepared(server: ApiServer) -> None:
    """Parsing and validating 601 selections took 0.5 s of CPU on the event loop before the 401."""
    documents = server.server.config.app.state.cw.extras["news"].documents
    misses = documents.misses
    query = _ids(601) + " # unknown key"
    r = post(server, {"query": query}, "/crypto-news/cw_live_notakey")
    assert r.status_code == 401 and code(r) == "UNAUTHENTICATED"
    assert documents.misses == misses and query not in documents._items


def test_documents_are_prepared_off_the_event_loop(server: ApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from api import gql_documents

    threads = []
    prepare = gql_documents._prepare
    monkeypatch.setattr(gql_documents, "_prepare", lambda q: threads.append(threading.current_thread()) or prepare(q))
    r = post(server, {"query": "{ tickers } # off the loop"})
    assert r.status_code == 200 and threads and server._thread not in threads  # the server's loop runs there


def test_field_selection_limits(server: ApiServer) -> None:
    assert post(server, {"query": _ids(200)}).status_code == 200
    for query in (
        _ids(201),
        _ids(900),  # graphql-core's validator used to give up: 400 "Validation aborted."
        # Fragments count where they are spread: 2^16 `tickers`, which the walks used to expand one by one.
        "{ ...F0 } " + " ".join(f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}" for i in range(16))
        + " fragment F16 on Query { tickers }",
    ):
        r = post(server, {"query": query})
        assert r.status_code == 400 and code(r) == "QUERY_TOO_COMPLEX", r.text
        assert "more than 200 fields" in r.json()["errors"][0]["message"]
    r = post(server, {"query": "{ " + _ids(160)[2:-2] * 4 + " }"})  # 4 x 163 fields, each set under 200
    assert r.status_code == 400 and code(r) == "QUERY_TOO_COMPLEX", r.text
    assert "more than 500 fields" in r.json()["errors"][0]["message"]
    full = get_introspection_query(descriptions=True, specified_by_url=True, directive_is_repeatable=True,
                                   schema_description=True, input_value_deprecation=True)
    assert post(server, {"query": full}).status_code == 200  # 229 fields


def test_aborted_validation_is_explained(server: ApiServer) -> None:
    """graphql-core's "Validation aborted." (recursion, or its error limit) never reaches a client."""
    nest = "... on Query { " * 120
    deep = ("{ ...A } fragment A on Query { " + nest + "...B" + " }" * 121
            + " fragment B on Query { " + nest + "tickers" + " }" * 121)  # 240 levels of fragments
    r = post(server, {"query": deep})
    assert r.status_code == 400 and code(r) == "QUERY_TOO_COMPLEX", r.text
    assert r.json()["errors"][0]["message"].startswith("the document is too complex to validate")
    r = post(server, {"query": "{ " + " ".join(f"f{i}" for i in range(150)) + " }"})
    errors = r.json()["errors"]
    assert r.status_code == 400 and code(r) == "GRAPHQL_VALIDATION_FAILED" and len(errors) == 101
    assert errors[-1]["message"] == "more than 100 validation errors; fix these and send the query again"
    assert "aborted" not in r.text


def test_repeated_fields_are_charged_once(server: ApiServer) -> None:
    for query, cost in (
        ("{ cryptoNews(first: 10) { edges { node { id } } } cryptoNews(first: 10) { edges { node { title } } } }", 11),
        ("{ tickers tickers tickers }", 2),
        ("fragment F on Query { cryptoNews(first: 50) { edges { node { id } } } } "
         "{ ...F ...F cryptoNews(first: 50) { edges { node { title } } } }", 51),
        ("{ a: cryptoNews(first: 10) { edges { cursor } } b: cryptoNews(first: 10) { edges { cursor } } }", 21),
    ):
        r = post(server, {"query": query})
        assert r.status_code == 200 and r.headers["x-cu-cost"] == str(cost), (query, r.headers.get("x-cu-cost"))


@pytest.mark.parametrize("path", [f"/crypto-news/{KEY}", f"/prediction-events/{KEY}"])
def test_refused_methods_list_exactly_get_and_post(server: ApiServer, path: str) -> None:
    for method in ("HEAD", "OPTIONS", "PUT", "PATCH", "DELETE", "TRACE"):
        for accept in ("*/*", "text/html"):
            r = httpx.request(method, server.url(path), headers={"accept": accept}, timeout=30)
            assert r.status_code == 405 and r.headers["allow"] == "GET, POST", (method, accept, r.headers)
    r = httpx.get(server.url(path), headers={"accept": "application/json"}, timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    assert httpx.get(server.url(path), headers={"accept": "text/html"}, timeout=30).status_code == 200


def test_request_errors(server: ApiServer) -> None:
    url = server.url(f"/crypto-news/{KEY}")
    r = httpx.post(url, content=b'{"query": "{ usage { plan } }"', headers={"content-type": "application/json"})
    assert r.status_code == 400 and code(r) == "BAD_REQUEST" and r.json()["data"] is None
    r = httpx.post(url, content=b"query=1", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and code(r) == "UNSUPPORTED_MEDIA_TYPE"
    r = httpx.post(url, content=b"{ usage { plan } }", headers={"content-type": "application/graphql"})
    assert r.status_code == 415
    for body in ([{"query": "{ usage { plan } }"}], {"query": 3}, {"query": "{ usage { plan } }", "variables": []}):
        r = post(server, body)
        assert r.status_code == 400 and code(r) == "BAD_REQUEST", body
    # a string cut inside an emoji (a lone surrogate escape), in a variable or the query; JSON nested deeper than
    # the parser goes: each a 400 that says so, not a 500 (or a charge)
    for raw in (b'{"query": "query($s: String) { cryptoNews(search: $s) { edges { cursor } } }", '
                b'"variables": {"s": "\\ud800"}}',
                b'{"query": "{ tickers } #\\ud800"}',
                b'{"query": "{ tickers }", "variables": {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}}"):
        r = httpx.post(url, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and code(r) == "BAD_REQUEST", r.text
        assert "x-cu-cost" not in r.headers
    assert "surrogate" in r.text or "nested" in r.text
    # a key given twice (a security review: the last one won, so a proxy or an audit log reading the first saw a free
    # `usage` query while a paid one ran): refused, in the body and in the variables alike
    for raw, name in ((b'{"query": "{ usage { plan } }", "query": "{ cryptoNews(first: 100) { edges { cursor } } }"}',
                       "query"),
                      (b'{"query": "query($f: Int) { cryptoNews(first: $f) { edges { cursor } } }", '
                       b'"variables": {"f": 1, "f": 100}}', "f")):
        r = httpx.post(url, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and code(r) == "BAD_REQUEST", r.text
        assert f"`{name}` is given more than once" in r.json()["errors"][0]["message"] and "x-cu-cost" not in r.headers
    r = post(server, {"query": "{ cryptoNews { edges { nope } } }"})
    assert r.status_code == 400 and code(r) == "GRAPHQL_VALIDATION_FAILED"
    assert r.json()["errors"][0]["locations"]
    r = post(server, {"query": "{ cryptoNews( }"})
    assert r.status_code == 400 and code(r) == "GRAPHQL_PARSE_FAILED"
    r = post(server, {"query": "mutation { x }"})
    assert r.status_code == 400 and code(r) == "GRAPHQL_VALIDATION_FAILED"
    # an automatic persisted query (hash only): the code Apollo's link falls back on, sending the text
    r = post(server, {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "ab" * 32}}})
    assert r.status_code == 400 and code(r) == "PERSISTED_QUERY_NOT_SUPPORTED"
    assert r.json()["errors"][0]["message"].startswith("PersistedQueryNotSupported")
    r = post(server, {"query": "query A { usage { plan } } query B { tickers }"})
    assert r.status_code == 400 and code(r) == "BAD_REQUEST"
    assert post(server, {"query": "query A { usage { plan } } query B { tickers }", "operationName": "B"}).json()[
        "data"]["tickers"]
    r = post(server, {"query": "query($f: Int) { cryptoNews(first: $f) { edges { cursor } } }",
                      "variables": {"f": "ten"}})
    assert r.status_code == 400 and code(r) == "BAD_USER_INPUT"
    r = post(server, {"query": '{ cryptoNews(since: "yesterday") { edges { cursor } } }'})
    assert r.status_code == 400 and code(r) == "GRAPHQL_VALIDATION_FAILED"
    assert r.json()["errors"][0]["locations"] == [{"line": 1, "column": 21}]  # where the bad value is
    r = httpx.put(url, json={"query": "{ usage { plan } }"})
    assert r.status_code == 405 and code(r) == "METHOD_NOT_ALLOWED"
    r = httpx.get(url, headers={"accept": "application/json"})
    assert r.status_code == 405 and code(r) == "METHOD_NOT_ALLOWED"


@pytest.mark.parametrize(("field", "path", "args"), [
    ("cryptoNews", "/crypto-news/", 'since: "2026-11-20T00:00:00Z", until: "2026-11-01T00:00:00Z"'),
    ("stories", "/crypto-news/", 'since: "2026-11-20T00:00:00Z", until: "2026-11-01T00:00:00Z"'),
    ("predictionEvents", "/prediction-events/", 'dateFrom: "2026-12-31T00:00:00Z", dateTo: "2026-01-01T00:00:00Z"'),
])
def test_a_reversed_range_is_refused_and_costs_nothing(server: ApiServer, field: str, path: str, args: str) -> None:
    r = post(server, {"query": f"{{ {field}({args}) {{ edges {{ cursor }} }} }}"}, path + KEY)
    assert r.status_code == 400 and code(r) == "BAD_USER_INPUT", r.text
    assert "swap them" in r.json()["errors"][0]["message"]
    assert r.headers.get("x-cu-cost", "0") == "0"


@pytest.mark.parametrize(("field", "path", "arg", "value"), [
    ("cryptoNews", "/crypto-news/", "until", "9999-12-31"),
    ("cryptoNews", "/crypto-news/", "until", "9999-12-31T23:59:59.999999Z"),
    ("cryptoNews", "/crypto-news/", "since", "0001-01-01"),
    ("stories", "/crypto-news/", "until", "9999-12-31"),
    ("predictionEvents", "/prediction-events/", "dateTo", "9999-12-31"),
    ("cryptoNews", "/crypto-news/", "after", "0001-01-01T00:00:00+01:00"),
    ("cryptoNews", "/crypto-news/", "before", "9999-12-31T23:59:59-01:00"),
    ("predictionEvents", "/prediction-events/", "after", "9999-12-31T23:59:59-05:00"),
])
def test_dates_at_the_ends_of_the_calendar_are_refused_and_cost_nothing(
        server: ApiServer, field: str, path: str, arg: str, value: str) -> None:
    """They overflowed as bounds (the day after 9999-12-31) or when moved to UTC: a 500, some of them charged."""
    r = post(server, {"query": f'{{ {field}({arg}: "{value}") {{ edges {{ cursor }} }} }}'}, path + KEY)
    assert r.status_code == 400, r.text
    assert "between the years 2 and 9998" in r.json()["errors"][0]["message"], r.text
    assert r.headers.get("x-cu-cost", "0") == "0"


@pytest.mark.parametrize("cursor", ["nope", "2024-13-45", "bjE6eDp5Onp6OjE", "", "x" * 600])
def test_bad_cursors(server: ApiServer, cursor: str) -> None:
    for field, path in (("cryptoNews", "/crypto-news/"), ("predictionEvents", "/prediction-events/")):
        for arg in ("after", "before"):
            q = f"query($c: String) {{ {field}({arg}: $c) {{ edges {{ cursor }} }} }}"
            r = post(server, {"query": q, "variables": {"c": cursor}}, path + KEY)
            assert r.status_code == 400, (field, arg, cursor, r.text)
            assert code(r) == "BAD_CURSOR" and r.json()["errors"][0]["message"].startswith(f"`{arg}`")


def test_keys_and_costs(server: ApiServer) -> None:
    r = post(server, {"query": "{ usage { plan cuUsedToday cuRemainingToday cuLimit requestsPerSecond resetAt } }"},
             "/crypto-news/wrong-key")
    assert r.status_code == 401 and code(r) == "UNAUTHENTICATED"
    r = post(server, {"query": "{ usage { plan cuUsedToday cuRemainingToday cuLimit requestsPerSecond resetAt } }"})
    assert r.status_code == 200 and r.json()["data"]["usage"]["plan"] == "development"
    assert r.headers["x-cu-cost"] == "0"
    r = post(server, {"query": PUBLISHED_NEWS, "variables": {"first": 25}})
    assert r.headers["x-cu-cost"] == "26"
    r = post(server, {"query": PUBLISHED_SHORT}, f"/prediction-events/{KEY}")
    assert r.headers["x-cu-cost"] == "11"


def test_the_explorer_checks_the_key_and_a_trailing_slash_is_the_documented_404(server: ApiServer) -> None:
    for path in ("/crypto-news/not-a-key", "/prediction-events/not-a-key"):
        r = httpx.get(server.url(path), headers={"accept": "text/html"})
        assert r.status_code == 401 and r.headers["content-type"].startswith("text/html"), r.text
        assert "unknown access key" in r.text and "graphiql" not in r.text.lower()
    for path in (f"/crypto-news/{KEY}/", f"/prediction-events/{KEY}/", "/crypto-news/not-a-key/"):
        r = httpx.post(server.url(path), json={"query": "{ tickers }"})  # before: a bare 307 to the key's URL
        assert r.status_code == 404 and "location" not in r.headers, (path, r.status_code, r.headers)
        assert "nothing may follow the access key (not even a slash)" in r.json()["error"]["message"]


def test_graphiql_is_served_from_the_app(server: ApiServer) -> None:
    for path in (f"/crypto-news/{KEY}", f"/prediction-events/{KEY}"):
        r = httpx.get(server.url(path), headers={"accept": "text/html,application/xhtml+xml"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert KEY not in r.text  # the page posts to its own URL; it never echoes the key
        # its URL holds the key: not cached, not sent as a Referer, not framed by another site (a security review)
        assert (r.headers["cache-control"], r.headers["referrer-policy"], r.headers["x-frame-options"]) == (
            "no-store", "no-referrer", "DENY"), r.headers
        assert r.headers["content-security-policy"] == "frame-ancestors 'none'"
        refs = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert refs and all(ref.startswith("/assets/graphiql/") for ref in refs), refs
        assert "http://" not in r.text and "https://" not in r.text
        for ref in refs:
            asset = httpx.get(server.url(ref))
            assert asset.status_code == 200 and len(asset.content) > 5000, ref
    licence = Path(__file__).resolve().parents[1] / "api" / "static" / "graphiql" / "LICENSE.graphiql"
    assert "MIT License" in licence.read_text()


def test_introspection_works(server: ApiServer) -> None:
    r = post(server, {"query": get_introspection_query(descriptions=True)})
    assert r.status_code == 200
    types = {t["name"] for t in r.json()["data"]["__schema"]["types"]}
    assert {"NewsConnection", "PredictionEvent", "DateTime", "Sentiment", "EventStatus"} <= types


def test_readyz_before_and_after_a_snapshot(tmp_path: Path, data: Data) -> None:
    home = tmp_path / "home"
    settings = Settings(home=home, snapshot_poll_seconds=0.1)
    with ApiServer(create_app(settings, access=StaticKeys([KEY]))) as srv:
        r = httpx.get(srv.url("/readyz"))
        assert r.status_code == 503 and "materialize" in r.json()["reason"]
        r = post(srv, {"query": PUBLISHED_SHORT})
        assert r.status_code == 503 and code(r) == "NOT_READY"
        assert post(srv, {"query": "{ usage { plan } }"}).status_code == 200  # needs no snapshot
        path = build(home, data)
        import time

        deadline = time.monotonic() + 10
        while httpx.get(srv.url("/readyz")).status_code != 200:
            assert time.monotonic() < deadline, "the new snapshot was not picked up"
            time.sleep(0.05)
        assert httpx.get(srv.url("/readyz")).json()["snapshot"] == path.name
        assert post(srv, {"query": PUBLISHED_SHORT}).status_code == 200


# --------------------------------------------------------------------------------------------- schema and cost


def test_committed_sdl_matches_the_code() -> None:
    assert SDL_PATH.read_text() == sdl(), "api/schema.graphql is stale: python -m api.gql_schema > api/schema.graphql"


def _cost(query: str, variables: dict[str, Any] | None = None) -> int:
    prepared = DocumentCache().get(query)
    op = prepared.operation(None)
    return query_cost(op, prepared.fragments, coerce_variables(op, variables or {}))


def test_cost_formula() -> None:
    assert _cost("{ usage { plan } }") == 0
    assert _cost("{ __typename usage { cuLimit } }") == 0
    assert _cost("{ cryptoNews { edges { cursor } } }") == 11
    assert _cost(PUBLISHED_NEWS, {"first": 10}) == 11
    assert _cost(PUBLISHED_NEWS, {"first": 100}) == 101
    assert _cost("{ cryptoNews(first: 100) { edges { cursor } } predictionEvents(last: 20) { pageInfo { hasNextPage } } }") == 121
    assert _cost("{ a: cryptoNews(first: 5) { edges { cursor } } b: cryptoNews(first: 5) { edges { cursor } } usage { plan } }") == 11
    assert _cost("{ newsSources newsTopics tickers }") == 4
    skippable = "query($s: Boolean!) { cryptoNews(first: 50) @skip(if: $s) { edges { cursor } } }"
    assert _cost(skippable, {"s": False}) == 51
    assert _cost(skippable, {"s": True}) == 0  # nothing left to run
    assert _cost("query { ...F } fragment F on Query { cryptoNews(first: 3) { edges { cursor } } }") == 4
    assert _cost(get_introspection_query()) == 2
    # Charged per response key: a field selected again under the same name is merged into one result.
    twice = "{ cryptoNews(first: 10) { edges { node { id } } } cryptoNews(first: 10) { edges { node { title } } } }"
    assert _cost(twice) == 11
    assert _cost("{ tickers tickers tickers }") == 2
    assert _cost("fragment F on Query { cryptoNews(first: 50) { edges { node { id } } } } "
                 "{ ...F ...F cryptoNews(first: 50) { edges { node { title } } } }") == 51
    assert _cost("{ a: tickers b: tickers tickers }") == 4  # aliases stay separate fields


# --------------------------------------------------------------------------------------------- fast vs reference


DIFFERENTIAL = [
    (PUBLISHED_NEWS, {"first": 7}),
    (PUBLISHED_NEWS, {"after": "2024-12-01", "first": 5}),
    (PUBLISHED_EVENTS, {"after": "2024-12-01", "first": 10}),
    (PUBLISHED_SHORT, None),
    ("""query Q($skip: Boolean!, $inc: Boolean!) {
          __typename
          news: cryptoNews(last: 4, sentiment: Positive) {
            __typename
            pageInfo { ...P }
            edges @include(if: $inc) { cursor node { __typename id ...on News { title date } sentimentScore
                    imageUrl tickers } }
            more: edges @skip(if: $skip) { node { topics sourceName newsUrl text sentiment } }
          }
          ev: predictionEvents(first: 3, status: CLOSED) { edges { node { ...E } } pageInfo { ...P } }
          usage { plan cuUsedToday resetAt }
          newsSources
        }
        fragment P on PageInfo { hasNextPage hasPreviousPage startCursor endCursor }
        fragment E on PredictionEvent { id eventTitle eventDescription sourceUrl imageUrl createdAt date options tags
          asset kind subject comparator threshold currency resolutionCriteria resolutionSource status }""",
     {"skip": False, "inc": True}),
    ("""query Q($skip: Boolean!) { cryptoNews(first: 3, tickers: ["SOL"], search: "article") {
          edges { node { id } node { title } } edges @skip(if: $skip) { cursor } } }""", {"skip": True}),
    ('{ cryptoNews(first: 3, search: "no article says this") { pageInfo { hasNextPage hasPreviousPage startCursor '
     'endCursor } edges { cursor } } }', None),
]


@pytest.mark.parametrize("query,variables", DIFFERENTIAL)
def test_fast_executor_matches_graphql_core(home: Path, query: str, variables: dict[str, Any] | None) -> None:
    con, reader = open_reader(current_snapshot(home / "snapshots"))
    try:
        prepared = DocumentCache().get(query)
        assert not prepared.introspection
        op = prepared.operation(None)
        coerced = coerce_variables(op, variables or {})
        usage = {"plan": "pro", "cuUsedToday": 5, "resetAt": "2026-01-01T00:00:00.000Z"}
        fast = execute_plan(plan_operation(prepared, op, coerced, variables or {}),
                            Context(reader=reader, usage=dict(usage)), fast=True)
        ref = execute_plan(plan_operation(prepared, op, coerced, variables or {}),
                           Context(reader=reader, usage=dict(usage)), fast=False)
    finally:
        con.close()
    assert ref.errors == [] and fast.errors == []
    assert json.dumps(fast.data) == json.dumps(ref.data)  # same values, same key order
    assert fast.data


def test_documents_and_plans_are_cached(server: ApiServer) -> None:
    parse(PUBLISHED_SHORT)  # sanity: the document itself is valid
    component = server.server.config.app.state.cw.extras["news"]
    hits = component.documents.hits
    for _ in range(3):
        assert post(server, {"query": PUBLISHED_SHORT}).status_code == 200
    assert component.documents.hits >= hits + 2
    assert [k for k in component.plans if k[:3] == (PUBLISHED_SHORT, None, "{}")]  # (and the snapshot's anchor)
    # Same document, other variables: another plan, another answer.
    a = post(server, {"query": PUBLISHED_NEWS, "variables": {"first": 2}}).json()["data"]["cryptoNews"]
    b = post(server, {"query": PUBLISHED_NEWS, "variables": {"first": 2, "after": a["pageInfo"]["endCursor"]}})
    assert b.json()["data"]["cryptoNews"]["edges"][0] != a["edges"][0]


# --------------------------------------------------------------------------------------------- with real metering


def test_metered_requests_charge_the_cost_and_bad_input_nothing(tmp_path: Path, data: Data) -> None:
    from accounts import build_access

    home = tmp_path / "home"
    build(home, data)
    settings = Settings(home=home)
    access = build_access(settings)
    _, key = access.store.create_key("graphql-test", "pro", ["news"])
    with ApiServer(create_app(settings, access=access)) as srv:
        usage_q = {"query": "{ usage { plan cuUsedToday cuRemainingToday cuLimit requestsPerSecond resetAt } }"}
        r = post(srv, usage_q, f"/crypto-news/{key}")
        assert r.status_code == 200 and r.headers["x-cu-cost"] == "0"
        before = r.json()["data"]["usage"]
        assert before["plan"] == "pro" and before["cuUsedToday"] == 0 and before["resetAt"]
        r = post(srv, {"query": PUBLISHED_NEWS, "variables": {"first": 25}}, f"/crypto-news/{key}")
        assert r.status_code == 200 and r.headers["x-cu-cost"] == "26"
        assert "x-ratelimit-remaining" in r.headers and "x-cu-remaining-today" in r.headers
        bad = [
            {"query": PUBLISHED_NEWS, "variables": {"first": 5, "after": "not-a-cursor"}},
            {"query": PUBLISHED_NEWS, "variables": {"first": 101}},
            {"query": "{ cryptoNews { edges { nope } } }"},
        ]
        for body in bad:
            assert post(srv, body, f"/crypto-news/{key}").status_code == 400
        r = post(srv, {"query": PUBLISHED_SHORT}, f"/prediction-events/{key}")
        assert r.status_code == 403 and code(r) == "FORBIDDEN"  # the key is not enabled for events
        after = post(srv, usage_q, f"/crypto-news/{key}").json()["data"]["usage"]
        assert after["cuUsedToday"] == 26 and after["cuRemainingToday"] == before["cuRemainingToday"] - 26


@pytest.mark.parametrize("parts", [False, True])
def test_date_inferred_tells_the_fetch_time_from_a_publication_time(tmp_path: Path, parts: bool) -> None:
    articles = make_articles(6, 0)
    articles[2]["date_inferred"] = True  # its feed gave no date: published_at is when it was fetched
    home = tmp_path / "home"
    build(home, Data(articles, make_events(2)), parts=parts)
    with ApiServer(create_app(Settings(home=home), access=StaticKeys([KEY]))) as srv:
        r = post(srv, {"query": "{ cryptoNews(first: 10) { edges { node { id dateInferred } } } }"})
    assert r.status_code == 200, r.text
    flags = {e["node"]["id"]: e["node"]["dateInferred"] for e in r.json()["data"]["cryptoNews"]["edges"]}
    assert flags == {a["id"]: a is articles[2] for a in articles}


@pytest.mark.parametrize("path", [f"/crypto-news/{KEY}", f"/api/html-to-pdf/{KEY}"])
def test_a_body_that_never_arrives_is_answered_408(server: ApiServer, path: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A security review: a POST declaring 100 bytes and sending 9 held its connection with no answer (45 s and on).
    import socket

    import api.bodies

    monkeypatch.setattr(api.bodies, "BODY_SECONDS", 1.0)
    host, port = server.url("/").split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: 100\r\n\r\n{\"query\":".encode())
        answer = b""
        while chunk := sock.recv(4096):  # until the server closes: it must not read on as a next request
            answer += chunk
    text = answer.decode(errors="replace")
    assert text.startswith("HTTP/1.1 408") and "connection: close" in text.lower(), text
    assert "BODY_TIMEOUT" in text and "did not arrive within 1 s" in text, text
