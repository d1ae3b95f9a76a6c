"""``GET /api/usage/{accessKey}?days=7``: a key's own usage — today's allowance, and CU per UTC day and per API.

The key authenticates the call (401 if unknown, revoked or rotated past its grace period) and counts against its request rate; it costs no CU.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from accounts.apis import USAGE_API
from accounts.limits import HISTORY_MAX_DAYS
from api.access import missing_key_routes
from api.errors import ApiError

PATH = "/api/usage/{accessKey}"
DEFAULT_DAYS = 7
MAX_DAYS = HISTORY_MAX_DAYS


def _days(request: Request) -> int:
    # A parameter given twice is refused, as the PDF endpoint refuses it: which one was meant is a guess.
    seen: set[str] = set()
    for name, _value in request.query_params.multi_items():
        if name in seen:
            example = f", for example ?days={DEFAULT_DAYS}" if name == "days" else ""
            raise ApiError(400, "BAD_REQUEST", f"`{name[:50]}` is given more than once; give it once{example}")
        seen.add(name)
    unknown = sorted(seen - {"days"})
    if unknown:  # a misspelt ?dayz=30 would answer the default week, as if asked for it
        raise ApiError(400, "BAD_REQUEST", f"unknown parameter `{unknown[0][:50]}`: the only one is `days`, for "
                       f"example ?days={DEFAULT_DAYS}")
    raw = request.query_params.get("days", str(DEFAULT_DAYS))
    # digits only: int() also takes "+7", " 7" and "7_0", which no documented form is
    days = int(raw) if raw.isascii() and raw.isdigit() else 0
    if not 1 <= days <= MAX_DAYS:
        raise ApiError(400, "BAD_REQUEST", f"days must be a whole number from 1 to {MAX_DAYS} (got {raw[:20]!r}); "
                       f"for example ?days={DEFAULT_DAYS}")
    return days


def routes(state: Any) -> list[BaseRoute]:
    access = state.access

    async def usage(request: Request) -> JSONResponse:
        caller = None
        try:
            caller = await access.check(request.path_params["accessKey"], USAGE_API)
            days = _days(request)
            if hasattr(access, "report"):  # the metered access; the development StaticKeys has no history
                body = await access.report(caller.key_id, days)
            else:
                body = {"id": caller.key_id, "plan": caller.plan, "today": await access.usage(caller), "days": []}
        except ApiError as exc:
            return exc.rest_response(access.headers(caller))
        return JSONResponse(body, headers=access.headers(caller))

    return [Route(PATH, usage, methods=["GET"]), *missing_key_routes(PATH, graphql=False)]
