"""Keyset pagination over a real published snapshot: every item exactly once, both directions, any page size,
hundreds of equal publication times, filters, and cursors that outlive their snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from gql import Client, GraphQLRequest
from gql.transport.requests import RequestsHTTPTransport

from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import BURST_AT, Data, build, make_articles, make_events, open_reader, republish
from warehouse.config import Settings
from warehouse.cursors import (
    CursorError,
    Instant,
    decode_event_cursor,
    decode_news_cursor,
    encode_news_cursor,
    parse_instant,
    to_us,
)
from warehouse.db import connect
from warehouse.published import current_snapshot
from warehouse.read import EventFilters, NewsFilters, PageRequest, SnapshotReader

N_ARTICLES, BURST, N_EVENTS = 640, 300, 90


@pytest.fixture(scope="module")
def data() -> Data:
    return Data(make_articles(N_ARTICLES, BURST), make_events(N_EVENTS))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, data: Data) -> Path:
    home = tmp_path_factory.mktemp("pagination") / "home"
    build(home, data)
    return home


@pytest.fixture
def reader(home: Path) -> Iterator[SnapshotReader]:
    con, reader = open_reader(current_snapshot(home / "snapshots"))
    yield reader
    con.close()


def _ids(page) -> list[str]:
    return [r["id"] for r in page.rows]


def forward(reader: SnapshotReader, size: int, filters: NewsFilters = NewsFilters()) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = reader.news_page(PageRequest(first=size, after=after), filters)
        assert page.has_previous is (after is not None and bool(seen))
        seen += _ids(page)
        if not page.has_next:
            return seen
        assert len(page.rows) == size
        after = decode_news_cursor(reader.news_cursor(page.rows[-1]))


def backward(reader: SnapshotReader, size: int, filters: NewsFilters = NewsFilters()) -> list[str]:
    seen: list[str] = []
    before = None
    while True:
        page = reader.news_page(PageRequest(last=size, before=before), filters)
        assert page.has_next is (before is not None and bool(seen))
        seen = _ids(page) + seen
        if not page.has_previous:
            return seen
        assert len(page.rows) == size
        before = decode_news_cursor(reader.news_cursor(page.rows[0]))


@pytest.mark.parametrize("size", [1, 7, 100])
def test_news_forward_and_backward_visit_every_item_once(reader: SnapshotReader, data: Data, size: int) -> None:
    expected = data.news_order()
    assert len({a["published_at"] for a in data.articles if a["published_at"] == BURST_AT}) == 1
    assert sum(a["published_at"] == BURST_AT for a in data.articles) == BURST
    assert forward(reader, size) == expected
    assert backward(reader, size) == expected


def test_news_filters_page_exactly_once(reader: SnapshotReader, data: Data) -> None:
    cases = [
        (NewsFilters(tickers=("eth",)), lambda a: "ETH" in a["tickers"]),
        (NewsFilters(tickers=("SOL", "XRP"), sentiment="Negative"),
         lambda a: bool({"SOL", "XRP"} & set(a["tickers"])) and a["sentiment"] == "negative"),
        (NewsFilters(sources=("Decrypt",), topics=("defi", "etf")),
         lambda a: a["source_name"] == "Decrypt" and a["topics"][0] in ("defi", "etf")),
        (NewsFilters(sources=("decrypt",), topics=("DeFi", "ETF")),  # as people type them
         lambda a: a["source_name"] == "Decrypt" and a["topics"][0] in ("defi", "etf")),
        (NewsFilters(search="ARTICLE 1"), lambda a: "article 1" in a["title"].lower()),
        (NewsFilters(since=parse_instant("2024-11-20T12:00:00Z"), until=parse_instant("2024-12-01")),
         lambda a: BURST_AT <= a["published_at"] < datetime(2024, 12, 2)),
        (NewsFilters(since=parse_instant("2024-11-25"), tickers=("BTC",)),
         lambda a: a["published_at"] >= datetime(2024, 11, 25) and "BTC" in a["tickers"]),
    ]
    for filters, keep in cases:
        wanted = set(a["id"] for a in data.articles if keep(a))
        expected = [i for i in data.news_order() if i in wanted]
        assert expected, f"the data should exercise {filters}"
        assert forward(reader, 9, filters) == expected, filters
        assert backward(reader, 4, filters) == expected, filters


def test_news_after_a_date_means_strictly_older(reader: SnapshotReader, data: Data) -> None:
    page = reader.news_page(PageRequest(first=100, after=decode_news_cursor("2024-11-20T12:00:00Z")))
    assert page.rows and all(r["date"] < "2024-11-20T12:00:00.000Z" for r in page.rows)
    older = [a for a in data.articles if a["published_at"] < BURST_AT]
    assert _ids(page) == [i for i in data.news_order() if i in {a["id"] for a in older}][:100]
    assert page.has_previous is True
    newer = reader.news_page(PageRequest(last=100, before=decode_news_cursor("2024-11-20T12:00:00Z")))
    assert all(r["date"] > "2024-11-20T12:00:00.000Z" for r in newer.rows)


def test_window_between_two_cursors(reader: SnapshotReader, data: Data) -> None:
    order = data.news_order()
    whole = reader.news_page(PageRequest(first=100))
    a = decode_news_cursor(reader.news_cursor(whole.rows[10]))
    b = decode_news_cursor(reader.news_cursor(whole.rows[40]))
    page = reader.news_page(PageRequest(first=50, after=a, before=b))
    assert _ids(page) == order[11:40] and page.has_next is False and page.has_previous is True
    page = reader.news_page(PageRequest(last=5, after=a, before=b))
    assert _ids(page) == order[35:40] and page.has_previous is True and page.has_next is True


def test_a_cursor_edited_by_hand_pages_by_its_key(reader: SnapshotReader, data: Data) -> None:
    """A cursor's position is a shortcut for its key (time, id): one pointing at another row is not trusted."""
    order = data.news_order()
    whole = reader.news_page(PageRequest(first=30))
    honest = decode_news_cursor(reader.news_cursor(whole.rows[10]))
    assert honest.pos is not None
    for pos in (honest.pos + 10, 0, honest.pos - 1):
        forged = decode_news_cursor(encode_news_cursor(to_us(honest.at), honest.id, honest.tag, pos))
        assert _ids(reader.news_page(PageRequest(first=5, after=forged))) == order[11:16], pos
        assert _ids(reader.news_page(PageRequest(last=5, before=forged))) == order[5:10], pos


