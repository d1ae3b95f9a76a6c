"""Another process holding the platform database's write lock (a sqlite3 shell in ``BEGIN IMMEDIATE``, a long
``cryptowire keys`` call) makes the charges wait, not the server: routes that do not charge answer at once, the
waiting charges go through when the lock is released, and every one is counted once."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import httpx

from accounts import SqliteStore
from tests.support.metered import DEFAULT_COST, MeteredProcess, metering_settings


def test_a_held_write_lock_stalls_the_charges_not_the_server(tmp_path: Path) -> None:
    settings = metering_settings(tmp_path / "home", {"bulk": (10**12, 100_000)})
    store = SqliteStore(settings.platform_db)
    key_id, key = store.create_key("lock", "bulk", ["news"])
    store.close()
    with MeteredProcess(settings) as srv, httpx.Client(timeout=30) as client:
        assert client.get(srv.url(f"/metered/{key}")).status_code == 200  # the key is looked up and cached
        blocker = sqlite3.connect(settings.platform_db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        results: list[int] = []
        waiting = [threading.Thread(target=lambda: results.append(
            httpx.get(srv.url(f"/metered/{key}"), timeout=30).status_code)) for _ in range(3)]
        for t in waiting:
            t.start()
        time.sleep(0.5)  # the three charges are waiting for the lock
        started = time.monotonic()
        assert client.get(srv.url(f"/unmetered/{key}")).status_code == 200
        took = time.monotonic() - started
        blocker.execute("COMMIT")
        blocker.close()
        for t in waiting:
            t.join(30)
        assert took < 1.0, f"a route that charges nothing waited {took:.1f} s for another process's lock"
        assert results == [200, 200, 200]
    with sqlite3.connect(settings.platform_db) as db:
        assert db.execute("SELECT used FROM usage_daily WHERE key_id = ?", (key_id,)).fetchone()[0] == 4 * DEFAULT_COST
