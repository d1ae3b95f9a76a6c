"""The request-rate limiter and the daily CU counters, behind two small interfaces.

Embedded default (one API process, or several sharing one SQLite file): an in-process token bucket per key and
the counters of the platform store (``StoreCounters`` over ``accounts.sqlite``). With ``CRYPTOWIRE_REDIS_URL``
set, both live in Redis (Lua scripts, so each check-and-update is atomic on the server), and every API instance
pointing at that Redis shares one bucket and one daily allowance per key. With ``CRYPTOWIRE_DATABASE_URL`` set,
the counters are the Postgres store's (durable, exact across processes) and Redis, when set, holds the buckets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import sqlite3
import time
from typing import Any, Protocol

from accounts.store import ChargeItem, Store, StoreUnavailable, Usage

# Redis keeps per-day usage this long (the usage report looks back at most HISTORY_MAX_DAYS).
HISTORY_MAX_DAYS = 90
REDIS_USAGE_TTL = (HISTORY_MAX_DAYS + 10) * 86400
log = logging.getLogger(__name__)

REDIS_MAX_CONNECTIONS = 64  # per API process; each request holds one for a single script call
REDIS_IDLE_PING = 1.0  # seconds: a pooled connection idle longer is checked before use (CheckedPool)
# A charge's or refund's mark lives this long (one small key each: about 100 bytes, so 12 MB at 1,000 charges a
# second): long enough for a cancel sent once Redis answers again to find it.
MARK_SECONDS = 120
CANCEL_MARK_SECONDS = 3600  # a cancel's mark: a script delayed in the network still finds it
SETTLE_RETRY_MAX = 5.0  # seconds between attempts to cancel what timed out, at most


class MeteringUnavailable(RuntimeError):
    """The counters cannot be read or written (Redis down, SQLite locked too long): requests are refused (503),
    never let through free."""


def _unavailable(exc: BaseException) -> MeteringUnavailable:
    return MeteringUnavailable(f"the usage counters are unavailable ({type(exc).__name__}: {exc})")


class RateState:
    """The outcome of taking one token: whether it passed, and the bucket as the headers report it."""

    __slots__ = ("allowed", "tokens", "rate", "limit")

    def __init__(self, allowed: bool, tokens: float, rate: float, burst: int) -> None:
        self.allowed = allowed
        self.tokens = tokens  # left in the bucket after this request
        self.rate = rate
        self.limit = burst  # bucket size (= the plan's requests per second)

    @property
    def remaining(self) -> int:
        """Whole requests left in the bucket after this one."""
        return max(0, int(self.tokens))

    @property
    def reset(self) -> int:
        """Seconds until the bucket is full again."""
        return max(0, math.ceil((self.limit - self.tokens) / self.rate))

    @property
    def retry_after(self) -> int:
        """Seconds until the next request may pass (0 when this one passed)."""
        return 0 if self.allowed else max(1, math.ceil((1.0 - self.tokens) / self.rate))


class RateLimiter(Protocol):
    async def take(self, key_id: str, rate: float, burst: int) -> RateState: ...
    async def ping(self) -> None: ...  # MeteringUnavailable when its server cannot be reached (for /readyz)
    async def close(self) -> None: ...


class Counters(Protocol):
    async def charge(self, key_id: str, day: str, api: str, cost: int, limit: int) -> tuple[bool, int]: ...
    async def refund(self, key_id: str, day: str, api: str, cost: int) -> int: ...
    async def used(self, key_id: str, day: str) -> int: ...
    def peek(self, key_id: str, day: str) -> int | None: ...  # last value this process saw (no I/O), if any
    async def history(self, key_id: str, days: list[str]) -> Usage: ...
    async def ping(self) -> None: ...
    async def close(self) -> None: ...


# --- embedded ------------------------------------------------------------------------------------------------
class LocalRateLimiter:
    """Token bucket per key in this process's memory (refilled continuously at ``rate``, capped at ``burst``)."""

    def __init__(self) -> None:
        self._buckets: dict[str, list[float]] = {}  # key id -> [tokens, last refill (monotonic)]

    async def take(self, key_id: str, rate: float, burst: int) -> RateState:
        now = time.monotonic()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = [float(burst), now]
        tokens = min(float(burst), bucket[0] + (now - bucket[1]) * rate)
        allowed = tokens >= 1.0
        if allowed:
            tokens -= 1.0
        bucket[0], bucket[1] = tokens, now
        return RateState(allowed, tokens, rate, burst)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


