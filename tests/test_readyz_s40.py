"""/readyz on the real app (uvicorn on 127.0.0.1):

- a part of the served set cut short or overwritten in place makes it 503, naming the part and what to do (one
  deleted is still read through the open file: 200 with a warning);
  a query that reads the damaged part gets the same reason (503 NOT_READY), not an anonymous internal error; the
  advice works: a publish as the serving_snapshot asset makes it (repair, then a new set) brings it back to 200;
- one readyz call PINGs the shared Redis once (the rate limits and the counters share it; counted by Redis's
  ``INFO commandstats``), and a Redis that is down is still reported.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import redis

from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_articles, make_events, write
from tests.support.servers import REDIS_MISSING, free_port, redis_server
from warehouse.config import Settings
from warehouse.db import connect
from warehouse.parts import publish_set, read_manifest
from warehouse.repair import repair_snapshots
from warehouse.sentiment import refresh_asset_sentiment

NOW = datetime(2025, 3, 10, 14, 30)
KEY = "readyz-key"
EVENTS = "query { predictionEvents(first: 100) { edges { node { id eventTitle eventDescription } } } }"
NEWS = "query { cryptoNews(first: 5) { edges { node { id title } } } }"


def _publish(home: Path) -> Path:
    """A set as the serving_snapshot asset publishes it: repair what is damaged, then publish."""
    repair_snapshots(home / "snapshots")
    con = connect(home / "warehouse.duckdb")
    try:
        refresh_asset_sentiment(con)
        return publish_set(con, home / "snapshots", now=NOW)
    finally:
        con.close()


def _home(tmp_path: Path) -> Path:
    """A warehouse whose events all fall in October 2024, a month without articles: that part holds events only,
    and nothing of it is read when the API opens the set (so a query reads it from disk)."""
    home = tmp_path / "home"
    home.mkdir()
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, Data(make_articles(60, 0, start=NOW - timedelta(minutes=20)),
                        make_events(60, start=datetime(2024, 10, 30))))
        con.execute("COMMIT")
    finally:
        con.close()
    return home


def _wait(url: str, status: int, seconds: float = 20) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        r = httpx.get(url, timeout=10)
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


@pytest.mark.parametrize("harm", ["truncate", "delete", "overwrite"])
def test_readyz_names_a_damaged_part_and_what_to_do(tmp_path: Path, harm: str) -> None:
    home = _home(tmp_path)
    manifest = _publish(home)
    part = next(e["name"] for e in read_manifest(manifest)["parts"] if e["period"] == "m202410")
    path = home / "snapshots" / part
    settings = Settings(home=home, snapshot_poll_seconds=0.05, pdf_prewarm=False, page_cache_size=0)
    with ApiServer(create_app(settings, access=StaticKeys([KEY]))) as srv:
        assert _wait(srv.url("/readyz"), 200).json()["snapshot"] == manifest.name
        if harm == "truncate":  # disk trouble: only the file's headers are left
            with open(path, "r+b") as f:
                f.truncate(12288)
        elif harm == "delete":
            path.unlink()
        else:  # the same size, other bytes: the events' blocks zeroed
            with open(path, "r+b") as f:
                f.seek(12288)
                f.write(bytes(path.stat().st_size - 12288))
        r = httpx.get(srv.url("/readyz"))
        if harm == "delete":  # still read through the open file: ready, with the warning
            assert r.status_code == 200 and r.json()["status"] == "ready", r.text
            reason = r.json()["warning"]
            assert "a restart could not" in reason, reason
        else:
            assert r.status_code == 503, r.text
            reason = r.json()["reason"]
        said = {"truncate": "bytes on disk", "delete": "was deleted", "overwrite": "overwritten in place"}[harm]
        assert f"part file {part} of the served set {manifest.name}" in reason and said in reason, reason
        assert "publish again: `cryptowire materialize`" in reason and "serving_snapshot" in reason, reason

        q = httpx.post(srv.url(f"/prediction-events/{KEY}"), json={"query": EVENTS}, timeout=30)
        if harm == "delete":  # the open file is still read: the events are served meanwhile
            assert q.status_code == 200 and len(q.json()["data"]["predictionEvents"]["edges"]) == 60, q.text
        else:  # DuckDB fails to read the part: the caller is told why, not "internal error ... logged"
            assert q.status_code == 503 and q.headers["Retry-After"] == "5", q.text
            assert q.json()["errors"][0]["extensions"]["code"] == "NOT_READY"
            assert q.json()["errors"][0]["message"] == reason
        news = httpx.post(srv.url(f"/crypto-news/{KEY}"), json={"query": NEWS}, timeout=30)
        assert news.status_code == 200 and len(news.json()["data"]["cryptoNews"]["edges"]) == 5, news.text

        again = _publish(home)  # what the reason says to do
        deadline = time.monotonic() + 10
        while (r := httpx.get(srv.url("/readyz"))).json().get("snapshot") != again.name and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.status_code == 200 and r.json()["snapshot"] == again.name and "warning" not in r.json(), r.text
        q = httpx.post(srv.url(f"/prediction-events/{KEY}"), json={"query": EVENTS}, timeout=30)
        assert q.status_code == 200 and len(q.json()["data"]["predictionEvents"]["edges"]) == 60, q.text


@pytest.mark.skipif(REDIS_MISSING is not None, reason=str(REDIS_MISSING))
def test_one_readyz_call_pings_redis_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    build(home, Data(make_articles(5, 2), make_events(2)))
    port = free_port()
    # SQLite keys, Redis for both the rate limits and the counters: one client, one server
    settings = Settings(home=home, redis_url=f"redis://127.0.0.1:{port}/0", pdf_prewarm=False)
    with ApiServer(create_app(settings)) as srv:
        ready = srv.url("/readyz")
        with redis_server(tmp_path / "redis", port):
            rc = redis.Redis(port=port)

            def pings() -> int:
                return int(rc.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))

            assert _wait(ready, 200).status_code == 200
            counted = []
            for _ in range(3):
                # past the probe's 1 s cache and the pool's 1 s idle check, as a load balancer's polls come
                time.sleep(1.2)
                before = pings()
                assert httpx.get(ready).status_code == 200
                counted.append(pings() - before)
            rc.close()
            assert counted == [1, 1, 1], counted
        r = _wait(ready, 503)  # Redis is down: reported as before
        assert r.status_code == 503 and r.json() == {"status": "not ready", "reason": "Redis is unavailable"}, r.text
