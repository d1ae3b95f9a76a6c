"""Keys (generation, storage as a hash, revocation, rotation), plans, and the `keys` / `usage` CLI."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accounts import PlansError, build_access, load_plans
from accounts.keys import KEY_PREFIX, hash_key, new_key
from api.errors import ApiError
from pipeline.cli import app
from tests.support.metered import metering_settings, write_plans
from warehouse.config import Settings, get_settings

KEY_RE = re.compile(r"^cw_live_[A-Za-z0-9_-]{32}$")


def test_keys_are_random_urlsafe_and_prefixed() -> None:
    keys = {new_key() for _ in range(2000)}
    assert len(keys) == 2000
    for k in keys:
        assert KEY_RE.match(k), k
    # 32 URL-safe base64 characters carry 192 bits; check the characters are spread (not a constant pad)
    tails = "".join(k[len(KEY_PREFIX):] for k in keys)
    assert len(set(tails)) == 64


def test_bundled_plans_are_the_published_plans() -> None:
    plans = load_plans()
    got = {n: (str(p.price_usd), p.cu_per_day, p.requests_per_second, p.burst) for n, p in plans.items()}
    assert got == {
        "free": ("0.00", 10_000_000, 1.0, 1),
        "basic": ("19.99", 40_000_000, 10.0, 10),
        "pro": ("49.99", 100_000_000, 10.0, 10),
        "enterprise": ("199.99", 432_000_000, 50.0, 50),
    }


def test_plans_override_and_clear_errors(tmp_path: Path) -> None:
    custom = load_plans(write_plans(tmp_path / "p.yaml", {"tiny": (500, 2)}))
    assert list(custom) == ["tiny"] and custom["tiny"].cu_per_day == 500
    bad = tmp_path / "bad.yaml"
    bad.write_text("plans:\n  x:\n    title: X\n    price_usd: '1'\n    cu_per_day: -5\n    requests_per_second: 1\n")
    with pytest.raises(PlansError, match="cu_per_day must be a positive integer"):
        load_plans(bad)
    bad.write_text("plans:\n  x:\n    title: X\n    cu_per_day: 5\n")
    with pytest.raises(PlansError, match="has no 'price_usd'"):
        load_plans(bad)
    with pytest.raises(PlansError, match="does not exist"):
        load_plans(tmp_path / "missing.yaml")


def _db_bytes(settings: Settings) -> bytes:
    data = b""
    for suffix in ("", "-wal"):
        p = Path(str(settings.platform_db) + suffix)
        if p.exists():
            data += p.read_bytes()
    return data


def test_only_the_hash_is_stored_and_wal_mode(tmp_path: Path) -> None:
    settings = metering_settings(tmp_path / "home")
    access = build_access(settings)
    key_id, key = access.store.create_key("alice", "free", ["news"])
    raw = _db_bytes(settings)
    assert key.encode() not in raw and key[len(KEY_PREFIX):].encode() not in raw
    assert hash_key(key).encode() in raw
    listed = access.store.keys()
    assert listed[0]["secrets"][0]["display"] == f"{KEY_PREFIX}…{key[-4:]}"
    assert key not in json.dumps(listed)
    asyncio.run(access.close())
    with sqlite3.connect(settings.platform_db) as db:
        assert db.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
    assert settings.platform_db.parent == settings.home  # under the data home, not the warehouse


def test_revocation_reaches_a_running_access_within_the_cache_delay(tmp_path: Path) -> None:
    async def run() -> None:
        settings = metering_settings(tmp_path / "home")
        access = build_access(settings)
        key_id, key = access.store.create_key("alice", "basic", ["news"])
        await access.check(key, "news")
        build_access(settings).store.revoke_key(key_id)  # another process's view: the CLI
        await asyncio.sleep(1.1)  # KEY_CACHE_SECONDS is 1 s
        with pytest.raises(ApiError) as err:
            await access.check(key, "news")
        assert err.value.status == 401 and err.value.code == "UNAUTHENTICATED"
        assert key not in err.value.message
        await access.close()

    asyncio.run(run())


def test_rotation_keeps_id_plan_usage_and_old_key_for_the_grace(tmp_path: Path) -> None:
    async def run() -> None:
        access = build_access(metering_settings(tmp_path / "home"))
        key_id, old = access.store.create_key("bob", "pro", ["news", "pdf"])
        caller = await access.check(old, "news")
        await access.reserve(caller, 700)
        new = access.store.rotate_key(key_id, grace_seconds=3600)
        assert new != old and KEY_RE.match(new)
        for k in (old, new):  # both work during the grace period
            c = await access.check(k, "pdf")
            assert c.key_id == key_id and c.plan == "pro"
        assert (await access.usage(c))["cuUsedToday"] == 700  # rotation does not reset the allowance
        access.store.rotate_key(key_id, grace_seconds=0)  # a second rotation with no grace: only the newest works
        fresh = build_access(metering_settings(tmp_path / "home"))  # no cached lookups
        for k in (old, new):
            with pytest.raises(ApiError) as err:
                await fresh.check(k, "news")
            assert err.value.status == 401
        await fresh.close()
        await access.close()

    asyncio.run(run())


def _cli(runner: CliRunner, *args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


def test_cli_keys_lifecycle_and_usage(data_home: Path) -> None:
    runner = CliRunner()
    code, out = _cli(runner, "keys", "create", "--plan", "basic", "--name", "carol", "--apis", "news,pdf", "--json")
    assert code == 0, out
    made = json.loads(out)
    assert set(made) == {"id", "key", "plan", "apis"} and made["plan"] == "basic" and made["apis"] == ["news", "pdf"]
    assert KEY_RE.match(made["key"])

    code, out = _cli(runner, "keys", "create", "--plan", "free", "--name", "dave")
    assert code == 0, out
    printed = re.findall(r"cw_live_[A-Za-z0-9_-]{32}", out)
    assert len(printed) == 1 and "shown only this once" in out

    code, out = _cli(runner, "keys", "list", "--json")
    assert code == 0
    listed = {k["id"]: k for k in json.loads(out)}
    assert listed[made["id"]]["secrets"][0]["display"].endswith(made["key"][-4:])
    assert made["key"] not in out and printed[0] not in out

    # spend some CU with the key, then read it back through the CLI
    async def spend() -> None:
        from warehouse.config import get_settings

        access = build_access(get_settings())
        caller = await access.check(made["key"], "pdf")
        await access.reserve(caller, 20_000)
        caller = await access.check(made["key"], "news")
        await access.reserve(caller, 37)
        await access.close()

    asyncio.run(spend())
    code, out = _cli(runner, "usage", made["id"], "--days", "3", "--json")
    assert code == 0, out
    rep = json.loads(out)
    assert rep["today"]["cuUsedToday"] == 20_037 and rep["today"]["cuLimit"] == 40_000_000
    assert len(rep["days"]) == 3
    today = rep["days"][-1]
    assert today["date"] == time.strftime("%Y-%m-%d", time.gmtime())
    assert today["apis"]["pdf"] == {"cu": 20_000, "requests": 1} and today["apis"]["news"] == {"cu": 37, "requests": 1}
    assert rep["days"][0]["cu"] == 0
    code, out = _cli(runner, "usage")
    assert code == 0 and "20,037" in out and "carol" in out and "dave" in out

    code, out = _cli(runner, "keys", "rotate", made["id"], "--json")
    assert code == 0
    rotated = json.loads(out)
    assert rotated["id"] == made["id"] and rotated["key"] != made["key"] and rotated["apis"] == ["news", "pdf"]
    code, out = _cli(runner, "keys", "rotate", made["id"], "--grace-hours", "0")
    assert code == 0 and "stopped working now" in out and "keeps working" not in out, out

    code, out = _cli(runner, "keys", "revoke", made["id"])
    assert code == 0
    code, out = _cli(runner, "keys", "list", "--json")
    assert {k["id"]: k["status"] for k in json.loads(out)}[made["id"]] == "revoked"


def test_cli_refuses_bad_input_clearly(data_home: Path) -> None:
    runner = CliRunner()
    code, out = _cli(runner, "keys", "create", "--plan", "gold", "--name", "x")
    assert code == 2 and "unknown plan 'gold'" in out and "free" in out and "Usage:" in out
    code, out = _cli(runner, "keys", "create", "--plan", "free", "--name", "x", "--apis", "news,weather")
    assert code == 2 and "--apis" in out and "Usage:" in out  # a mistake in the command line
    code, out = _cli(runner, "keys", "revoke", "key_nope")
    assert code != 0 and "no key with id 'key_nope'" in out
    code, out = _cli(runner, "usage", "key_nope")
    assert code != 0 and "no key with id" in out


def test_usage_with_a_redis_url_of_another_scheme_is_one_line(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    code, out = _cli(runner, "keys", "create", "--plan", "free", "--name", "x", "--json")
    assert code == 0, out
    key_id = json.loads(out)["id"]
    monkeypatch.setenv("CRYPTOWIRE_REDIS_URL", "http://cache.internal:6379")
    get_settings.cache_clear()
    for args in (["usage", key_id], ["usage", "--json"]):
        code, out = _cli(runner, *args)
        assert code == 2 and "Traceback" not in out, out
        assert "CRYPTOWIRE_REDIS_URL must start with redis://" in out, out
    document = next(line for line in out.splitlines() if line.startswith("{"))  # --json: also a document on stdout
    assert json.loads(document)["exitCode"] == 2
    code, out = _cli(runner, "up")  # stops before the run, as `serve` would after it
    assert code == 2 and "CRYPTOWIRE_REDIS_URL must start with redis://" in out and "Traceback" not in out, out


def test_up_checks_what_serve_checks_before_its_run(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A code review: `up` checked the Redis URL's scheme only; with a bad PDF allow list it ran the pipeline, revoked
    # the key the previous `up` printed, made a new one, and then failed with the server's traceback.
    monkeypatch.setenv("CRYPTOWIRE_PDF_ALLOW_HOSTS", '["http://10.0.0.5/path"]')
    get_settings.cache_clear()
    code, out = _cli(CliRunner(), "up")
    assert code == 2 and "CRYPTOWIRE_PDF_ALLOW_HOSTS=" in out and "Traceback" not in out, out
    assert not get_settings().warehouse_path.exists()  # stopped before the run
