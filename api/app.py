"""The ASGI application: assembles the components' routes around one shared state."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from api import metrics, news, overview, pdf, usage
from api.access import KEYED_PREFIXES, Access
from api.errors import ApiError
from api.metrics import MetricsMiddleware
from warehouse.config import Settings, get_settings

# Each component module exposes ``routes(state) -> list[BaseRoute]`` and may expose async
# ``startup(state)`` / ``shutdown(state)``.
COMPONENTS = (news, pdf, usage, overview, metrics)

# The router's own refusals (no such path, a method the route does not take) in the API's JSON error shape.
_ROUTER_ERRORS = {
    404: ("NOT_FOUND", "no such endpoint: see / for the API's endpoints (/crypto-news/{accessKey}, "
                       "/prediction-events/{accessKey}, /api/html-to-pdf/{accessKey}, /api/usage/{accessKey})"),
    405: ("METHOD_NOT_ALLOWED", "this endpoint does not take {method}"),
}
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Endpoints that take only GET and POST and refuse the rest of their route's methods (HEAD at least) themselves.
_GET_POST_PREFIXES = ("/api/html-to-pdf/", "/crypto-news/", "/prediction-events/")


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code, message = _ROUTER_ERRORS.get(exc.status_code, ("HTTP_ERROR", str(exc.detail)))
    message = message.replace("{method}", request.method)
    prefix = next((p for p in KEYED_PREFIXES if request.url.path.startswith(p)), None)
    if exc.status_code == 404 and prefix:  # something after the key (or a key with a slash in it)
        message = (f"nothing may follow the access key (not even a slash): call {prefix}{{accessKey}} with the key "
                   "as the last path segment")
    headers = dict(exc.headers or {})
    if "Allow" in headers:  # the router lists a set, in no fixed order
        allowed = set(headers["Allow"].split(", "))
        if request.url.path.startswith(_GET_POST_PREFIXES):
            allowed &= {"GET", "POST"}
        headers["Allow"] = ", ".join(m for m in _METHOD_ORDER if m in allowed)
        message += f"; use {headers['Allow'].replace(', ', ' or ')}"
    return ApiError(exc.status_code, code, message, headers).rest_response()


@dataclass
class AppState:
    settings: Settings
    access: Access
    extras: dict[str, Any] = field(default_factory=dict)  # per-component state (snapshots, browser pool, ...)


def default_access(settings: Settings) -> Access:
    from accounts import build_access

    return build_access(settings)


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


def create_app(settings: Settings | None = None, access: Access | None = None) -> Starlette:
    settings = settings or get_settings()
    state = AppState(settings=settings, access=access or default_access(settings))
    components = COMPONENTS

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for c in components:
            if hasattr(c, "startup"):
                await c.startup(state)
        # Everything built so far lives as long as the process: freezing it keeps the collector's full passes,
        # which would otherwise walk all of it, from stalling requests (the p99 of a busy server).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()  # let the shutdown free it all (bindings such as DuckDB's report leaks otherwise)
            for c in reversed(components):
                if hasattr(c, "shutdown"):
                    await c.shutdown(state)
            await state.access.close()

    routes: list[Any] = [Route("/healthz", healthz)]
    for c in components:
        routes.extend(c.routes(state))
    # Outermost of the app's own middleware: it times the whole request and sees the route the router chose.
    middleware = [Middleware(MetricsMiddleware, state=state)]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={HTTPException: http_error})
    app.router.redirect_slashes = False  # "/crypto-news/KEY/" is the documented 404, not a redirect carrying the key
    app.state.cw = state
    return app