_STORE_ERRORS = (sqlite3.Error, StoreUnavailable)


class StoreCounters:
    """The daily counters in the platform store (SQLite or Postgres), with group commit.

    ``charge`` queues the charge and waits; the queued charges are written in one transaction (one commit for all
    of them), then each waiting request gets its result. A request is answered only after its charge is
    committed, so a crash loses at most the requests still in flight.

    A store whose calls block (``store.blocking``: Postgres, SQLite): a drain task writes the queue in a worker
    thread, one batch at a time; the charges that arrive meanwhile form the next batch, so the batches grow with
    the load and the event loop never waits on the network or on another process's lock. A store that does not
    block: once per event-loop iteration, inline.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[ChargeItem, asyncio.Future]]] = {}
        self._draining: set[asyncio.AbstractEventLoop] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # the running drain tasks (a task needs a reference)
        self._blocking = bool(getattr(store, "blocking", False))
        self._seen: dict[tuple[str, str], int] = {}  # (key id, day) -> last used value this process saw

    def _note(self, key_id: str, day: str, used: int) -> int:
        if len(self._seen) > 100_000:
            self._seen.clear()
        self._seen[(key_id, day)] = used
        return used

    async def charge(self, key_id: str, day: str, api: str, cost: int, limit: int) -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[bool, int]] = loop.create_future()
        queue = self._pending.get(loop)
        if queue is None:
            queue = self._pending[loop] = []
            if not self._blocking:
                loop.call_soon(self._flush, loop)
        queue.append(((key_id, day, api, cost, limit), fut))
        if self._blocking and loop not in self._draining:
            self._draining.add(loop)
            task = loop.create_task(self._drain(loop))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await fut

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write the queued charges in a worker thread, batch after batch, until the queue is empty."""
        try:
            await asyncio.sleep(0)  # let the requests of this event-loop turn join the first batch
            while batch := self._pending.pop(loop, []):
                try:
                    results = await asyncio.to_thread(self.store.charge_many, [item for item, _ in batch])
                except Exception as exc:  # nothing of this batch was committed (or it is undone: PostgresStore)
                    self._settle(batch, None, exc)
                    if isinstance(exc, _STORE_ERRORS):
                        # The store failed (down, hung, locked) while these waited: refused with it at once, rather
                        # than each waiting out the store's timeouts once more (the failing access refuses the
                        # next requests at once too, FAIL_FAST_SECONDS).
                        self._settle(self._pending.pop(loop, []), None, exc)
                    continue
                except BaseException:  # cancelled (shutdown): the waiting requests are cancelled too
                    for _, fut in batch:
                        fut.cancel()
                    raise
                self._settle(batch, results, None)
        finally:
            self._draining.discard(loop)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._pending.pop(loop, [])
        try:
            results = self.store.charge_many([item for item, _ in batch])
        except Exception as exc:  # nothing of this batch was committed
            self._settle(batch, None, exc)
            return
        self._settle(batch, results, None)

    def _settle(self, batch: list[tuple[ChargeItem, asyncio.Future]], results: list[tuple[bool, int]] | None,
                exc: BaseException | None) -> None:
        if results is None:
            failure = _unavailable(exc) if isinstance(exc, _STORE_ERRORS) else exc
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(failure)  # type: ignore[arg-type]
            return
        for (item, fut), result in zip(batch, results, strict=True):
            self._note(item[0], item[1], result[1])
            if not fut.done():
                fut.set_result(result)

    async def _run(self, fn: Any, *args: Any) -> Any:
        try:
            if self._blocking:
                return await asyncio.to_thread(fn, *args)
            return fn(*args)
        except _STORE_ERRORS as exc:
            raise _unavailable(exc) from None

    async def refund(self, key_id: str, day: str, api: str, cost: int) -> int:
        return self._note(key_id, day, await self._run(self.store.refund, key_id, day, api, cost))

    def peek(self, key_id: str, day: str) -> int | None:
        return self._seen.get((key_id, day))

    async def used(self, key_id: str, day: str) -> int:
        return self._note(key_id, day, await self._run(self.store.used, key_id, day))

    async def history(self, key_id: str, days: list[str]) -> Usage:
        return await self._run(self.store.history, key_id, days)

    async def ping(self) -> None:
        await self._run(self.store.schema_version)

    async def close(self) -> None:
        return None  # the store is closed by its owner


