"""Review: the overview page (``GET /``) must not show withdrawn prediction events as OPEN (or CLOSED).

A real warehouse and snapshot, a real API server, the page rendered by real headless Chromium; the page's
statuses are checked against what the GraphQL API serves for the same events.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_events
from warehouse.config import Settings

REASON = "$300 is not a plausible SOL level below: the question was refused by a price check"
QUERY = """{ predictionEvents(first: 50) { edges { node { eventTitle status withdrawnReason } } } }"""


def make_review_events() -> list[dict[str, Any]]:
    """14 events, newest first: a SOL pair of which "below" is withdrawn, a withdrawn event whose date has passed,
    two more withdrawn ones, and past (CLOSED) and future (OPEN) events that are not withdrawn."""
    events = make_events(14)
    now = datetime.now(UTC).replace(tzinfo=None)
    events[0].update(event_title="Will Solana close below $300 on December 31, 2099?", date=datetime(2099, 12, 31),
                     asset="SOL", tags=["SOL"], comparator="below", threshold=300.0)
    events[1].update(event_title="Will Solana close above $300 on December 31, 2099?", date=datetime(2099, 12, 31),
                     asset="SOL", tags=["SOL"], comparator="above", threshold=300.0)
    events[2]["date"] = now - timedelta(days=3)  # withdrawn, and its date has passed: neither CLOSED nor listed
    events[3]["date"] = now - timedelta(days=1)  # not withdrawn, date passed: CLOSED
    withdrawn = {0: REASON, 2: "No longer derived from its article.", 5: "No longer derived from its article.",
                 8: "No longer derived from its article."}
    for i, reason in withdrawn.items():
        events[i].update(withdrawn_reason=reason, withdrawn_at=now - timedelta(hours=1), status="withdrawn")
    return events


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return make_review_events()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, events: list[dict[str, Any]]) -> Iterator[ApiServer]:
    home = tmp_path_factory.mktemp("overview-review") / "home"
    build(home, Data([], events))
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys(["k"]))) as srv:
        yield srv


def test_withdrawn_events_are_not_shown_as_open_or_closed(server: ApiServer, browser: Any,
                                                          events: list[dict[str, Any]]) -> None:
    r = httpx.post(server.url("/crypto-news/k"), json={"query": QUERY}, timeout=30)
    assert r.status_code == 200, r.text
    api_status = {n["node"]["eventTitle"]: n["node"]["status"] for n in r.json()["data"]["predictionEvents"]["edges"]}
    withdrawn = [e["event_title"] for e in events if e.get("withdrawn_reason")]
    assert {api_status[t] for t in withdrawn} == {"WITHDRAWN"}  # the API still lists them

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        response = page.goto(server.url("/"), wait_until="load")
        assert response is not None and response.status == 200
        rows = page.eval_on_selector_all(
            "table.events tbody tr", "rows => rows.map(r => [...r.querySelectorAll('td')].map(c => c.textContent))"
        )
        titles = [r[0] for r in rows]
        # The 10 latest events that are not withdrawn, newest first; no withdrawn one anywhere on the page.
        live = [e for e in events if not e.get("withdrawn_reason")]
        assert titles == [e["event_title"] for e in live[:10]]
        body = page.inner_text("body")
        for title in withdrawn:
            assert title not in body
        assert "Will Solana close above $300 on December 31, 2099?" in titles
        # Each badge is the status the API serves for the same event: OPEN and CLOSED both occur.
        assert [r[2] for r in rows] == [api_status[t] for t in titles]
        assert {r[2] for r in rows} == {"OPEN", "CLOSED"}
        # The page says how many it left out and where to find them.
        cards = dict(page.eval_on_selector_all(
            ".card", "els => els.map(e => [e.querySelector('.k').textContent, e.querySelector('.s').textContent])"))
        assert cards["prediction events"] == "4 withdrawn"
        assert "4 withdrawn events are left out" in body and "WITHDRAWN" in body
    finally:
        page.close()


def test_only_withdrawn_events_says_so(tmp_path: Path) -> None:
    events = make_events(2)
    for e in events:
        e.update(withdrawn_reason="No longer derived from its article.", withdrawn_at=datetime(2024, 12, 3),
                 status="withdrawn")
    home = tmp_path / "home"
    build(home, Data([], events))
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys(["k"]))) as srv:
        r = httpx.get(srv.url("/"), timeout=30)
    assert r.status_code == 200
    assert "badge open" not in r.text and "badge closed" not in r.text
    assert "No prediction events in this snapshot that are not withdrawn" in r.text
    assert "2 withdrawn events are left out" in r.text
