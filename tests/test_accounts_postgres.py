"""The platform store on Postgres (accounts.postgres) against a real Postgres server: the same behaviour as the
SQLite store, migrations safe under concurrent starts, exact charges under concurrency, clear errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from accounts import APIS, StoreConfigError, build_access, open_store
from accounts.errors import ApiError
from accounts.limits import StoreCounters
from accounts.postgres import LATEST_VERSION, PostgresStore
from accounts.sqlite import SqliteStore
from tests.support.metered import DEFAULT_COST, MeteredProcess, metering_settings
from tests.support.servers import free_port
from warehouse.config import Settings

PROJECT = Path(__file__).resolve().parents[1]


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def pg_settings(home: Path, url: str, plans: dict[str, tuple[int, float]] | None = None,
                redis_url: str | None = None) -> Settings:
    return metering_settings(home, plans, redis_url=redis_url, database_url=url)


def cli_env(home: Path, url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    env.update({"CRYPTOWIRE_HOME": str(home), "PYTHONPATH": str(PROJECT), "CRYPTOWIRE_PDF_PREWARM": "false",
                **extra})
    if url:
        env["CRYPTOWIRE_DATABASE_URL"] = url
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=120)


# --- the store contract, on both implementations ---------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        s = SqliteStore(tmp_path / "platform.sqlite")
    else:
        s = PostgresStore(request.getfixturevalue("postgres_url"))
    yield s
    s.close()


def test_store_contract(store) -> None:  # type: ignore[no-untyped-def]
    from accounts.keys import hash_key

    assert store.schema_version() == LATEST_VERSION
    key_id, key = store.create_key("alice", "pro", ["news", "pdf"])
    rec = store.lookup(hash_key(key))
    assert rec is not None and rec.id == key_id and rec.apis == ("news", "pdf") and rec.usable(time.time())
    assert store.lookup(hash_key(key + "x")) is None
    # charge, limit, refund, history
    day = today()
    assert store.charge(key_id, day, "news", 40, 100) == (True, 40)
    assert store.charge_many([(key_id, day, "news", 30, 100), (key_id, day, "pdf", 30, 100),
                              (key_id, day, "news", 10, 100)]) == [(True, 70), (True, 100), (False, 100)]
    assert store.charge(key_id, day, "news", 1, 100) == (False, 100)
    assert store.refund(key_id, day, "pdf", 30) == 70
    assert store.refund(key_id, day, "events", 5) == 70  # nothing to refund on that API: unchanged
    assert store.used(key_id, day) == 70
    assert store.history(key_id, [day, "2000-01-01"]) == {
        day: {"news": (70, 2), "events": (0, 0), "pdf": (0, 0)}}
    # rotate: a new secret, the old one expires after the grace
    new = store.rotate_key(key_id, 0)
    assert store.lookup(hash_key(new)).usable(time.time())
    assert not store.lookup(hash_key(key)).usable(time.time() + 0.001)
    # set-plan, revoke
    assert store.set_plan(key_id, "basic") == "pro"
    store.revoke_key(key_id)
    store.revoke_key(key_id)  # again: no change
    assert store.lookup(hash_key(new)).revoked
    (row,) = store.keys(key_id)
    assert row["status"] == "revoked" and row["plan"] == "basic" and row["apis"] == ["news", "pdf"]
    from accounts import KeyNotFound

    with pytest.raises(KeyNotFound):
        store.rotate_key(key_id, 0)
    with pytest.raises(KeyNotFound):
        store.revoke_key("key_000000000000")
    with pytest.raises(ValueError):
        store.charge(key_id, day, "nope", 1, 100)


# --- migrations ----------------------------------------------------------------------------------------------
def test_migrations_are_idempotent_and_safe_when_processes_start_at_once(postgres_url: str) -> None:
    code = ("import sys; from accounts.postgres import PostgresStore; "
            "s = PostgresStore(sys.argv[1]); print(s.schema_version()); s.close()")
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, postgres_url], cwd=PROJECT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert [o[0].strip() for o in outs] == [str(LATEST_VERSION)] * 4
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT version FROM accounts.schema_version ORDER BY version").fetchall()
    assert rows == [(v,) for v in range(1, LATEST_VERSION + 1)]  # each migration recorded exactly once
    PostgresStore(postgres_url).close()  # once more: nothing to do


def test_sqlite_migrations_are_safe_when_processes_start_at_once(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "platform.sqlite"
    code = ("import sys; from accounts.sqlite import SqliteStore; "
            "s = SqliteStore(sys.argv[1]); print(s.schema_version()); s.close()")
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], cwd=PROJECT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(1,)]


def test_sqlite_store_records_its_schema_version_and_takes_over_an_old_file(tmp_path: Path) -> None:
    import sqlite3

    from accounts.sqlite import LATEST_VERSION, SCHEMA

    path = tmp_path / "platform.sqlite"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)  # a database made before versioning
    db.execute("INSERT INTO keys VALUES ('key_1', 'old', 'pro', 'news', 0, NULL)")
    db.commit()
    db.close()
    s = SqliteStore(path)
    assert s.schema_version() == LATEST_VERSION and s.keys()[0]["id"] == "key_1"
    s.close()
    s = SqliteStore(path)  # again: unchanged
    assert s.schema_version() == LATEST_VERSION
    s.close()


# --- exact charges under concurrency -------------------------------------------------------------------------
def test_concurrent_charges_from_many_connections_are_exact(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    key_id, _ = stores[0].create_key("c", "pro", APIS)
    other, _ = stores[0].create_key("d", "pro", APIS)
    day, limit = today(), 500 * 7
    results: list[bool] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        s = stores[i % 4]
        for j in range(100):
            # mixed batches of two keys (one transaction, rows in key order) and single charges
            if j % 3 == 0:
                got = s.charge_many([(other, day, "news", 1, 10**9), (key_id, day, "news", 7, limit)])
                ok = got[1][0]
            else:
                ok = s.charge(key_id, day, "events" if j % 2 else "news", 7, limit)[0]
            with lock:
                results.append(ok)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(results) == {True: 500, False: 300}  # 800 attempts, exactly the 500 that fit
    assert stores[1].used(key_id, day) == limit
    h = stores[2].history(key_id, [day])[day]
    assert h["news"][0] + h["events"][0] == limit and h["news"][1] + h["events"][1] == 500
    assert stores[3].used(other, day) == sum(1 for i in range(8) for j in range(100) if j % 3 == 0)
    for s in stores:
        s.close()


def test_metered_access_on_postgres_enforces_the_daily_allowance_across_instances(tmp_path: Path,
                                                                                   postgres_url: str) -> None:
    async def run() -> None:
        settings = pg_settings(tmp_path / "home", postgres_url, {"tight": (100 * DEFAULT_COST, 100_000)})
        a, b = build_access(settings), build_access(settings)
        assert isinstance(a.store, PostgresStore) and isinstance(a._counters, StoreCounters)
        key_id, key = a.store.create_key("q", "tight", ["news", "pdf"])

        async def one(i: int) -> str:
            acc = a if i % 2 == 0 else b
            caller = await acc.check(key, "news")
            try:
                await acc.reserve(caller, DEFAULT_COST)
                return "ok"
            except ApiError as exc:
                return exc.code

        results = Counter(await asyncio.gather(*(one(i) for i in range(160))))
        assert results == {"ok": 100, "QUOTA_EXCEEDED": 60}
        charge = await b.reserve(await b.check(key, "pdf"), 0)
        assert charge.cost == 0
        rep = await a.report(key_id, days=1)
        assert rep["today"]["cuUsedToday"] == 100 * DEFAULT_COST
        assert rep["days"][-1]["apis"]["news"] == {"cu": 100 * DEFAULT_COST, "requests": 100}
        await a.close()
        await b.close()

    asyncio.run(run())


def test_postgres_down_refuses_with_503(tmp_path: Path, postgres_url: str) -> None:
    from tests.support import servers

    async def run(stop: object) -> None:
        access = build_access(pg_settings(tmp_path / "home", postgres_url, {"p": (1000, 100)}))
        _, key = access.store.create_key("d", "p", ["news"])
        caller = await access.check(key, "news")
        stop()  # type: ignore[operator]
        with pytest.raises(ApiError) as err:
            await access.reserve(caller, 10)
        assert err.value.status == 503 and err.value.code == "METERING_UNAVAILABLE"
        access._cache = {}
        with pytest.raises(ApiError) as err:
            await access.check(key, "news")
        assert err.value.status == 503
        await access.close()

    data = (tmp_path / "postgres").resolve() / "pgdata"  # as root, a directory of its own (tests.support.servers)

    def stop() -> None:
        subprocess.run([str(servers.PG_BINDIR / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, **servers._as_postgres())  # type: ignore[arg-type]

    asyncio.run(run(stop))


def test_a_revocation_reaches_running_instances_at_once_and_within_the_cache_time_without_notifications(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accounts.access import KEY_CACHE_SECONDS

    async def refused_after(access, key: str, t0: float) -> float:  # type: ignore[no-untyped-def]
        while time.monotonic() - t0 < 3:
            try:
                await access.check(key, "news")
            except ApiError as exc:
                assert exc.code == "UNAUTHENTICATED"
                return time.monotonic() - t0
            await asyncio.sleep(0.01)
        raise AssertionError("the revoked key still works after 3 s")

    async def run() -> None:
        settings = pg_settings(tmp_path / "home", postgres_url, {"p": (10**9, 10**6)})
        notified = build_access(settings)
        monkeypatch.setattr(PostgresStore, "watch_keys", lambda self, cb: None)  # e.g. LISTEN not possible
        deaf = build_access(settings)
        key_id, key = notified.store.create_key("r", "p", ["news"])
        await asyncio.sleep(0.3)  # the listener is connected
        for acc in (notified, deaf):
            await acc.check(key, "news")  # cached
        other = PostgresStore(postgres_url)  # another process's store, as `cryptowire keys revoke` opens it
        t0 = time.monotonic()
        other.revoke_key(key_id)
        other.close()
        fast, slow = await asyncio.gather(refused_after(notified, key, t0), refused_after(deaf, key, t0))
        print(f"\nrefused after {fast:.3f} s (notified), {slow:.3f} s (cache expiry only)")
        assert fast < 0.3
        assert slow <= KEY_CACHE_SECONDS + 0.3
        await notified.close()
        await deaf.close()

    asyncio.run(run())


@pytest.mark.slow
def test_kill_9_of_an_api_process_on_postgres_loses_only_in_flight_and_never_double_charges(
    tmp_path: Path, postgres_url: str
) -> None:
    from tests.test_metering_crash import WORKERS, _hammer

    settings = pg_settings(tmp_path / "home", postgres_url, {"bulk": (10**12, 100_000)})
    store = PostgresStore(postgres_url)
    key_id, key = store.create_key("crash", "bulk", ["news"])
    srv = MeteredProcess(settings).start()
    try:
        ok, lost = asyncio.run(_hammer(srv, key, kill_after=300))
    finally:
        srv.stop()
    assert srv.proc is not None and srv.proc.returncode == -9
    used = store.used(key_id, today())
    assert used % DEFAULT_COST == 0
    charged = used // DEFAULT_COST
    print(f"kill -9 on Postgres: answered {ok}, lost in flight {lost}, charged {charged}")
    assert ok <= charged <= ok + WORKERS, (ok, lost, charged)
    assert store.history(key_id, [today()])[today()]["news"] == (used, charged)
    with MeteredProcess(settings) as again:  # a new process carries on from the same counts
        assert httpx.get(again.url(f"/api/usage/{key}")).json()["today"]["cuUsedToday"] == used
    store.close()


# --- configuration and errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("url,says,advice", [
    ("mysql://u@h/db", "must be a postgresql:// URL", "for a single machine only, unset it"),
    # unreachable: check the server and credentials; unsetting it would split a multi-machine key store
    ("postgresql://nobody@127.0.0.1:{port}/x", "cannot use the Postgres database at 127.0.0.1:{port}/x",
     "check that Postgres is running there"),
])
def test_a_bad_or_unreachable_database_url_is_one_clear_line(tmp_path: Path, url: str, says: str,
                                                             advice: str) -> None:
    port = free_port()
    url, says = url.format(port=port), says.format(port=port)
    with pytest.raises(StoreConfigError) as err:
        open_store(Settings(home=tmp_path, database_url=url))
    assert says in str(err.value) and "CRYPTOWIRE_DATABASE_URL" in str(err.value)
    env = cli_env(tmp_path / "home", url.replace("nobody@", "nobody:s3cret@"))
    for command in (["keys", "list"], ["usage", "--json"], ["serve", "--port", str(free_port())]):
        bad = cli(env, *command)
        assert bad.returncode == 1, (command, bad.stdout, bad.stderr)
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (command, bad.stderr)
        assert "CRYPTOWIRE_DATABASE_URL" in lines[0] and advice in lines[0]  # names it, says what to do
        assert ("SQLite" in lines[0]) == url.startswith("mysql")
        assert "s3cret" not in bad.stderr + bad.stdout


def test_without_database_url_nothing_touches_postgres(tmp_path: Path) -> None:
    code = ("import sys, asyncio; from accounts import build_access, SqliteStore; from warehouse.config import "
            "get_settings; a = build_access(get_settings()); assert isinstance(a.store, SqliteStore); "
            "asyncio.run(a.close()); print(sorted(m for m in ('psycopg',) if m in sys.modules))")
    env = cli_env(tmp_path / "home", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
    assert (tmp_path / "home" / "platform.sqlite").exists()


def test_the_cli_manages_keys_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    env = cli_env(tmp_path / "home", postgres_url)
    made = cli(env, "keys", "create", "--plan", "pro", "--name", "pg", "--apis", "news,events", "--json")
    assert made.returncode == 0, made.stderr
    key_id = json.loads(made.stdout)["id"]
    listed = json.loads(cli(env, "keys", "list", "--json").stdout)
    assert [k["id"] for k in listed] == [key_id]
    assert json.loads(cli(env, "keys", "set-plan", key_id, "basic", "--json").stdout)["previousPlan"] == "pro"
    assert cli(env, "keys", "rotate", key_id, "--json").returncode == 0
    usage = json.loads(cli(env, "usage", key_id, "--days", "2", "--json").stdout)
    assert usage["plan"] == "basic" and usage["today"]["cuUsedToday"] == 0 and len(usage["days"]) == 2
    assert json.loads(cli(env, "keys", "revoke", key_id, "--json").stdout)["alreadyRevoked"] is False
    assert not (tmp_path / "home" / "platform.sqlite").exists()  # nothing went to SQLite


def test_sqlite_store_waits_for_a_writer_while_it_switches_to_wal(tmp_path: Path) -> None:
    """SQLite fails "PRAGMA journal_mode=WAL" at once, without its busy handler, while another connection holds
    a write lock (seen when processes created the file together): the store retries until the lock goes."""
    import sqlite3

    path = tmp_path / "platform.sqlite"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE other (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO other VALUES (1)")
    threading.Timer(0.5, lambda: writer.execute("COMMIT")).start()
    started = time.monotonic()
    store = SqliteStore(path)
    try:
        assert time.monotonic() - started >= 0.4  # it waited for the writer, it did not fail
        assert store.schema_version() >= 1
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        store.close()
        writer.close()
