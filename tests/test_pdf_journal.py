"""A PDF render's charge when its server is killed outright (kill -9, the OOM killer): the next server on the same
data home refunds it, exactly once, to the day it was charged to; a PDF delivered before the kill stays charged; a
live server's charges are never touched. Real `cryptowire serve` processes, real Chromium, real kill -9, a real
page server on 127.0.0.1 whose image never arrives (the render stays in flight until the test lets it go)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.httpserver import LocalServer, static
from tests.support.pdfserver import Render, ServeProcess, new_key, serve_env, slow_page, used
from tests.support.procs import wait_for
from warehouse.config import Settings

PROJECT = Path(__file__).resolve().parent.parent
COST = 20_000


def _today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def _yesterday() -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).date().isoformat()


def _used(home: Path, key_id: str, day: str | None = None) -> int:
    return used(home, key_id, day or _today())


def _journals(home: Path) -> dict[str, list[dict[str, Any]]]:
    """Each journal file's name and its records."""
    root = Settings(home=home).pdf_charges_dir
    if not root.is_dir():
        return {}
    return {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in root.glob("*.jsonl")}


def _open_charges(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    open_: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["op"] == "charged":
            open_[r["id"]] = r
        else:
            open_.pop(r["id"], None)
    return list(open_.values())


def _of(pid: int, journals: dict[str, list[dict[str, Any]]]) -> list[str]:
    return [name for name in journals if name.startswith(f"{pid}-")]


def _refund_lines(out: str, key_id: str, day: str) -> int:
    return out.count(f"refunded {COST} CU to key {key_id} (day {day}, api pdf)")


# --- 1. killed during a render: refunded once by the next start; a delivered PDF stays charged -------------------


def test_a_render_in_flight_at_a_kill_9_is_refunded_once_by_the_next_start_a_delivered_pdf_is_not(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key_id, key = new_key(home, "journal")
    with LocalServer() as page:
        page.routes["/fast"] = static("<h1>FAST</h1>")
        hold = slow_page(page, "slow")
        killed = ServeProcess(home, page.port)
        try:
            r = httpx.get(killed.url(f"/api/html-to-pdf/{key}"), params={"url": page.url("/fast")}, timeout=60)
            assert r.status_code == 200 and r.content.startswith(b"%PDF-"), r.text  # delivered: stays charged
            r = httpx.get(killed.url(f"/api/html-to-pdf/{key}"), params={"url": page.url("/gone")}, timeout=60)
            assert r.status_code == 502 and r.headers["x-cu-cost"] == "0", r.text  # failed: refunded at once
            slow = Render(killed, key, page.url("/slow"))
            assert wait_for(lambda: page.hits("/slow.png") > 0, 60), killed.output()  # charged, rendering
            assert _used(home, key_id) == 2 * COST
            killed.find_browser()
            killed.kill9()
        finally:
            hold.set()
            with contextlib.suppress(Exception):
                killed.kill9()
        slow.thread.join(30)
        assert isinstance(slow.answer, httpx.HTTPError), slow.answer  # the client got no PDF
        assert _used(home, key_id) == 2 * COST  # the kill kept the charge

        second = ServeProcess(home, page.port, prewarm=False)
        try:
            assert wait_for(lambda: _used(home, key_id) == COST, 30), (_used(home, key_id), second.output())
            assert wait_for(lambda: not _of(killed.proc.pid, _journals(home)), 10), _journals(home)
            time.sleep(0.5)
            assert _used(home, key_id) == COST  # the failed one not refunded a second time
            day = httpx.get(second.url(f"/api/usage/{key}"), params={"days": 1}, timeout=10).json()["days"][-1]
        finally:
            second.kill9()  # its own journal (no charges) is left for the next start
        out = second.output()
        assert day["date"] == _today() and day["apis"]["pdf"] == {"cu": COST, "requests": 1}, day
        assert _refund_lines(out, key_id, _today()) == 1, out
        assert _of(second.proc.pid, _journals(home)), "the second server kept no journal"

        third = ServeProcess(home, page.port, prewarm=False)  # sweeps the second's journal: nothing to refund in it
        try:
            assert wait_for(lambda: not _of(second.proc.pid, _journals(home)), 30), _journals(home)
            time.sleep(0.5)
            assert _used(home, key_id) == COST, third.output()  # not refunded twice, the delivered PDF not at all
            assert _refund_lines(third.output(), key_id, _today()) == 0, third.output()
        finally:
            third.kill9()


# --- 2. a live server's journal is never swept -------------------------------------------------------------------


def test_a_starting_server_refunds_a_killed_servers_charge_and_never_a_live_ones(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key_id, key = new_key(home, "journal")
    with LocalServer() as page:
        hold_live = slow_page(page, "live")
        hold_killed = slow_page(page, "killed")
        live = ServeProcess(home, page.port)
        servers = [live]
        try:
            live_render = Render(live, key, page.url("/live"))
            assert wait_for(lambda: page.hits("/live.png") > 0, 60), live.output()
            killed = ServeProcess(home, page.port)
            servers.append(killed)
            Render(killed, key, page.url("/killed"))
            assert wait_for(lambda: page.hits("/killed.png") > 0, 60), killed.output()
            assert _used(home, key_id) == 2 * COST
            killed.find_browser()
            killed.kill9()
            hold_killed.set()

            starting = ServeProcess(home, page.port, prewarm=False)
            servers.append(starting)
            # The killed server's charge is refunded, the live one's not.
            assert wait_for(lambda: _used(home, key_id) == COST, 30), (_used(home, key_id), starting.output())
            assert wait_for(lambda: not _of(killed.proc.pid, _journals(home)), 10), _journals(home)
            time.sleep(0.5)
            assert _used(home, key_id) == COST, starting.output()
            journals = _journals(home)
            (live_journal,) = _of(live.proc.pid, journals)
            assert live_journal in journals and len(_open_charges(journals[live_journal])) == 1, journals
            assert _refund_lines(starting.output(), key_id, _today()) == 1, starting.output()

            hold_live.set()  # the live server's render completes: its PDF is delivered and stays charged
            live_render.thread.join(60)
            answer = live_render.answer
            assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
            assert answer.content.startswith(b"%PDF-")
            assert wait_for(lambda: _open_charges(_journals(home)[live_journal]) == [], 10), _journals(home)
            assert _used(home, key_id) == COST
        finally:
            hold_live.set()
            hold_killed.set()
            for server in servers:
                with contextlib.suppress(Exception):
                    server.kill9()


# --- 3. metering unreachable at the start: kept for the next; the charge's own day; several workers at once -------

CHILD = """
import asyncio, sys, time, types
from pathlib import Path
from accounts import build_access
import accounts.access as metered
from api.pdf.journal import ChargeJournal
from warehouse.config import Settings


async def main() -> None:
    settings = Settings(home=Path(sys.argv[1]))
    access = build_access(settings)
    journal = ChargeJournal(settings.pdf_charges_dir)
    caller = await access.check(sys.argv[2], "pdf")
    delivered = await access.reserve(caller, 20000)
    journal.settled(journal.charged(delivered), "delivered")
    journal.charged(await access.reserve(caller, 20000))  # in flight at the kill
    real = time.time
    metered.time = types.SimpleNamespace(time=lambda: real() - 86400, monotonic=time.monotonic)  # yesterday's
    journal.charged(await access.reserve(caller, 20000))
    print("charged", flush=True)
    time.sleep(600)


asyncio.run(main())
"""


def test_metering_unreachable_at_the_start_keeps_the_journal_then_one_of_two_workers_refunds_each_charge_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    import accounts.sqlite
    from accounts import build_access
    from api.pdf.journal import recover

    home = tmp_path / "home"
    home.mkdir()
    key_id, key = new_key(home, "journal")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(home), key], cwd=PROJECT, env=serve_env(home),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "charged"
    finally:
        child.kill()  # SIGKILL
        child.wait(10)
    assert (_used(home, key_id), _used(home, key_id, _yesterday())) == (2 * COST, COST)
    (left,) = _of(child.pid, _journals(home))

    # Metering unreachable: another process holds platform.sqlite's write lock past the store's busy timeout.
    monkeypatch.setattr(accounts.sqlite, "BUSY_TIMEOUT", 0.3)
    settings = Settings(home=home)
    access = build_access(settings)
    blocker = sqlite3.connect(settings.platform_db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level("WARNING", logger="cryptowire.pdf"):
            asyncio.run(recover(access.give_back, settings.pdf_charges_dir))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        asyncio.run(access.close())
    assert f"{left} of a killed server is kept for the next start" in caplog.text, caplog.text
    assert len(_open_charges(_journals(home)[left])) == 2  # still both open
    assert (_used(home, key_id), _used(home, key_id, _yesterday())) == (2 * COST, COST)

    # The next start, two workers at once on this data home: each charge refunded once, to its own day.
    with LocalServer() as page:
        server = ServeProcess(home, page.port, "--workers", "2", prewarm=False)
        try:
            assert wait_for(lambda: left not in _journals(home), 30), server.output()
            time.sleep(1)
            out = server.output()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(10)
    assert (_used(home, key_id), _used(home, key_id, _yesterday())) == (COST, 0), out
    assert _refund_lines(out, key_id, _today()) == 1 and _refund_lines(out, key_id, _yesterday()) == 1, out


# --- 4. a long-lived server's journal stays small ---------------------------------------------------------------


def test_a_full_journal_hands_over_to_a_new_one_and_goes_once_its_charges_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from api.access import Caller, Charge
    from api.pdf import journal as journal_mod

    monkeypatch.setattr(journal_mod, "ROTATE_BYTES", 400)
    root = tmp_path / "run" / "pdf-charges"
    journal = journal_mod.ChargeJournal(root)
    caller = Caller(key_id="key_x", plan="pro", api="pdf")
    entries = [journal.charged(Charge(caller=caller, cost=COST, info={"day": _today()})) for _ in range(12)]
    assert all(entries)
    kept = entries[0]  # still rendering: its journal must stay
    for entry in entries[1:]:
        assert journal.settled(entry, "delivered")
    files = sorted(p.name for p in root.glob("*.jsonl"))
    assert kept is not None and kept.file.path.name in files and journal.path.name in files and len(files) == 2, files
    assert _open_charges(_journals_in(root)[kept.file.path.name]) != []
    assert journal.settled(kept, "refunded")
    assert sorted(p.name for p in root.glob("*.jsonl")) == [journal.path.name]  # the full one went with it
    journal.close()
    assert list(root.glob("*.jsonl")) == []


def _journals_in(root: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in root.glob("*.jsonl")}


# --- 5. a failed render's refund while metering is unavailable, then a stop or a kill: the next start makes it ------


def _reopened(home: Path) -> list[dict[str, Any]]:
    return [r for rs in _journals(home).values() for r in _open_charges(rs) if r.get("reopened") == "retry"]


@pytest.mark.parametrize("end", ["stop", "stop during a retry", "kill -9"])
def test_a_refund_deferred_while_metering_is_locked_is_made_once_by_the_next_start(tmp_path: Path, end: str) -> None:
    """The page fails after the charge (502, refunded), at a moment another process holds metering's write lock:
    the refund waits at most a second, then the charge is open in the journal again while it is retried. A stop
    (metering's own retry was dropped at it, the 20,000 CU kept) or a kill -9 (the first attempt waited SQLite's
    10 s with the charge in no journal) between the retries leaves it there, and so does a stop during a retry, which
    lets the retry end; the next start refunds it, once."""
    from tests.support.httpserver import Reply

    home = tmp_path / "home"
    home.mkdir()
    key_id, key = new_key(home, "deferred")
    with LocalServer() as page:
        hold = threading.Event()
        page.routes["/late"] = lambda req: (hold.wait(60), Reply(404))[1]
        server = ServeProcess(home, page.port)
        blocker = sqlite3.connect(Settings(home=home).platform_db, isolation_level=None)
        try:
            failed = Render(server, key, page.url("/late"))
            assert wait_for(lambda: page.hits("/late") > 0, 60), server.output()  # charged, fetching
            assert _used(home, key_id) == COST
            blocker.execute("BEGIN IMMEDIATE")  # metering's write lock held while the refund is asked
            hold.set()
            # refused within its second's wait (SQLite's own is 10 s), then open again; retried every 0.5 s or more
            assert wait_for(lambda: _reopened(home), 6), server.output()
            if end == "stop during a retry":  # the first retry asks metering 0.5 s after, for at most a second
                time.sleep(0.8)
            if end == "kill -9":
                server.kill9()
            else:  # a graceful stop (SIGTERM), with metering still locked
                server.proc.send_signal(signal.SIGTERM)
                server.proc.wait(30)
            failed.thread.join(60)
            if end != "kill -9":
                assert isinstance(failed.answer, httpx.Response) and failed.answer.status_code == 502, failed.answer
            assert _used(home, key_id) == COST
        finally:
            hold.set()
            blocker.execute("ROLLBACK") if blocker.in_transaction else None
            blocker.close()
            with contextlib.suppress(Exception):
                server.kill9()
        out = server.output()
        assert "not made at shutdown" not in out, out
        (left,) = _reopened(home)
        assert (left["key"], left["cu"], left["day"]) == (key_id, COST, _today()), left

        following = ServeProcess(home, page.port, prewarm=False)
        try:
            assert wait_for(lambda: _used(home, key_id) == 0, 30), following.output()
            assert wait_for(lambda: not [r for rs in _journals(home).values() for r in _open_charges(rs)], 10)
            time.sleep(0.5)
        finally:
            following.stop()
        assert _refund_lines(following.output(), key_id, _today()) == 1, following.output()
        assert _used(home, key_id) == 0
