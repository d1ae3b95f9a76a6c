"""JSON request bodies: what every endpoint checks before it reads a field."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request

from api.errors import ApiError

BODY_SECONDS = 30.0  # the whole request body; bodies here are at most a few KB


async def read(request: Request, limit: int, too_big: ApiError, within: float | None = None) -> bytearray:
    """The body, at most ``limit`` bytes (``too_big`` beyond), all of it within ``within`` seconds (408 after: a client
    that declares a length and sends a few bytes would hold the connection and its task for ever). A client that
    hangs up before it has sent the whole body gets a 400 it will never read: an ordinary event, not an internal
    failure (it was logged as one)."""
    body = bytearray()
    within = BODY_SECONDS if within is None else within
    try:
        async with asyncio.timeout(within):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise too_big
    except TimeoutError:
        # Connection: close, or the server would read the rest of the abandoned body as the next request
        raise ApiError(408, "BODY_TIMEOUT", f"the request body did not arrive within {within:g} s; send the whole "
                       "body at once", {"Connection": "close"}) from None
    except ClientDisconnect:
        raise ApiError(400, "INCOMPLETE_BODY", "the connection closed before the whole request body arrived; "
                       "send it again") from None
    return body


def once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing a key given twice (JSON parsers keep the last, a proxy or log may read the
    first: two readers of one body would see two requests)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"`{k[:50]}` is given more than once; give it once")
        out[k] = v
    return out


def loads(body: bytes | bytearray, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """The decoded body. `ValueError` says what is wrong: not JSON, not UTF-8, nested too deeply for the parser
    (a 500 otherwise), or a string holding a lone UTF-16 surrogate ("\\ud800" escaped without its pair: what a
    client sends when it cuts a string inside an emoji), which no database or URL can take. ``object_pairs_hook``
    as in `json.loads` (e.g. to refuse a key given twice)."""
    try:
        data = json.loads(body, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"the string {value[:40]!r} holds a lone UTF-16 surrogate (an escape such as \\ud800 without "
                    "its pair); send valid Unicode"
                ) from None
        elif isinstance(value, dict):
            stack.extend(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return data