@pytest.mark.parametrize(("text", "at"), [
    ("2024-12-01T10:00:00.0000000Z", datetime(2024, 12, 1, 10)),  # .NET's "o"
    ("2024-12-01T10:00:00.123456789+02:00", datetime(2024, 12, 1, 8, 0, 0, 123456)),  # Go's RFC3339Nano
    ("2024-12-01T10:00:00,5Z", datetime(2024, 12, 1, 10, 0, 0, 500000)),
    ("2024-12-01 10:00", datetime(2024, 12, 1, 10)),
])
def test_timestamps_of_common_clients_are_read(text: str, at: datetime) -> None:
    assert parse_instant(text).at == at


@pytest.mark.parametrize("text", ["20241201", "2024-W48-7", "2024-12-01T10", "+2024-12-01"])
def test_dates_of_other_iso_forms_are_refused_with_the_forms_that_work(text: str) -> None:
    with pytest.raises(CursorError, match="of the form 2024-12-01 or 2024-12-01T10:00:00.000Z"):
        parse_instant(text)


def test_news_cursor_survives_a_new_snapshot(tmp_path: Path, data: Data) -> None:
    """New articles land (some in the middle of the burst), one is deleted: paging goes on without skips."""
    home = tmp_path / "home"
    build(home, data)
    con, reader = open_reader(current_snapshot(home / "snapshots"))
    page = reader.news_page(PageRequest(first=150))  # ends inside the burst
    cursor = reader.news_cursor(page.rows[-1])
    con.close()
    key = decode_news_cursor(cursor)
    added = make_articles(60, 20, seed=99, start=datetime(2024, 12, 5))
    wh = connect(home / "warehouse.duckdb")
    for i, a in enumerate(added):
        wh.execute(
            """INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories,
                   published_at, fetched_at, content_hash, tickers, topics)
               VALUES (?, 'Late', 'f', ?, ?, 's', [], [], ?, ?, 'h', [], [])""",
            [a["id"], f"https://late.example/{i}", f"Late {i}", a["published_at"], a["published_at"]],
        )
    gone = data.news_order()[150]
    wh.execute("DELETE FROM articles WHERE id = ?", [gone])
    wh.close()
    republish(home)
    con, reader2 = open_reader(current_snapshot(home / "snapshots"))
    assert reader2.tag != key.tag
    rest = forward_from(reader2, cursor)
    everything = sorted(data.articles + added, key=lambda a: (a["published_at"], a["id"]), reverse=True)
    expected = [a["id"] for a in everything if (a["published_at"], a["id"]) < (key.at, key.id) and a["id"] != gone]
    assert rest == expected
    # The cursor's own article deleted too: its key still splits the list in the same place.
    con.close()
    wh = connect(home / "warehouse.duckdb")
    wh.execute("DELETE FROM articles WHERE id = ?", [key.id])
    wh.close()
    republish(home)
    con, reader3 = open_reader(current_snapshot(home / "snapshots"))
    assert forward_from(reader3, cursor) == expected
    con.close()


