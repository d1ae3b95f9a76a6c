"""The GraphQL component: ``POST /crypto-news/{accessKey}``, ``POST /prediction-events/{accessKey}``, the
GraphiQL explorer (``GET`` with ``Accept: text/html``; its assets are served from ``/assets/graphiql/``), and
``GET /readyz``.

Both paths serve the same schema (``api/schema.graphql``); a request is metered against the API of its path:
``news`` for /crypto-news/, ``events`` for /prediction-events/. Per request: check the key (before any work a
stranger could make expensive), read the JSON body (415 for another content type, 400 for malformed JSON), prepare
the document (cached: limits, parse, validation — in a worker thread when not cached), coerce the variables,
compute the cost (``api.cost``), plan the root fields (bad cursors and arguments are 400s), reserve the cost,
execute against the current snapshot, and refund if execution failed (on bad input, or on our side).
Every error has ``extensions.code``; an unexpected failure is logged and answered without a stack trace.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from api import bodies, older
from api.access import ALL_METHODS, Caller, Charge, missing_key_routes
from api.cost import query_cost
from api.errors import ApiError
from api.gql_documents import DocumentCache, Prepared
from api.gql_exec import (
    Context,
    Outcome,
    Plan,
    check_with_snapshot,
    coerce_variables,
    execute_plan,
    plan_operation,
)
from api.responses import FastJSONResponse
from api.snapshots import Snapshot, SnapshotManager
from warehouse.read import CacheMiss

log = logging.getLogger("cryptowire.api")

STATIC = Path(__file__).with_name("static")
ASSETS = "/assets/graphiql"
# The explorer's URL holds the key: kept out of caches, of the Referer of its asset requests, and of other sites' frames.
EXPLORER_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
                    "Content-Security-Policy": "frame-ancestors 'none'"}
MAX_BODY_BYTES = 64 * 1024
PLAN_CACHE_SIZE = 1024  # the query itself is limited to 10 KB; the rest is variables
PATHS = {"/crypto-news/{accessKey}": "news", "/prediction-events/{accessKey}": "events"}
ALLOW = "GET, POST"  # GET for the explorer only; HEAD is refused, like the PDF endpoint's
EXAMPLE = """# cryptowire GraphQL explorer: press the play button (or Ctrl-Enter).
# Continue with "after": the endCursor of the page before.
query CryptoNews($after: String, $first: Int) {
  cryptoNews(after: $after, first: $first) {
    pageInfo { hasNextPage endCursor }
    edges {
      node { title sentiment tickers sourceName date }
    }
  }
  usage { plan cuUsedToday cuRemainingToday }
}
"""

GRAPHIQL_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>cryptowire GraphQL explorer</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{assets}/graphiql.min.css">
<style>html, body, #graphiql {{ height: 100%; margin: 0; }}</style>
</head>
<body>
<div id="graphiql">Loading the explorer…</div>
<script src="{assets}/react.production.min.js"></script>
<script src="{assets}/react-dom.production.min.js"></script>
<script src="{assets}/graphiql.min.js"></script>
<script>
  // Queries go to this very URL (the access key is its last segment); nothing is loaded from elsewhere.
  const fetcher = GraphiQL.createFetcher({{ url: window.location.pathname }});
  ReactDOM.createRoot(document.getElementById("graphiql")).render(
    React.createElement(GraphiQL, {{ fetcher: fetcher, defaultQuery: {example} }})
  );
</script>
</body>
</html>
""".format(assets=ASSETS, example=json.dumps(EXAMPLE).replace("<", "\\u003c"))


# Parsing and validating a new document is pure Python (up to ~0.2 s of CPU): threads doing it hold the GIL that the
# event loop needs for every other request. One at a time per process, and a key may have only a few waiting: a
# key sending new documents faster than they can be prepared is told to slow down instead of stalling everyone.
PREPARE_THREADS = 1
PREPARE_PER_KEY = 2


