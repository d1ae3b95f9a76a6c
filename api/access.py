"""The seam between the routes and access control / metering.

Every route does: ``caller = await access.check(key, api)`` (authenticate, API enabled, request rate), then, once
the cost is known and the input is valid, ``charge = await access.reserve(caller, cost)`` (atomic daily-allowance
check and charge), and ``await access.refund(charge)`` if the work fails for a reason that costs nothing.
``access.headers(caller, charge)`` gives the X-RateLimit-* / X-CU-* headers for the response.
"""

from __future__ import annotations

import hmac
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from accounts.apis import APIS, Caller, Charge
from api.errors import ApiError

__all__ = ["APIS", "KEYED_PREFIXES", "Access", "Caller", "Charge", "StaticKeys", "missing_key_routes"]
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# Every route that takes a key: the prefix, then the key as the last path segment. The access log redacts what
# follows a prefix, and the 404 of a path with more after the key says where the key goes.
KEYED_PREFIXES = ("/crypto-news/", "/prediction-events/", "/api/html-to-pdf/", "/api/usage/")


def missing_key_routes(template: str, graphql: bool) -> list[BaseRoute]:
    """``/crypto-news`` and ``/crypto-news/`` for ``template`` ``/crypto-news/{accessKey}``: a 401 in the API's own
    JSON shape that says the key is missing, instead of the router's bare text 404."""
    error = ApiError(
        401, "UNAUTHENTICATED",
        f"the access key is missing: call {template} with your key as the last path segment "
        "(`cryptowire keys create` makes one)",
    )

    async def endpoint(request: Request) -> Response:
        return error.graphql_response() if graphql else error.rest_response()

    base = template.rsplit("/", 1)[0]
    return [Route(path, endpoint, methods=ALL_METHODS) for path in (base, base + "/")]


class Access(Protocol):
    metered: bool  # whether calls are charged (StaticKeys: no); per-key caps on free failures apply only then
    async def check(self, key: str, api: str) -> Caller: ...
    async def reserve(self, caller: Caller, cost: int) -> Charge: ...
    async def refund(self, charge: Charge) -> None: ...
    def headers(self, caller: Caller | None, charge: Charge | None = None) -> dict[str, str]: ...
    async def usage(self, caller: Caller) -> dict[str, object]: ...
    async def problem(self) -> str | None: ...  # why metered requests would get 503 now (for /readyz), or None
    async def close(self) -> None: ...


class StaticKeys:
    """Access for tests and embedding: any of the given keys works, nothing is metered."""

    metered = False  # and every key is one caller ("static"): a per-key cap would be one cap for the server

    def __init__(self, keys: list[str]) -> None:
        self._keys = [k.encode() for k in keys if k]

    async def check(self, key: str, api: str) -> Caller:
        given = key.encode()
        ok = False
        for known in self._keys:  # compare against every key, in constant time
            ok |= hmac.compare_digest(given, known)
        if not ok:
            raise ApiError(401, "UNAUTHENTICATED", "unknown access key: pass a valid key as the last path segment")
        return Caller(key_id="static", plan="development", api=api)

    async def reserve(self, caller: Caller, cost: int) -> Charge:
        return Charge(caller=caller, cost=cost)

    async def refund(self, charge: Charge) -> None:
        return None

    def headers(self, caller: Caller | None, charge: Charge | None = None) -> dict[str, str]:
        return {"X-CU-Cost": str(charge.cost)} if charge else {}

    async def usage(self, caller: Caller) -> dict[str, object]:
        return {"plan": caller.plan, "cuUsedToday": 0, "cuRemainingToday": None, "cuLimit": None}

    async def problem(self) -> str | None:
        return None

    async def close(self) -> None:
        return None