def forward_from(reader: SnapshotReader, cursor: str) -> list[str]:
    seen: list[str] = []
    after = decode_news_cursor(cursor)
    while True:
        page = reader.news_page(PageRequest(first=25, after=after))
        seen += _ids(page)
        if not page.has_next:
            return seen
        after = decode_news_cursor(reader.news_cursor(page.rows[-1]))


def test_events_pages_both_ways_with_iso_cursors(reader: SnapshotReader, data: Data) -> None:
    now = datetime(2025, 6, 1)
    for filters, keep in [
        (EventFilters(), lambda e: True),
        (EventFilters(status="OPEN"), lambda e: e["date"] > now),
        (EventFilters(status="CLOSED", tickers=("eth",)), lambda e: e["date"] <= now and e["asset"] == "ETH"),
        (EventFilters(status="OPEN", tickers=("eth",)), lambda e: False),
        (EventFilters(tags=("ETH",), date_to=Instant(datetime(2099, 12, 31), True)), lambda e: e["asset"] == "ETH"),
        (EventFilters(tags=("eth",)), lambda e: e["asset"] == "ETH"),  # tags match whatever their case
        (EventFilters(date_from=parse_instant("2025-01-01")), lambda e: e["date"] >= datetime(2025, 1, 1)),
    ]:
        expected = [i for i in data.event_order() if keep(next(e for e in data.events if e["id"] == i))]
        assert expected or filters.status == "OPEN", filters
        seen, after = [], None
        while True:
            page = reader.events_page(PageRequest(first=8, after=after), filters, now=now)
            for r in page.rows:
                assert r["createdAt"].endswith("Z") and len(r["createdAt"]) == 24
                assert r["status"] == ("OPEN" if datetime.fromisoformat(r["date"][:-1]) > now else "CLOSED")
            seen += _ids(page)
            if not page.has_next:
                break
            after = decode_event_cursor(page.rows[-1]["createdAt"])
        assert seen == expected, filters
        back, before = [], None
        while True:
            page = reader.events_page(PageRequest(last=5, before=before), filters, now=now)
            back = _ids(page) + back
            if not page.has_previous:
                break
            before = decode_event_cursor(page.rows[0]["createdAt"])
        assert back == expected, filters


def test_a_client_finds_the_events_that_changed_since_it_last_looked(tmp_path: Path) -> None:
    """`updatedSince` lists the events edited, withdrawn or restored at or after an instant, with their times, so
    that a client polling for changes need not page through every event again; over HTTP, as clients ask."""
    data = Data(make_articles(40, 0), make_events(30))
    home = tmp_path / "home"
    build(home, data)
    changed_at = datetime(2030, 1, 2, 3, 4, 5, 678000)
    gone, edited = data.events[3]["id"], data.events[7]["id"]
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("UPDATE prediction_events SET withdrawn_reason = 'its source article now asks another question', "
                    "withdrawn_at = $t, updated_at = $t WHERE id = $id", {"t": changed_at, "id": gone})
        con.execute("UPDATE prediction_events SET event_description = 'edited', updated_at = $t WHERE id = $id",
                    {"t": changed_at, "id": edited})
    finally:
        con.close()
    republish(home)
    query = """query($since: DateTime, $after: String) { predictionEvents(first: 1, updatedSince: $since, after: $after) {
      pageInfo { hasNextPage endCursor } edges { node { id status updatedAt withdrawnAt } } } }"""
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys(["test-key"]))) as api:
        def changed(since: str) -> list[dict]:
            got, after = [], None
            while True:
                r = httpx.post(api.url("/prediction-events/test-key"),
                               json={"query": query, "variables": {"since": since, "after": after}}, timeout=30)
                assert r.status_code == 200 and "errors" not in r.json(), r.text
                page = r.json()["data"]["predictionEvents"]
                got += [e["node"] for e in page["edges"]]
                if not page["pageInfo"]["hasNextPage"]:
                    return got
                after = page["pageInfo"]["endCursor"]

        nodes = {n["id"]: n for n in changed("2030-01-02T03:04:05.678Z")}
        assert set(nodes) == {gone, edited}
        assert nodes[gone]["status"] == "WITHDRAWN" and nodes[gone]["withdrawnAt"] == "2030-01-02T03:04:05.678Z"
        assert nodes[edited]["updatedAt"] == "2030-01-02T03:04:05.678Z" and nodes[edited]["withdrawnAt"] is None
        assert changed("2030-01-02T03:04:05.679Z") == []
        assert len(changed("2000-01-01")) == len(data.events)


