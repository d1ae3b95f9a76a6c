"""A prediction-market builder's review of the API, against a real server over real published snapshots, in both
layouts (a single file and a partitioned set, whatever CRYPTOWIRE_TEST_SNAPSHOTS says):

- `ids` on `predictionEvents` (and, for consistency, `cryptoNews` and `stories`): refresh the items a client keeps
  without paging everything; combined with the other filters and paging; malformed ids and too many refused;
- `first` / `last` beyond 32 bits are told the allowed range, as other sizes are;
- `after` / `before` given as dates that leave no item between them are refused, as a reversed `since`/`until`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, make_articles, make_events, publish, write
from warehouse.config import Settings
from warehouse.db import connect
from warehouse.sentiment import refresh_asset_sentiment

KEY = "review-key"
NEWS, EVENTS = f"/crypto-news/{KEY}", f"/prediction-events/{KEY}"
EVENT_FIELDS = "id asset status withdrawnReason updatedAt withdrawnAt createdAt"
UNKNOWN_EVENT = "pevt_" + "Z" * 20  # well formed, in no snapshot


def _story_id(seed: str) -> str:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    digest = hashlib.sha256(seed.encode()).digest()
    return "st_" + "".join(letters[b % len(letters)] for b in digest[:20])


@pytest.fixture(scope="module")
def data() -> Data:
    return Data(make_articles(120, 40), make_events(40))


def _build(home: Path, data: Data, parts: bool) -> None:
    """The curated rows, a story per three articles, and one withdrawn event, published in the layout asked."""
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, data)
        by_time = sorted(data.articles, key=lambda a: (a["published_at"], a["id"]))
        for i in range(0, len(by_time), 3):
            members = by_time[i:i + 3]
            sid = _story_id(members[0]["id"])
            for a in members:
                con.execute("INSERT INTO story_articles VALUES (?, ?, ?, ?)",
                            [a["id"], sid, a["published_at"], a["published_at"]])
            con.execute(
                "INSERT INTO stories VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
                [sid, members[0]["title"], members[0]["published_at"], members[-1]["published_at"], len(members),
                 len({a["source_name"] for a in members}), sorted({t for a in members for t in a["tickers"]}),
                 sorted({t for a in members for t in a["topics"]}), members[-1]["published_at"]],
            )
        gone = data.events[7]
        con.execute("UPDATE prediction_events SET withdrawn_reason = 'its article no longer asks this', "
                    "withdrawn_at = ?, updated_at = ? WHERE id = ?",
                    [datetime(2024, 12, 5), datetime(2024, 12, 5), gone["id"]])
        con.execute("COMMIT")
        refresh_asset_sentiment(con)
        publish(con, home / "snapshots", parts=parts)
    finally:
        con.close()


@pytest.fixture(scope="module", params=["file", "parts"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, data: Data) -> Iterator[ApiServer]:
    home = tmp_path_factory.mktemp(f"review-{request.param}") / "home"
    _build(home, data, parts=request.param == "parts")
    if request.param == "parts":  # the set really is several parts, so ids are found across them
        assert len(list((home / "snapshots").glob("part-*.duckdb"))) > 2
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        yield srv


def post(srv: ApiServer, query: str, variables: dict[str, Any] | None = None, path: str = EVENTS) -> httpx.Response:
    return httpx.post(srv.url(path), json={"query": query, "variables": variables or {}}, timeout=30)


def ok(srv: ApiServer, query: str, variables: dict[str, Any] | None = None, path: str = EVENTS) -> dict[str, Any]:
    r = post(srv, query, variables, path)
    assert r.status_code == 200 and "errors" not in r.json(), r.text
    return r.json()["data"]


def refused(srv: ApiServer, query: str, variables: dict[str, Any] | None = None, path: str = EVENTS,
            code: str = "BAD_USER_INPUT") -> str:
    """The message of a 400 with ``code``, which must have cost nothing."""
    r = post(srv, query, variables, path)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["data"] is None and body["errors"][0]["extensions"]["code"] == code, r.text
    assert r.headers.get("x-cu-cost", "0") == "0"
    return body["errors"][0]["message"]


def _all(srv: ApiServer, field: str, fields: str, args: str = "", variables: dict[str, Any] | None = None,
         decl: str = "", path: str = EVENTS) -> list[dict[str, Any]]:
    """Every node of ``field`` with ``args``, paged forwards by 100."""
    out: list[dict[str, Any]] = []
    after = None
    while True:
        q = (f"query($after: String{decl}) {{ {field}(first: 100, after: $after{args}) "
             f"{{ pageInfo {{ hasNextPage endCursor }} edges {{ node {{ {fields} }} }} }} }}")
        conn = ok(srv, q, {**(variables or {}), "after": after}, path)[field]
        out += [e["node"] for e in conn["edges"]]
        if not conn["pageInfo"]["hasNextPage"]:
            return out
        after = conn["pageInfo"]["endCursor"]


# --------------------------------------------------------------------------------------------- ids


def test_events_by_ids_refresh_what_a_market_builder_keeps(server: ApiServer, data: Data) -> None:
    everything = _all(server, "predictionEvents", EVENT_FIELDS)
    assert len(everything) == len(data.events)
    rng = random.Random(5)
    kept = rng.sample([e["id"] for e in everything], 9) + [data.events[7]["id"], everything[-1]["id"]]
    query = f"""query($ids: [String!]) {{ predictionEvents(ids: $ids, first: 100) {{
        pageInfo {{ hasNextPage hasPreviousPage }} edges {{ cursor node {{ {EVENT_FIELDS} }} }} }} }}"""
    got = ok(server, query, {"ids": [*reversed(kept), UNKNOWN_EVENT, kept[0]]})["predictionEvents"]
    # exactly the known ones, once each, in serving order, with what a refresh is for
    assert [e["node"] for e in got["edges"]] == [e for e in everything if e["id"] in kept]
    assert got["pageInfo"] == {"hasNextPage": False, "hasPreviousPage": False}
    gone = next(e["node"] for e in got["edges"] if e["node"]["id"] == data.events[7]["id"])
    assert gone["status"] == "WITHDRAWN" and gone["withdrawnReason"] == "its article no longer asks this"
    assert gone["updatedAt"] == gone["withdrawnAt"] == "2024-12-05T00:00:00.000Z"
    assert all(e["cursor"] == e["node"]["createdAt"] for e in got["edges"])
    # unknown ids are simply absent
    assert ok(server, query, {"ids": [UNKNOWN_EVENT]})["predictionEvents"]["edges"] == []
    assert ok(server, query, {"ids": []})["predictionEvents"]["edges"] == []  # no ids: nothing, not everything


@pytest.mark.parametrize(("args", "decl", "variables"), [
    ("", "", {}),
    (", tickers: $t", ", $t: [String!]", {"t": ["btc", "ETH"]}),
    (", status: WITHDRAWN", "", {}),
    (", status: OPEN, tags: $t", ", $t: [String!]", {"t": ["PriceMovement"]}),
    (', dateFrom: "2024-12-10", dateTo: "2025-01-01"', "", {}),
    (', updatedSince: "2024-11-29"', "", {}),
])
def test_event_ids_combine_with_the_filters_and_page_like_them(
        server: ApiServer, data: Data, args: str, decl: str, variables: dict[str, Any]) -> None:
    everything = [e["id"] for e in _all(server, "predictionEvents", "id")]
    ids = everything[::3] + [data.events[7]["id"], UNKNOWN_EVENT]
    filtered = [e["id"] for e in _all(server, "predictionEvents", "id", args, variables, decl)]
    expected = [i for i in filtered if i in ids]
    assert expected  # every case selects some
    args, decl, variables = ", ids: $ids" + args, ", $ids: [String!]" + decl, {**variables, "ids": ids}
    assert [e["id"] for e in _all(server, "predictionEvents", "id", args, variables, decl)] == expected
    # forwards and backwards by 2, pageInfo exact on each page
    page = f"""query($n: Int, $m: Int, $a: String, $b: String{decl}) {{
        predictionEvents(first: $n, last: $m, after: $a, before: $b{args}) {{
        pageInfo {{ hasNextPage hasPreviousPage startCursor endCursor }} edges {{ node {{ id }} }} }} }}"""
    seen: list[str] = []
    after = None
    while True:
        conn = ok(server, page, {**variables, "n": 2, "a": after})["predictionEvents"]
        nodes = [e["node"]["id"] for e in conn["edges"]]
        assert nodes == expected[len(seen):len(seen) + 2]
        assert conn["pageInfo"]["hasPreviousPage"] == bool(seen)
        seen += nodes
        assert conn["pageInfo"]["hasNextPage"] == (len(seen) < len(expected))
        if not conn["pageInfo"]["hasNextPage"]:
            break
        after = conn["pageInfo"]["endCursor"]
    assert seen == expected
    seen, before = [], None
    while True:
        conn = ok(server, page, {**variables, "m": 2, "b": before})["predictionEvents"]
        nodes = [e["node"]["id"] for e in conn["edges"]]
        end = len(expected) - len(seen)
        assert nodes == expected[max(0, end - 2):end]
        assert conn["pageInfo"]["hasNextPage"] == bool(seen)
        seen = nodes + seen
        assert conn["pageInfo"]["hasPreviousPage"] == (len(seen) < len(expected))
        if not conn["pageInfo"]["hasPreviousPage"]:
            break
        before = conn["pageInfo"]["startCursor"]
    assert seen == expected
    # a date as `after` bounds the ids like any filter
    cut = "2024-11-30T12:00:00Z"
    older = [e["id"] for e in _all(server, "predictionEvents", "id createdAt", args, variables, decl)
             if e["createdAt"] < "2024-11-30T12:00:00.000Z"]
    conn = ok(server, page, {**variables, "n": 100, "a": cut})["predictionEvents"]
    assert [e["node"]["id"] for e in conn["edges"]] == older


def test_event_ids_cost_what_the_page_costs_as_other_filters_do(server: ApiServer, data: Data) -> None:
    ids = [e["id"] for e in data.events[:3]]
    plain = post(server, "{ predictionEvents(first: 5) { edges { cursor } } }")
    q = "query($ids: [String!]) { predictionEvents(first: 5, ids: $ids) { edges { cursor } } }"
    r = post(server, q, {"ids": ids})
    assert r.status_code == 200 and len(r.json()["data"]["predictionEvents"]["edges"]) == 3
    assert r.headers["x-cu-cost"] == plain.headers["x-cu-cost"] == "6"
    r = post(server, "query($ids: [String!]) { predictionEvents(ids: $ids) { edges { cursor } } }", {"ids": ids})
    assert r.headers["x-cu-cost"] == "11"  # the default page of 10, as any filter


def test_malformed_and_too_many_ids_are_refused_and_cost_nothing(server: ApiServer, data: Data) -> None:
    q = "query($ids: [String!]) { predictionEvents(ids: $ids) { edges { cursor } } }"
    good = data.events[0]["id"]
    for bad in ("pevt_short", good + "x", good.replace("pevt_", "PEVT_"), "pevt_" + "é" * 20, "pevt_" + "-" * 20,
                " " + good, good + "\n", ""):
        message = refused(server, q, {"ids": [good, bad]})
        assert repr(bad) in message and "`pevt_` and 20 letters or digits" in message, message
    message = refused(server, q, {"ids": [good] * 101})
    assert "101" in message and "at most 100" in message
    assert len(ok(server, q, {"ids": [good] * 100})["predictionEvents"]["edges"]) == 1
    message = refused(server, '{ predictionEvents(ids: ["pevt_nope"]) { edges { cursor } } }')
    assert "'pevt_nope'" in message


def test_news_and_stories_by_ids_as_events(server: ApiServer, data: Data) -> None:
    stories = _all(server, "stories", "id articleIds", path=NEWS)
    news = _all(server, "cryptoNews", "id story { id }", path=NEWS)
    assert len(news) == len(data.articles) and len(stories) == 40
    # a story's articles by their ids, and an article's story by its id
    story = stories[5]
    q = "query($ids: [String!]) { cryptoNews(ids: $ids, first: 100) { edges { node { id story { id } } } } }"
    got = ok(server, q, {"ids": story["articleIds"] + ["a_" + "0" * 16]}, NEWS)["cryptoNews"]["edges"]
    assert [e["node"]["id"] for e in got] == [n["id"] for n in news if n["id"] in story["articleIds"]]
    assert {e["node"]["story"]["id"] for e in got} == {story["id"]}
    q = "query($ids: [String!]) { stories(ids: $ids, first: 100) { edges { node { id } } } }"
    ids = [s["id"] for s in stories[::4]] + [_story_id("nowhere")]
    assert [e["node"]["id"] for e in ok(server, q, {"ids": ids}, NEWS)["stories"]["edges"]] == [s["id"] for s in stories[::4]]
    # with the other filters and paging
    eth = {n["id"] for n in _all(server, "cryptoNews", "id", ", tickers: [\"ETH\"]", path=NEWS)}
    wanted = [n["id"] for n in news[::2]]
    q = """query($ids: [String!], $after: String) { cryptoNews(ids: $ids, tickers: ["eth"], first: 3, after: $after) {
        pageInfo { hasNextPage endCursor } edges { node { id } } } }"""
    seen, after = [], None
    while True:
        conn = ok(server, q, {"ids": wanted, "after": after}, NEWS)["cryptoNews"]
        seen += [e["node"]["id"] for e in conn["edges"]]
        if not conn["pageInfo"]["hasNextPage"]:
            break
        after = conn["pageInfo"]["endCursor"]
    assert seen == [i for i in wanted if i in eth] and seen
    # their own id forms; ids and collapseStories together would hide some of the ids
    message = refused(server, '{ cryptoNews(ids: ["st_aaaaaaaaaaaaaaaaaaaa"]) { edges { cursor } } }', path=NEWS)
    assert "`a_` and 16 lower-case hexadecimal digits" in message
    message = refused(server, f'{{ stories(ids: ["{news[0]["id"]}"]) {{ edges {{ cursor }} }} }}', path=NEWS)
    assert "`st_` and 20 letters or digits" in message
    message = refused(server, f'{{ cryptoNews(ids: ["{news[0]["id"]}"], collapseStories: true) {{ edges {{ cursor }} }} }}',
                      path=NEWS)
    assert "collapseStories" in message


# --------------------------------------------------------------------------------------------- 32-bit sizes


@pytest.mark.parametrize(("query", "variables", "hint"), [
    ("{ cryptoNews(first: 100000000000) { edges { cursor } } }", None,
     "`first` on the `cryptoNews` connection must be from 1 to 100"),
    ("{ predictionEvents(last: -3000000000) { edges { cursor } } }", None,
     "`last` on the `predictionEvents` connection must be from 1 to 100"),
    ("query($n: Int) { stories(first: $n) { edges { cursor } } }", {"n": 100000000000},
     "`first` on the `stories` connection must be from 1 to 100"),
    ("query($n: Int) { cryptoNews(last: $n) { edges { cursor } } }", {"n": -(2**40)},
     "`last` on the `cryptoNews` connection must be from 1 to 100"),
    ("query($n: Int) { ...F } fragment F on Query { predictionEvents(first: $n) { edges { cursor } } }",
     {"n": 2**31}, "`first` on the `predictionEvents` connection must be from 1 to 100"),
    ("{ trendingTickers(first: 4294967296) { window } }", None,
     "`first` on the `trendingTickers` list must be from 1 to 100"),
    ("{ stories(minSources: 99999999999) { edges { cursor } } }", None, "`minSources` must be from 1 to 1000"),
])
def test_sizes_beyond_32_bits_are_told_the_allowed_range(
        server: ApiServer, query: str, variables: dict[str, Any] | None, hint: str) -> None:
    r = post(server, query, variables)
    assert r.status_code == 400, r.text
    error = r.json()["errors"][0]
    assert r.json()["data"] is None and error["extensions"] == {"code": "BAD_USER_INPUT"}, r.text
    assert "32-bit" in error["message"] and hint in error["message"], error["message"]
    assert error["locations"]  # where the value (or the variable) is
    assert r.headers.get("x-cu-cost", "0") == "0"


def test_other_errors_keep_their_code(server: ApiServer) -> None:
    # a type error in the query text stays a validation failure; another error beside a size keeps its code too
    message = refused(server, '{ cryptoNews(first: "ten") { edges { cursor } } }', code="GRAPHQL_VALIDATION_FAILED")
    assert "from 1 to 100" in message
    refused(server, "{ cryptoNews(first: 100000000000) { edges { nope } } }", code="GRAPHQL_VALIDATION_FAILED")
    message = refused(server, "query($s: DateTime) { cryptoNews(since: $s) { edges { cursor } } }", {"s": 5})
    assert "from 1 to" not in message


# --------------------------------------------------------------------------------------------- inverted windows


@pytest.mark.parametrize(("field", "path"), [
    ("cryptoNews", NEWS), ("stories", NEWS), ("predictionEvents", EVENTS),
])
@pytest.mark.parametrize(("after", "before"), [
    ("2024-11-01", "2024-12-01"),  # older than Nov 1 and newer than Dec 1
    ("2024-12-01", "2024-12-01"),  # strictly older and strictly newer than the same instant
    ("2024-12-01T08:00:00+02:00", "2024-12-01T06:00:00Z"),  # the same instant, written twice
    ("2024-11-30T23:59:59Z", "2024-12-01"),
])
def test_an_inverted_after_before_window_is_refused(server: ApiServer, field: str, path: str, after: str,
                                                    before: str) -> None:
    q = f"query($a: String, $b: String) {{ {field}(after: $a, before: $b) {{ edges {{ cursor }} }} }}"
    message = refused(server, q, {"a": after, "b": before}, path)
    assert f'`after` ("{after}") is not later than `before` ("{before}")' in message, message
    assert "no item can match" in message
    same = after == before or after.startswith("2024-12-01T08")
    assert ("swap them (after: " in message) != same and ("leave one out" in message), message
    # the right way round, the window holds items
    assert ok(server, q, {"a": "2025-01-01", "b": "2024-01-01"}, path)[field]["edges"]


def test_windows_that_can_hold_items_and_news_cursor_pairs_are_served(server: ApiServer) -> None:
    q = "query($a: String, $b: String) { cryptoNews(first: 100, after: $a, before: $b) { edges { cursor } } }"
    assert ok(server, q, {"a": "2024-12-02", "b": "2024-11-30"}, NEWS)["cryptoNews"]["edges"]
    # a window of one microsecond is empty in practice, not by construction: served (empty)
    at = datetime(2024, 12, 1)
    one = {"a": (at + timedelta(microseconds=1)).isoformat() + "Z", "b": at.isoformat() + "Z"}
    assert ok(server, q, one, NEWS)["cryptoNews"]["edges"] == []
    # news cursors are opaque keys, not dates: a reversed pair is left alone (an empty page), as is a cursor and a date
    edges = ok(server, q, {"a": None, "b": None}, NEWS)["cryptoNews"]["edges"]
    newer, older = edges[0]["cursor"], edges[50]["cursor"]
    assert ok(server, q, {"a": older, "b": newer}, NEWS)["cryptoNews"]["edges"] == []
    assert ok(server, q, {"a": older, "b": "2030-01-01"}, NEWS)["cryptoNews"]["edges"] == []
    assert len(ok(server, q, {"a": newer, "b": older}, NEWS)["cryptoNews"]["edges"]) == 49
    # event cursors are their createdAt (documented): a reversed pair of them is a reversed pair of timestamps
    q = "query($a: String, $b: String) { predictionEvents(first: 100, after: $a, before: $b) { edges { cursor } } }"
    edges = ok(server, q, {"a": None, "b": None})["predictionEvents"]["edges"]
    newer, older = edges[0]["cursor"], edges[10]["cursor"]
    assert len(ok(server, q, {"a": newer, "b": older})["predictionEvents"]["edges"]) == 9
    assert "swap them" in refused(server, q, {"a": older, "b": newer})