# --- Redis ---------------------------------------------------------------------------------------------------
_BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1])
local ts = tonumber(b[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return {allowed, tostring(tokens)}
"""

# One hash per key and UTC day: field 'total', and '<api>:cu' / '<api>:req' per API.
# Every charge and refund has an id, and leaves a mark under it (KEYS[2]) for MARK_SECONDS: 'c' a charge made,
# 'a' / 't' a refund made (with / without the API's fields), 'n' a refund with nothing to take back, 'x' cancelled.
# A script finding its mark set does nothing: it was cancelled before Redis ran it (see _CANCEL_LUA).
_CHARGE_LUA = """
local cost = tonumber(ARGV[1])
local used = tonumber(redis.call('HGET', KEYS[1], 'total') or '0')
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-1, used}
end
if used + cost > tonumber(ARGV[2]) then
  return {0, used}
end
used = redis.call('HINCRBY', KEYS[1], 'total', cost)
redis.call('HINCRBY', KEYS[1], ARGV[3] .. ':cu', cost)
redis.call('HINCRBY', KEYS[1], ARGV[3] .. ':req', 1)
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], 'c', 'EX', ARGV[5])
return {1, used}
"""

_REFUND_LUA = """
local cost = tonumber(ARGV[1])
local used = tonumber(redis.call('HGET', KEYS[1], 'total') or '0')
if redis.call('EXISTS', KEYS[2]) == 1 then
  return used
end
local done = 'n'
if used >= cost then
  used = redis.call('HINCRBY', KEYS[1], 'total', -cost)
  done = 't'
  local cu = tonumber(redis.call('HGET', KEYS[1], ARGV[2] .. ':cu') or '0')
  local req = tonumber(redis.call('HGET', KEYS[1], ARGV[2] .. ':req') or '0')
  if cu >= cost and req >= 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':cu', -cost)
    redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':req', -1)
    done = 'a'
  end
end
redis.call('SET', KEYS[2], done, 'EX', ARGV[3])
return used
"""

# Cancel a charge or refund whose answer never came (a timeout: Redis may have run it, or may still run it when it
# answers again). Run before it: its mark 'x' stops it. Run after it: undone (a charge given back as a refund
# would, a refund taken back). Either way it is as if it had never been sent; a second cancel does nothing.
_CANCEL_LUA = """
local cost = tonumber(ARGV[1])
local mark = redis.call('GET', KEYS[2])
local undone = 0
if mark == 'c' then
  local used = tonumber(redis.call('HGET', KEYS[1], 'total') or '0')
  if used >= cost then
    redis.call('HINCRBY', KEYS[1], 'total', -cost)
    local cu = tonumber(redis.call('HGET', KEYS[1], ARGV[2] .. ':cu') or '0')
    local req = tonumber(redis.call('HGET', KEYS[1], ARGV[2] .. ':req') or '0')
    if cu >= cost and req >= 1 then
      redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':cu', -cost)
      redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':req', -1)
    end
  end
  undone = 1