def test_events_after_a_plain_date(reader: SnapshotReader, data: Data) -> None:
    page = reader.events_page(PageRequest(first=100, after=decode_event_cursor("2024-12-01")))
    cut = datetime(2024, 12, 1)
    assert _ids(page) == [i for i in data.event_order()
                          if next(e for e in data.events if e["id"] == i)["created_at"] < cut]
    assert page.rows and page.has_previous is True


# --------------------------------------------------------------------------------------------- over HTTP, with gql

NEWS = """query Page($first: Int, $after: String, $last: Int, $before: String) {
  cryptoNews(first: $first, after: $after, last: $last, before: $before) {
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
    edges { cursor node { id date } }
  }
}"""
EVENTS = """query Page($first: Int, $after: String, $last: Int, $before: String) {
  predictionEvents(first: $first, after: $after, last: $last, before: $before) {
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
    edges { cursor node { id createdAt } }
  }
}"""


@pytest.fixture(scope="module")
def client(home: Path) -> Iterator[Client]:
    settings = Settings(home=home)
    with ApiServer(create_app(settings, access=StaticKeys(["test-key"]))) as srv:
        transport = RequestsHTTPTransport(url=srv.url("/crypto-news/test-key"), timeout=30)
        with Client(transport=transport, fetch_schema_from_transport=True) as session:
            yield session


def _walk(session: Client, query: str, field: str, forwards: bool, size: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        variables = {"first": size, "after": cursor} if forwards else {"last": size, "before": cursor}
        result = session.execute(GraphQLRequest(query, variable_values=variables))[field]
        edges, info = result["edges"], result["pageInfo"]
        cursors = [e["cursor"] for e in edges]
        assert len(set(cursors)) == len(cursors)
        assert info["startCursor"] == (cursors[0] if cursors else None)
        assert info["endCursor"] == (cursors[-1] if cursors else None)
        ids = [e["node"]["id"] for e in edges]
        if forwards:
            assert info["hasPreviousPage"] is (cursor is not None)
            seen += ids
            if not info["hasNextPage"]:
                return seen
            cursor = info["endCursor"]
        else:
            assert info["hasNextPage"] is (cursor is not None)
            seen = ids + seen
            if not info["hasPreviousPage"]:
                return seen
            cursor = info["startCursor"]


def test_gql_client_pages_through_news_exactly_once(client: Client, data: Data) -> None:
    expected = data.news_order()
    forwards = _walk(client, NEWS, "cryptoNews", True, 37)
    assert forwards == expected and len(set(forwards)) == N_ARTICLES
    backwards = _walk(client, NEWS, "cryptoNews", False, 23)
    assert backwards == expected


def test_gql_client_pages_through_events_exactly_once(client: Client, data: Data) -> None:
    expected = data.event_order()
    assert _walk(client, EVENTS, "predictionEvents", True, 10) == expected
    assert _walk(client, EVENTS, "predictionEvents", False, 13) == expected


def test_event_cursor_is_created_at(client: Client, data: Data) -> None:
    result = client.execute(GraphQLRequest(EVENTS, variable_values={"first": 3}))["predictionEvents"]
    first = max(data.events, key=lambda e: e["created_at"])
    created = first["created_at"]
    iso = created.strftime("%Y-%m-%dT%H:%M:%S.") + f"{created.microsecond // 1000:03d}Z"
    assert result["edges"][0]["node"] == {"id": first["id"], "createdAt": iso}
    assert result["edges"][0]["cursor"] == iso
    # An ISO timestamp a millisecond later, with an offset, lands on the same page.
    shifted = (created + timedelta(milliseconds=1, hours=2)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+02:00"
    again = client.execute(GraphQLRequest(EVENTS, variable_values={"first": 3, "after": shifted}))
    assert again["predictionEvents"]["edges"] == result["edges"]


def test_a_long_bad_cursor_is_echoed_cut_with_an_ellipsis() -> None:
    from warehouse.cursors import decode_news_cursor

    with pytest.raises(ValueError) as long:
        decode_news_cursor("x" * 100)
    assert "'" + "x" * 64 + "'…" in str(long.value)
    with pytest.raises(ValueError) as short:
        decode_news_cursor("xyz")
    assert "'xyz' is not a valid news cursor" in str(short.value)