class NewsComponent:
    def __init__(self, state: Any) -> None:
        self.state = state
        settings = state.settings
        poll = settings.snapshot_poll_seconds
        self.snapshots = SnapshotManager(settings.snapshots_dir, poll, settings.page_cache_size)
        self.documents = DocumentCache()
        self._preparing: dict[str, int] = {}  # new documents of each key being prepared or waiting (event loop only)
        self._prepare_limiter: anyio.CapacityLimiter | None = None  # made on the event loop that uses it
        self._pending: dict[str, asyncio.Future[Prepared]] = {}  # documents being prepared, by text
        self.plans: OrderedDict[tuple[Any, ...], tuple[Plan, int]] = OrderedDict()  # used from the event loop only

    # ------------------------------------------------------------------------------------------- routes

    def routes(self) -> list[BaseRoute]:
        out: list[BaseRoute] = [
            # Every method reaches the endpoint, whose 405 has the GraphQL error shape (api.app fixes the router's
            # Allow for the others).
            Route(path, self._endpoint(api), methods=ALL_METHODS, name=f"graphql-{api}") for path, api in PATHS.items()
        ]
        for path in PATHS:
            out.extend(missing_key_routes(path, graphql=True))
        out.append(Route("/readyz", self.readyz, methods=["GET"]))
        out.append(Mount(ASSETS, app=StaticFiles(directory=STATIC / "graphiql"), name="graphiql-assets"))
        return out

    def _endpoint(self, api: str) -> Any:
        async def endpoint(request: Request) -> Response:
            return await self.handle(request, api)

        return endpoint

    async def readyz(self, request: Request) -> JSONResponse:
        snap = self.snapshots.current
        if snap is None:
            return JSONResponse({"status": "not ready", "reason": self.snapshots.error}, status_code=503)
        # A file of the set cut short or overwritten: the requests that read it fail. One deleted (or made
        # unreadable) is still read through the open file: ready, with a warning (every replica reads the same
        # files, and a load balancer would drop them all for a set they still serve).
        damage = snap.damage()
        if damage is not None and not damage[1]:
            return JSONResponse({"status": "not ready", "reason": damage[0]}, status_code=503)
        # Metering down (Redis, Postgres) means every metered request gets 503: not ready, so a load balancer
        # sends the traffic to another instance.
        problem = await self.state.access.problem()
        if problem is not None:
            return JSONResponse({"status": "not ready", "reason": problem}, status_code=503)
        ready = {"status": "ready", "snapshot": snap.name, "articles": snap.articles, "events": snap.events}
        return JSONResponse(ready if damage is None else {**ready, "warning": damage[0]})

    # ------------------------------------------------------------------------------------------- requests

    async def handle(self, request: Request, api: str) -> Response:
        access = self.state.access
        caller: Caller | None = None
        charge: Charge | None = None
        try:
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                # The key is checked here too: an explorer that opens for a bad key fails on every query it sends.
                try:
                    await access.check(request.path_params["accessKey"], api)
                except ApiError as err:
                    page = f"<!doctype html><title>cryptowire: {err.code}</title><p>{html.escape(err.message)}</p>"
                    return HTMLResponse(page, status_code=err.status, headers={**err.headers, **EXPLORER_HEADERS})
                return HTMLResponse(GRAPHIQL_HTML, headers=EXPLORER_HEADERS)
            if request.method != "POST":
                raise ApiError(
                    405, "METHOD_NOT_ALLOWED",
                    "send queries with POST and Content-Type: application/json; open this URL in a browser "
                    "(GET, Accept: text/html) for the GraphiQL explorer", {"Allow": ALLOW},
                )
            # The key first: an unknown key must not buy parsing and validation (up to ~0.2 s of CPU per document).
            caller = await access.check(request.path_params["accessKey"], api)
            query, variables, operation_name = await self._read(request)
            prepared = self.documents.lookup(query)
            if prepared is None:  # parse and validate off the event loop
                prepared = await self._prepare(caller, query)
            # The snapshot is held from planning on: its cost, what it lacks and the answer all come from the same one.
            with self.snapshots.acquire() as snap:
                plan, cost = self._plan(prepared, query, variables, operation_name, snap)
                if plan.needs_snapshot and snap is None:
                    raise ApiError(
                        503, "NOT_READY", "no serving snapshot is loaded yet: run `cryptowire materialize` on the "
                        "writer machine (on an API machine, copy the writer's snapshots/ here, parts first)",
                        {"Retry-After": "5"},
                    )
                gaps, shown = (snap.gaps, snap.name) if snap is not None and plan.needs_snapshot else (frozenset(), "")
                if gaps:  # a snapshot of an older cryptowire: a field it cannot answer is refused, free
                    older.refuse(plan, shown, gaps)
                if snap is not None and plan.checks_snapshot:
                    self._check_with_snapshot(plan, snap)
                charge = await access.reserve(caller, cost)
                usage = await access.usage(caller) if plan.needs_usage else None
                outcome = await self._execute(plan, snap, usage)
                if snap is not None and _failed_here(outcome):
                    damage = snap.damage()  # a read error from a damaged part says what is wrong, not "logged"
                    if damage is not None:
                        raise ApiError(503, "NOT_READY", damage[0], {"Retry-After": "5"})
            if outcome.bad_input or outcome.data is None:  # the caller's mistake, or ours (a 500): free
                await access.refund(charge)
                charge = replace(charge, cost=0)
            status = 200 if outcome.data is not None else (400 if outcome.bad_input else 500)
            body: dict[str, Any] = {"data": outcome.data}
            if outcome.errors:
                body["errors"] = outcome.errors
            if outcome.data is not None:  # what the snapshot's age changed in this answer, and what the data cannot say
                notes = (older.notes(plan, shown, gaps) if gaps else []) + outcome.notes
                if notes:
                    body["extensions"] = {"notes": notes}
            return FastJSONResponse(body, status_code=status, headers=access.headers(caller, charge))
        except ApiError as err:
            if charge is not None:
                await access.refund(charge)
                charge = None
            return err.graphql_response(access.headers(caller, charge) if caller is not None else None)
        except Exception:
            log.exception("GraphQL request failed on %s", api)
            if charge is not None:
                await access.refund(charge)
            err = ApiError(500, "INTERNAL_SERVER_ERROR", "the request failed on our side; it was logged")
            return err.graphql_response()

    @staticmethod
    def _check_with_snapshot(plan: Plan, snap: Snapshot) -> None:
        """``check_with_snapshot`` (one small query per snapshot, then its memo: on the event loop); a read error
        from a damaged part says what is wrong, as the answer's own would."""
        try:
            with snap.reader() as reader:
                check_with_snapshot(plan, reader)
        except ApiError:
            raise
        except Exception:
            damage = snap.damage()
            if damage is None:
                raise
            raise ApiError(503, "NOT_READY", damage[0], {"Retry-After": "5"}) from None

    async def _prepare(self, caller: Caller, query: str) -> Prepared:
        """Parse and validate a document not seen before, in the one preparing thread; requests for a document
        already being prepared wait for it (a burst of one new query is one preparation, not a 429 each); a key that
        already has ``PREPARE_PER_KEY`` other documents in hand gets a free 429."""
        while (pending := self._pending.get(query)) is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request was cancelled
                # the request preparing it went away first: prepare it here (or wait for whoever took it over)
        waiting = self._preparing.get(caller.key_id, 0)
        if waiting >= PREPARE_PER_KEY:
            raise ApiError(
                429, "RATE_LIMITED",
                f"this key already has {PREPARE_PER_KEY} new query documents being parsed and validated (up to "
                "~0.2 s of CPU each, one at a time per server): send new documents one after another, and reuse a "
                "document with variables for values that change (a document seen before is answered at once); "
                "retry after the time in Retry-After", {"Retry-After": "1"},
            )
        if self._prepare_limiter is None:
            self._prepare_limiter = anyio.CapacityLimiter(PREPARE_THREADS)
        future: asyncio.Future[Prepared] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved, waiters or not
        self._pending[query] = future
        self._preparing[caller.key_id] = waiting + 1
        try:
            prepared = await anyio.to_thread.run_sync(self.documents.get, query, limiter=self._prepare_limiter)
            future.set_result(prepared)
            return prepared
        except Exception as exc:  # an error of the document (or ours): the waiters get it too
            future.set_exception(exc)
            raise
        finally:
            if not future.done():
                future.cancel()
            self._pending.pop(query, None)
            left = self._preparing[caller.key_id] - 1
            if left:
                self._preparing[caller.key_id] = left
            else:
                del self._preparing[caller.key_id]

    def _plan(
        self, prepared: Prepared, query: str, variables: dict[str, Any], operation_name: str | None,
        snap: Snapshot | None,
    ) -> tuple[Plan, int]:
        """Coerced variables, cost and planned root fields of a prepared document, cached by query, operation,
        variables, the snapshot's anchor and the root fields it makes free: a pure function of them, and pollers
        repeat the same request."""
        anchor = snap.facts.get("newest_dated") if snap is not None else None  # ends a range given by `since` alone
        free = older.free_roots(snap.gaps) if snap is not None else frozenset()  # what an older snapshot lacks
        key = (query, operation_name, json.dumps(variables, sort_keys=True), anchor, free)  # variables: from JSON
        found = self.plans.get(key)
        if found is not None and found[0].prepared is prepared:
            self.plans.move_to_end(key)
            return found
        operation = prepared.operation(operation_name)
        coerced = coerce_variables(operation, variables, prepared.fragments)
        cost = query_cost(operation, prepared.fragments, coerced, anchor, free)
        planned = (plan_operation(prepared, operation, coerced, variables), cost)
        self.plans[key] = planned
        while len(self.plans) > PLAN_CACHE_SIZE:
            self.plans.popitem(last=False)
        return planned

    async def _execute(self, plan: Any, snap: Snapshot | None, usage: dict[str, Any] | None) -> Outcome:
        """Answer from cached pages on the event loop when possible (a thread hop costs more than the work);
        anything that needs a DuckDB query runs in a worker thread (DuckDB releases the GIL meanwhile)."""
        if snap is None or not plan.needs_snapshot:
            return _run(plan, snap, usage, cache_only=False)
        if not plan.prepared.introspection:
            try:
                return _run(plan, snap, usage, cache_only=True)
            except CacheMiss:
                pass
        return await anyio.to_thread.run_sync(_run, plan, snap, usage, False)

    async def _read(self, request: Request) -> tuple[str, dict[str, Any], str | None]:
        content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            raise ApiError(
                415, "UNSUPPORTED_MEDIA_TYPE",
                f"send the query as JSON with Content-Type: application/json (got {content_type or 'none'!r})",
            )
        too_big = ApiError(413, "PAYLOAD_TOO_LARGE", f"the request body is over {MAX_BODY_BYTES // 1024} KB")
        body = await bodies.read(request, MAX_BODY_BYTES, too_big)
        try:
            payload = bodies.loads(body, object_pairs_hook=bodies.once_each)
        except ValueError as exc:
            raise ApiError(400, "BAD_REQUEST", f"malformed JSON body ({exc}): send {{\"query\": \"...\"}}") from None
        if not isinstance(payload, dict):
            raise ApiError(400, "BAD_REQUEST", 'the body must be a JSON object: {"query", "variables"?, "operationName"?}')
        query = payload.get("query")
        extensions = payload.get("extensions")
        if query is None and isinstance(extensions, dict) and "persistedQuery" in extensions:
            # Apollo's automatic persisted queries fall back to sending the text on this code.
            raise ApiError(400, "PERSISTED_QUERY_NOT_SUPPORTED",
                           "PersistedQueryNotSupported: persisted queries are not kept here; send the query text "
                           'in "query"')
        if not isinstance(query, str) or not query.strip():
            raise ApiError(400, "BAD_REQUEST", '"query" must be a non-empty string holding a GraphQL document')
        variables = payload.get("variables")
        if variables is None:
            variables = {}
        if not isinstance(variables, dict):
            raise ApiError(400, "BAD_REQUEST", '"variables" must be a JSON object (or absent)')
        operation_name = payload.get("operationName")
        if operation_name is not None and not isinstance(operation_name, str):
            raise ApiError(400, "BAD_REQUEST", '"operationName" must be a string (or absent)')
        return query, variables, operation_name or None


def _failed_here(outcome: Outcome) -> bool:
    return any(e.get("extensions", {}).get("code") == "INTERNAL_SERVER_ERROR" for e in outcome.errors)


def _run(plan: Any, snap: Snapshot | None, usage: dict[str, Any] | None, cache_only: bool) -> Outcome:
    if snap is None:
        return execute_plan(plan, Context(reader=None, usage=usage))
    with snap.reader() as reader:
        reader.cache_only = cache_only
        return execute_plan(plan, Context(reader=reader, usage=usage))


# --------------------------------------------------------------------------------------------- component API

_KEY = "news"


def routes(state: Any) -> list[BaseRoute]:
    component = NewsComponent(state)
    state.extras[_KEY] = component
    return component.routes()


async def startup(state: Any) -> None:
    await state.extras[_KEY].snapshots.start()


async def shutdown(state: Any) -> None:
    await state.extras[_KEY].snapshots.stop()