elseif mark == 'a' or mark == 't' then
  redis.call('HINCRBY', KEYS[1], 'total', cost)
  if mark == 'a' then
    redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':cu', cost)
    redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':req', 1)
  end
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  undone = 1
end
redis.call('SET', KEYS[2], 'x', 'EX', ARGV[3])
return undone
"""


def redis_client(url: str) -> Any:
    import redis.asyncio as aioredis  # only needed when Redis is configured

    # A blocking pool: a burst of more concurrent requests than connections waits for one (up to 5 s) instead
    # of failing with MaxConnectionsError (redis-py's default pool refuses past 100 connections).
    pool = _pool_class().from_url(
        url, max_connections=REDIS_MAX_CONNECTIONS, timeout=5, decode_responses=True, socket_timeout=5,
        socket_connect_timeout=5,
    )
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose() closes it


def _pool_class() -> Any:
    import redis.asyncio as aioredis
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    class CheckedPool(aioredis.BlockingConnectionPool):  # type: ignore[misc]
        """A connection idle for more than REDIS_IDLE_PING seconds answers a PING before it is handed out, and is
        reconnected when it does not: after Redis restarts every pooled connection is dead, and each would fail
        one request. A PING is safe to repeat; a charge is not, so commands themselves are never retried."""

        async def ensure_connection(self, connection: Any) -> None:
            await super().ensure_connection(connection)
            now = time.monotonic()
            connection.cw_pinged = False  # True once this check's PING was answered (see ping)
            if now - getattr(connection, "cw_used_at", now) > REDIS_IDLE_PING:
                try:
                    await connection.send_command("PING", check_health=False)
                    await connection.read_response()
                    connection.cw_pinged = True
                except (RedisConnectionError, RedisTimeoutError, OSError):
                    await connection.disconnect()
                    await connection.connect()
            connection.cw_used_at = now

        async def ping(self) -> None:
            """A PING in one round trip (/readyz): a connection whose check above PINGed it has answered already;
            otherwise as ``client.ping()`` (a failure disconnects it and raises)."""
            connection = await self.get_connection()
            try:
                if not connection.cw_pinged:
                    await connection.send_command("PING")
                    await connection.read_response()
            except BaseException:
                await connection.disconnect()
                raise
            finally:
                await self.release(connection)

    return CheckedPool


async def _ping(client: Any) -> None:
    """PING the client's server once (the probe's PING and the pool's idle check are one round trip)."""
    pool = client.connection_pool
    await _call(pool.ping() if hasattr(pool, "ping") else client.ping())


async def _call(coro: Any) -> Any:
    """Await a Redis call; a Redis failure becomes MeteringUnavailable (without the URL, which may hold a password)."""
    from redis.exceptions import RedisError

    try:
        return await coro
    except (RedisError, OSError) as exc:
        raise MeteringUnavailable(f"Redis is unavailable ({type(exc).__name__})") from None


class RedisRateLimiter:
    """The same token bucket, in Redis: one bucket per key shared by every API instance (Redis's clock)."""

    def __init__(self, client: Any, prefix: str = "cw:", close_client: bool = False) -> None:
        self._client = client
        self._close_client = close_client  # True when no RedisCounters shares (and closes) the client
        self._prefix = prefix
        self._script = client.register_script(_BUCKET_LUA)

    async def take(self, key_id: str, rate: float, burst: int) -> RateState:
        allowed, tokens = await _call(self._script(keys=[f"{self._prefix}bucket:{key_id}"], args=[rate, burst]))
        return RateState(bool(int(allowed)), float(tokens), rate, burst)

    async def ping(self) -> None:
        if self._close_client:  # a client shared with RedisCounters is PINGed by them: once per probe, not twice
            await _ping(self._client)

    async def close(self) -> None:
        if self._close_client:  # otherwise the client is closed by RedisCounters (they share it)
            await self._client.aclose()


