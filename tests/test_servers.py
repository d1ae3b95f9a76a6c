"""The real test servers start, answer and stop (the fixtures that the scaling tests stand on)."""

from __future__ import annotations

import psycopg
import redis


def test_postgres_fixture_is_a_real_server(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (41)")
        row = conn.execute("SELECT x + 1, current_setting('server_version_num')::int FROM t").fetchone()
    assert row is not None and row[0] == 42 and row[1] >= 130000


def test_redis_fixture_is_a_real_server(redis_url_server: str) -> None:
    client = redis.Redis.from_url(redis_url_server)
    assert client.incr("n") == 1 and client.incr("n") == 2
