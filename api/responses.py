"""JSON responses rendered by orjson: a page of 20 articles is ~16 KB of JSON, which the standard library takes
~135 µs to encode and orjson ~9 µs — a sixth of a cached page's whole server time (docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


class FastJSONResponse(JSONResponse):
    """Same output as Starlette's JSONResponse (compact, UTF-8); NaN and infinities become null."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