class RedisCounters:
    """The daily counters in Redis. A charge or refund that gets no answer (Redis hung: redis-py's socket timeout)
    may still be run by Redis when it answers again, so the caller's 503 and the bill would disagree. Each one
    therefore has an id and leaves a mark under it; one that timed out is cancelled once Redis answers
    (``_CANCEL_LUA``: stopped if it has not run, undone if it has), before this instance's next charge or
    refund, and by a background retry meanwhile. So a charge or refund that raised has, in the end, no effect."""

    def __init__(self, client: Any, prefix: str = "cw:") -> None:
        self._client = client
        self._prefix = prefix
        self._charge = client.register_script(_CHARGE_LUA)
        self._refund = client.register_script(_REFUND_LUA)
        self._cancel = client.register_script(_CANCEL_LUA)
        self._seen: dict[tuple[str, str], int] = {}  # (key id, day) -> last used value this instance saw
        self._unsettled: dict[str, tuple[str, str, str, int]] = {}  # id -> (key id, day, api, cost) to cancel
        self._retry: asyncio.Task[None] | None = None

    def _key(self, key_id: str, day: str) -> str:
        return f"{self._prefix}usage:{key_id}:{day}"

    def _mark(self, op_id: str) -> str:
        return f"{self._prefix}op:{op_id}"

    async def _write(self, script: Any, key_id: str, day: str, api: str, cost: int, args: list[Any]) -> Any:
        """Run a charge or refund script under a new id, after cancelling what timed out before (in that order,
        so that a refund made again never meets its first attempt). A failure leaves it to cancel."""
        await self._settle()
        op_id = secrets.token_hex(8)
        try:
            return await _call(script(keys=[self._key(key_id, day), self._mark(op_id)], args=args))
        except MeteringUnavailable:
            self._unsettled[op_id] = (key_id, day, api, cost)
            log.warning("a %d CU write to key %s's usage got no answer from Redis: cancelled once Redis answers",
                        cost, key_id)
            self._retry_later()
            raise

    async def _settle(self) -> None:
        """Cancel every charge and refund that timed out (MeteringUnavailable while Redis does not answer)."""
        for op_id, (key_id, day, api, cost) in list(self._unsettled.items()):
            undone = await _call(self._cancel(keys=[self._key(key_id, day), self._mark(op_id)],
                                              args=[cost, api, CANCEL_MARK_SECONDS, REDIS_USAGE_TTL]))
            if self._unsettled.pop(op_id, None) is not None and int(undone):
                log.warning("a %d CU write to key %s's usage that timed out had been made by Redis: undone", cost,
                            key_id)

    def _retry_later(self) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.ensure_future(self._settle_later())

    async def _settle_later(self) -> None:
        delay = 0.5
        while self._unsettled:
            await asyncio.sleep(delay)
            try:
                await self._settle()
            except MeteringUnavailable:
                delay = min(delay * 2, SETTLE_RETRY_MAX)

    async def charge(self, key_id: str, day: str, api: str, cost: int, limit: int) -> tuple[bool, int]:
        ok, used = await self._write(self._charge, key_id, day, api, cost,
                                     [cost, limit, api, REDIS_USAGE_TTL, MARK_SECONDS])
        if int(ok) < 0:  # its id was cancelled before it ran: cannot happen for a new id, but never charge then
            raise MeteringUnavailable("the usage counters are unavailable (a charge was cancelled)")
        return bool(int(ok)), self._note(key_id, day, int(used))

    async def refund(self, key_id: str, day: str, api: str, cost: int) -> int:
        used = int(await self._write(self._refund, key_id, day, api, cost, [cost, api, MARK_SECONDS]))
        return self._note(key_id, day, used)

    async def used(self, key_id: str, day: str) -> int:
        return self._note(key_id, day, int(await _call(self._client.hget(self._key(key_id, day), "total")) or 0))

    def peek(self, key_id: str, day: str) -> int | None:
        return self._seen.get((key_id, day))

    def _note(self, key_id: str, day: str, used: int) -> int:
        if len(self._seen) > 100_000:
            self._seen.clear()
        self._seen[(key_id, day)] = used
        return used

    async def history(self, key_id: str, days: list[str]) -> Usage:
        pipe = self._client.pipeline(transaction=False)
        for day in days:
            pipe.hgetall(self._key(key_id, day))
        out: Usage = {}
        for day, fields in zip(days, await _call(pipe.execute()), strict=True):
            apis = {name.split(":", 1)[0] for name in fields if name != "total"}
            for api in apis:
                out.setdefault(day, {})[api] = (int(fields.get(f"{api}:cu", 0)), int(fields.get(f"{api}:req", 0)))
        return out

    async def ping(self) -> None:
        await _ping(self._client)
        if self._unsettled:  # Redis answers again: the readiness probe settles too
            await self._settle()

    async def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        if self._unsettled:
            with contextlib.suppress(MeteringUnavailable):
                await self._settle()
        for key_id, day, api, cost in self._unsettled.values():
            log.error("a %d CU write to key %s's usage (day %s, api %s) timed out and could not be cancelled before "
                      "the server stopped: Redis may have made it; check the usage by hand", cost, key_id, day, api)
        await self._client.aclose()

