"""``MeteredAccess``: the real ``api.access.Access`` — keys, plans, request rate and daily compute units.

The API's routes and the CLI's usage report both use it; it knows nothing of HTTP beyond the refusals it raises
(``accounts.errors.ApiError``: 401, 403, 429, 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sqlite3
import time
from datetime import UTC, datetime
from typing import Any

from accounts.apis import APIS, USAGE_API, Caller, Charge
from accounts.errors import ApiError
from accounts.keys import KeyRecord, hash_key, same_hash, well_formed
from accounts.limits import (
    HISTORY_MAX_DAYS,
    Counters,
    MeteringUnavailable,
    RateLimiter,
    RateState,
    StoreCounters,
)
from accounts.plans import Plan
from accounts.sqlite import SqliteStore
from accounts.store import Store, StoreUnavailable

log = logging.getLogger(__name__)

# A key looked up is remembered this long: revoking a key takes effect on a running server within this delay
# (on Postgres, usually at once: key changes are notified and drop the cache; this stays the bound).
KEY_CACHE_SECONDS = 1.0
_KEY_CACHE_MAX = 10_000
# /readyz probes the store and Redis at most this often (a load balancer may poll it many times a second), and
# waits at most PROBE_TIMEOUT for them (the connect timeouts are longer).
PROBE_SECONDS = 1.0
PROBE_TIMEOUT = 2.0
# Once metering failed, requests are refused at once for this long, then one at a time tries again while the
# others are refused (instead of each waiting out the store's or Redis's timeouts, 5 s on Postgres, and
# then arriving together when it is back).
FAIL_FAST_SECONDS = 1.0
# A refund the counters could not take is retried after this, then twice as long each time, up to the max.
REFUND_RETRY_FIRST = 0.5
REFUND_RETRY_MAX = 30.0
CLOSE_REFUNDS_SECONDS = 12.0  # close() waits this long for pending refunds' last attempts (SQLite waits 10 s)

UNKNOWN_KEY = (
    "unknown, revoked or rotated access key (a rotated key's old secret works only for its grace period): pass a "
    "current key (it starts with cw_live_) as the last path segment; the key's owner can list them with "
    "`cryptowire keys list`"
)


def utc_day(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).date().isoformat()


def seconds_to_midnight(now: float) -> int:
    return max(1, math.ceil(86400 - now % 86400))


def next_midnight_iso(now: float) -> str:
    midnight = (int(now // 86400) + 1) * 86400
    return datetime.fromtimestamp(midnight, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")  # the API's DateTime form


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x



def log_lost_refund(charge: Charge, why: str) -> None:
    """The one line an operator needs for a refund that could not be made before the server stopped."""
    log.error("refund of %d CU to key %s (day %s, api %s) not made at shutdown (%s): credit it by hand if the "
              "usage shows it", charge.cost, charge.caller.key_id, charge.info.get("day", "?"), charge.caller.api, why)

class MeteredAccess:
    metered = True

    def __init__(
        self,
        store: Store,
        plans: dict[str, Plan],
        limiter: RateLimiter,
        counters: Counters,
        key_cache_seconds: float = KEY_CACHE_SECONDS,
    ) -> None:
        self.store = store
        self.plans = plans
        self._limiter = limiter
        self._counters = counters
        self._cache_seconds = key_cache_seconds
        self._cache: dict[str, tuple[KeyRecord, float]] = {}  # sha256 -> (record, looked up at, monotonic)
        self._day: tuple[int, str] = (-1, "")
        self._blocking = bool(getattr(store, "blocking", False))
        self._probe_due = 0.0  # monotonic time of the next readiness probe
        self._problem: str | None = None  # what the last probe found wrong
        self._probe: asyncio.Task[None] | None = None  # the last probe, which may outlive its wait
        self._pings: list[tuple[str, asyncio.Future[None]]] = []  # its pings, by what they reach
        self._refunds: dict[asyncio.Task[None], Charge] = {}  # refunds retried until the counters answer
        self._closing = asyncio.Event()
        self._down_until = 0.0  # monotonic time until which requests are refused without trying (FAIL_FAST_SECONDS)
        self._failing = False  # metering failed and no request has got through since
        self._trial = False  # a request is trying metering again; the others are refused meanwhile
        watch = getattr(store, "watch_keys", None)
        if watch is not None:  # Postgres: another process changed a key -> forget every cached key at once
            watch(self._forget_keys)

    def _forget_keys(self, key_id: str) -> None:
        """Called from the store's listener thread: replacing the dict is atomic, the event loop sees either."""
        self._cache = {}

    # --- helpers -----------------------------------------------------------------
    def _today(self, now: float) -> str:
        epoch_day = int(now // 86400)
        if epoch_day != self._day[0]:
            self._day = (epoch_day, utc_day(now))
        return self._day[1]

    async def _record(self, key: str) -> KeyRecord | None:
        if not well_formed(key):
            return None
        digest = hash_key(key)
        now = time.monotonic()
        cache = self._cache  # a key change notified during the lookup replaces it: what is found then is dropped
        hit = cache.get(digest)
        if hit is not None and now - hit[1] <= self._cache_seconds:
            record = hit[0]
        else:
            found = await asyncio.to_thread(self.store.lookup, digest) if self._blocking else self.store.lookup(digest)
            if found is None:
                cache.pop(digest, None)
                return None
            if len(cache) >= _KEY_CACHE_MAX:
                cache.clear()
            cache[digest] = (found, now)
            record = found
        if not same_hash(record.key_hash, digest):  # constant-time confirmation of the indexed lookup
            return None
        return record if record.usable(time.time()) else None

    def _plan(self, name: str) -> Plan:
        plan = self.plans.get(name)
        if plan is None:
            # The plans are read when the server starts: a plan added to the file since is unknown here too.
            raise ApiError(403, "FORBIDDEN", f"this key's plan {name!r} is not among the plans this server offers; "
                           "ask the operator to restart the server if the plan was added to its plans file since it "
                           f"started, or to move the key to one of: {', '.join(self.plans)} "
                           "(`cryptowire keys set-plan ID PLAN`)")
        return plan

    def _unavailable(self, reason: object = None, headers: dict[str, str] | None = None) -> ApiError:
        log.warning("metering unavailable: %s", reason)  # never holds a key: errors from SQLite / Redis only
        self._failing = True
        self._down_until = time.monotonic() + FAIL_FAST_SECONDS
        return self._refusal(headers)

    @staticmethod
    def _refusal(headers: dict[str, str] | None = None) -> ApiError:
        """The 503: nothing charged, whoever asked (also when refused at once, before the key is looked up)."""
        return ApiError(503, "METERING_UNAVAILABLE", "usage metering is unavailable right now; retry shortly",
                        {"X-CU-Cost": "0", **(headers or {}), "Retry-After": "1"})

    def _refusal_headers(self, plan: Plan, key_id: str, day: str, rate: RateState | None) -> dict[str, str]:
        """The metering headers of a 503 past the key check, when the rate step (Redis) or the usage read failed:
        nothing charged; the bucket as far as it is known (the limiter unreachable: none left, full again in the
        second ``Retry-After`` names); what is left today as last seen, when this instance has seen it."""
        out = {"X-RateLimit-Limit": str(plan.burst), "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1"}
        if rate is not None:
            out.update({"X-RateLimit-Limit": str(rate.limit), "X-RateLimit-Remaining": str(rate.remaining),
                        "X-RateLimit-Reset": str(rate.reset)})
        out["X-CU-Cost"] = "0"
        used = self._counters.peek(key_id, day)
        if used is not None:
            out["X-CU-Remaining-Today"] = str(max(0, plan.cu_per_day - used))
        return out

    # --- the Access protocol -----------------------------------------------------
    async def problem(self) -> str | None:
        """Why metered requests would be refused right now (Redis or the Postgres store down), else None. Probed
        at most once per PROBE_SECONDS; callers during a probe get the previous answer."""
        now = time.monotonic()
        # No new probe while one still runs: a ping stuck in a worker thread (Postgres's connect timeout is longer
        # than PROBE_TIMEOUT) would otherwise pile up threads that metering itself needs.
        if now >= self._probe_due and (self._probe is None or self._probe.done()):
            self._probe_due = now + PROBE_SECONDS
            self._probe = asyncio.ensure_future(self._run_probe())
            try:
                await asyncio.wait_for(asyncio.shield(self._probe), PROBE_TIMEOUT)
            except TimeoutError:
                slow = sorted({name for name, ping in self._pings if not ping.done()}) or ["Redis or platform store"]
                self._problem = f"metering's {' and '.join(slow)} did not answer within {PROBE_TIMEOUT:g} s"
        return self._problem

    def _store_name(self, part: object) -> str:
        """What a limiter's or counters' ping reaches, for /readyz: Redis, or the platform store they live in."""
        store = getattr(part, "store", None)
        if store is None:
            return "Redis"
        return "SQLite store" if isinstance(store, SqliteStore) else "Postgres store"

    async def _run_probe(self) -> None:
        # one task per server, so that a probe that times out names the one that did not answer
        self._pings = [(self._store_name(part), asyncio.ensure_future(part.ping()))
                       for part in (self._limiter, self._counters)]
        try:  # the counters ping the store when they live in it (always so on Postgres)
            await asyncio.gather(*(ping for _, ping in self._pings))
            self._problem = None
        except MeteringUnavailable as exc:
            log.warning("metering unavailable: %s", exc)
            # /readyz is unauthenticated: the reason without the driver's text (it may name internal servers)
            reason = str(exc).split(" (", 1)[0]
            failed = [name for name, ping in self._pings
                      if ping.done() and not ping.cancelled() and ping.exception() is not None]
            if failed and not any(name.split()[0] in reason for name in failed):  # say which: the store's failure
                reason = f"metering's {' and '.join(failed)} is unavailable"  # may come back sooner than a timeout
            self._problem = reason

    async def check(self, key: str, api: str) -> Caller:
        if api not in APIS and api != USAGE_API:
            raise ValueError(f"unknown API {api!r}: expected one of {APIS + (USAGE_API,)}")
        # Fail fast while metering is down: after a failure, refuse for FAIL_FAST_SECONDS, then let one request
        # try at a time (the others refused) until one gets through; each would otherwise wait out the timeouts.
        trial = False
        if self._failing:
            if self._trial or time.monotonic() < self._down_until:
                raise self._refusal()
            self._trial = trial = True
        try:
            caller = await self._check(key, api)
            self._failing = False
            return caller
        except ApiError as exc:
            if exc.code != "METERING_UNAVAILABLE":
                self._failing = False  # metering answered (a refusal of the key, the rate)
            raise
        finally:
            if trial:
                self._trial = False

    async def _check(self, key: str, api: str) -> Caller:
        try:
            record = await self._record(key)
        except (sqlite3.Error, StoreUnavailable) as exc:
            raise self._unavailable(type(exc).__name__) from None
        if record is None:
            raise ApiError(401, "UNAUTHENTICATED", UNKNOWN_KEY)
        if api != USAGE_API and api not in record.apis:
            enabled = ", ".join(record.apis) or "none"
            raise ApiError(403, "FORBIDDEN", f"this access key is not enabled for the {api} API (enabled: "
                           f"{enabled}); use a key created with --apis including {api}")
        plan = self._plan(record.plan)
        now = time.time()
        day = self._today(now)
        rate: RateState | None = None
        try:
            rate = await self._limiter.take(record.id, plan.requests_per_second, plan.burst)
            # For the X-CU-Remaining-Today header of a response that charges nothing: the last value this
            # instance saw is enough (a charge returns the exact figure), so most requests skip a read here.
            used = self._counters.peek(record.id, day)
            if used is None:
                used = await self._counters.used(record.id, day)
        except MeteringUnavailable as exc:
            # past the key check: the 503 carries the metering headers too (the caller has no Caller to ask)
            raise self._unavailable(exc, self._refusal_headers(plan, record.id, day, rate)) from None
        caller = Caller(key_id=record.id, plan=plan.name, api=api,
                        info={"rate": rate, "day": day, "used": used})
        if not rate.allowed:
            rps = _number(plan.requests_per_second)
            raise ApiError(
                429, "RATE_LIMITED",
                f"too many requests: the {plan.title} plan allows {rps} request{'' if rps == 1 else 's'} "
                f"per second per key; retry after {rate.retry_after} s",
                {"Retry-After": str(rate.retry_after), **self.headers(caller)},
            )
        return caller

    async def reserve(self, caller: Caller, cost: int) -> Charge:
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise ValueError(f"cost must be a non-negative integer, got {cost!r}")
        plan = self._plan(caller.plan)
        if cost > plan.cu_per_day:  # no day would ever fit it: waiting for midnight is the wrong advice
            raise ApiError(
                403, "COST_EXCEEDS_PLAN",
                f"this request costs {cost} CU, more than the {plan.title} plan's whole daily allowance of "
                f"{plan.cu_per_day} CU: move the key to a larger plan"
                + (" or ask for less (smaller first/last, fewer fields)" if caller.api != "pdf" else ""),
                self.headers(caller),
            )
        now = time.time()
        day = self._today(now)
        try:
            if cost == 0:
                used = caller.info.get("used") if caller.info.get("day") == day else None
                if used is None:
                    used = await self._counters.used(caller.key_id, day)
                return Charge(caller=caller, cost=0, info={"day": day, "used": used})
            ok, used = await self._counters.charge(caller.key_id, day, caller.api, cost, plan.cu_per_day)
        except MeteringUnavailable as exc:
            raise self._unavailable(exc) from None
        caller.info.update(day=day, used=used)
        if not ok:
            wait = seconds_to_midnight(now)
            left = max(0, plan.cu_per_day - used)
            raise ApiError(
                429, "QUOTA_EXCEEDED",
                f"daily allowance exceeded: this request costs {cost} CU and {left} of the {plan.title} plan's "
                f"{plan.cu_per_day} CU remain today (CU held by requests still running count until they end; "
                f"a failed one gives its CU back); the allowance resets at 00:00 UTC (in {wait} s) — or upgrade "
                "the plan",
                {"Retry-After": str(wait), **self.headers(caller)},
            )
        return Charge(caller=caller, cost=cost, info={"day": day, "used": used})

    async def refund(self, charge: Charge) -> None:
        """Give back a charge for work that failed for a reason that costs nothing. Idempotent, and never raises:
        when the counters cannot be reached, the refund is retried in the background until they answer (the
        client's error is about its request, not about metering)."""
        if charge.cost == 0 or charge.info.get("refunded"):
            return
        charge.info["refunded"] = True
        try:
            await self.give_back(charge)
        except MeteringUnavailable as exc:
            log.warning("refund of %d CU to key %s deferred: %s", charge.cost, charge.caller.key_id, exc)
            task = asyncio.ensure_future(self._refund_later(charge))
            self._refunds[task] = charge
            task.add_done_callback(lambda done: self._refunds.pop(done, None))

    async def give_back(self, charge: Charge, within: float | None = None) -> None:
        """Refund ``charge`` now; raises MeteringUnavailable when the counters cannot be reached (``refund`` retries
        instead). For callers that keep their own record of what is still owed (the PDF charge journal).

        ``within``: on the SQLite counters, the longest the refund waits (for this process's other calls and for
        another process's write lock) before raising MeteringUnavailable, instead of the store's 10 s. A call in a
        worker thread cannot be cut short by an asyncio timeout: a caller with a deadline (a forced stop) passes it
        here, so that the refund has ended, taken or not, by then; it bounds the other counters' awaits itself."""
        caller = charge.caller
        with self._lock_wait(within):
            used = await self._counters.refund(caller.key_id, str(charge.info["day"]), caller.api, charge.cost)
        charge.info["used"] = used
        if caller.info.get("day") == charge.info["day"]:
            caller.info["used"] = used

    def _lock_wait(self, seconds: float | None) -> contextlib.AbstractContextManager[None]:
        """SQLite's waits shortened to ``seconds`` for the calls made meanwhile (they run in worker threads, which
        carry the setting; no other call is affected)."""
        counters = self._counters
        if seconds is None or not isinstance(counters, StoreCounters) or not isinstance(counters.store, SqliteStore):
            return contextlib.nullcontext()
        return counters.store.lock_wait(seconds)

    async def _refund_later(self, charge: Charge) -> None:
        """Retry one refund until the counters take it. The only place it is retried: a second attempt beside an
        attempt still waiting on the store (in a worker thread, which cancelling cannot stop) could refund twice."""
        delay = REFUND_RETRY_FIRST
        while True:
            closing = await self._closing_within(delay)
            try:
                await self.give_back(charge)
            except MeteringUnavailable:
                if closing:
                    log_lost_refund(charge, "metering was still unavailable")
                    return
                delay = min(delay * 2, REFUND_RETRY_MAX)
                continue
            log.info("deferred refund of %d CU to key %s done", charge.cost, charge.caller.key_id)
            return

    async def _closing_within(self, seconds: float) -> bool:
        """Wait ``seconds``, or less when ``close()`` starts; True when closing."""
        try:
            await asyncio.wait_for(self._closing.wait(), seconds)
        except TimeoutError:
            pass
        return self._closing.is_set()

    def headers(self, caller: Caller | None, charge: Charge | None = None) -> dict[str, str]:
        if caller is None:
            return {}
        out: dict[str, str] = {}
        rate = caller.info.get("rate")
        if isinstance(rate, RateState):
            out["X-RateLimit-Limit"] = str(rate.limit)
            out["X-RateLimit-Remaining"] = str(rate.remaining)
            out["X-RateLimit-Reset"] = str(rate.reset)
        plan = self.plans.get(caller.plan)
        info: dict[str, Any] = charge.info if charge is not None else caller.info
        cost = 0 if charge is None or charge.info.get("refunded") else charge.cost
        out["X-CU-Cost"] = str(cost)
        if plan is not None and "used" in info:
            out["X-CU-Remaining-Today"] = str(max(0, plan.cu_per_day - int(info["used"])))
        return out

    async def usage(self, caller: Caller) -> dict[str, object]:
        return await self._usage(caller.key_id, caller.plan)

    async def _usage(self, key_id: str, plan_name: str) -> dict[str, object]:
        plan = self._plan(plan_name)
        now = time.time()
        try:
            used = await self._counters.used(key_id, self._today(now))
        except MeteringUnavailable as exc:
            raise self._unavailable(exc) from None
        return {
            "plan": plan.name,
            "cuUsedToday": used,
            "cuRemainingToday": max(0, plan.cu_per_day - used),
            "cuLimit": plan.cu_per_day,
            "requestsPerSecond": _number(plan.requests_per_second),
            "resetAt": next_midnight_iso(now),
        }

    async def report(self, key_id: str, days: int = 7) -> dict[str, Any]:
        """Usage of one key: today's allowance, and CU and requests per UTC day and per API (oldest day first)."""
        if not 1 <= days <= HISTORY_MAX_DAYS:
            raise ValueError(f"days must be between 1 and {HISTORY_MAX_DAYS}, got {days}")
        try:
            found = await asyncio.to_thread(self.store.keys, key_id) if self._blocking else self.store.keys(key_id)
        except (sqlite3.Error, StoreUnavailable) as exc:
            raise self._unavailable(type(exc).__name__) from None
        if not found:
            raise LookupError(key_id)
        key = found[0]
        today = int(time.time() // 86400)
        dates = [utc_day((today - i) * 86400) for i in range(days - 1, -1, -1)]
        try:
            history = await self._counters.history(key_id, dates)
        except MeteringUnavailable as exc:
            raise self._unavailable(exc) from None
        per_day = []
        for d in dates:
            apis = {api: {"cu": history.get(d, {}).get(api, (0, 0))[0],
                          "requests": history.get(d, {}).get(api, (0, 0))[1]} for api in APIS}
            per_day.append({"date": d, "cu": sum(a["cu"] for a in apis.values()),
                            "requests": sum(a["requests"] for a in apis.values()), "apis": apis})
        return {
            "id": key["id"],
            "name": key["name"],
            "plan": key["plan"],
            "apis": key["apis"],
            "status": key["status"],
            "today": await self._usage(key_id, key["plan"]) if key["plan"] in self.plans else None,
            "days": per_day,
        }

    async def close(self) -> None:
        self._closing.set()  # each pending refund tries once more now
        if self._refunds:
            pending = dict(self._refunds)
            _, late = await asyncio.wait(list(pending), timeout=CLOSE_REFUNDS_SECONDS)
            for task in late:  # its attempt still waits on the store: it may yet land, and is not tried again
                log_lost_refund(pending[task], "its last attempt had no answer yet")
                task.cancel()
        await self._limiter.close()
        await self._counters.close()
        self.store.close()
