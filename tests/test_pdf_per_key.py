"""One key cannot take every renderer and place in line (a security review, 2026-11-27): a failed render is refunded,
so a free key asking for pages that never load held all of them, at no cost, and paying keys got 503 BUSY. Each key
may have ``CRYPTOWIRE_PDF_PER_KEY`` requests in progress (default 2); one more is refused at once, before it is
charged. A real `cryptowire serve`, real Chromium, keys in the data home's store, pages from a local server."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from tests.support.httpserver import LocalServer, Reply, static
from tests.support.pdfserver import Render, ServeProcess, new_key, used
from tests.support.procs import wait_for

COST = 20_000


def _get(server: ServeProcess, key: str, url: str) -> httpx.Response:
    return httpx.get(server.url(f"/api/html-to-pdf/{key}"), params={"url": url, "timeoutMs": 60000}, timeout=90)


def test_a_key_with_two_requests_in_progress_is_refused_a_third_and_other_keys_are_served(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    greedy_id, greedy = new_key(home, "greedy")
    _, other = new_key(home, "other")
    hold = threading.Event()
    with LocalServer() as page:
        # the page itself answers only when released: its requests hold places in line while they fetch it
        page.routes["/held"] = lambda req: (hold.wait(60), Reply(200, b"<h1>held</h1>", {"Content-Type": "text/html"}))[1]
        page.routes["/hello"] = static("<h1>hello</h1>")
        server = ServeProcess(home, page.port, CRYPTOWIRE_PDF_QUEUE="4")
        try:
            # refused requests give their count back: two in a row leave the key free
            for _ in range(2):
                refused = _get(server, greedy, "http://10.0.0.1/")
                assert refused.status_code == 403, refused.text
            slow = [Render(server, greedy, page.url("/held")) for _ in range(2)]
            assert wait_for(lambda: page.hits("/held") == 2, 30), server.output()
            third = _get(server, greedy, page.url("/hello"))
            assert third.status_code == 429, third.text
            error = third.json()["error"]
            assert error["code"] == "TOO_MANY_PDF_REQUESTS", error
            assert "2 PDF requests in progress" in error["message"] and "CRYPTOWIRE_PDF_PER_KEY" in error["message"]
            assert int(third.headers["retry-after"]) >= 1
            assert used(home, greedy_id) == 2 * COST  # the two in progress; the refused one is not charged
            served = _get(server, other, page.url("/hello"))  # another key renders meanwhile
            assert served.status_code == 200 and served.content.startswith(b"%PDF"), served.text[:300]
            hold.set()
            for render in slow:
                render.thread.join(90)
                assert isinstance(render.answer, httpx.Response) and render.answer.status_code == 200, render.answer
            again = _get(server, greedy, page.url("/hello"))  # both finished: the key may render again
            assert again.status_code == 200, again.text
        finally:
            hold.set()
            server.stop()
