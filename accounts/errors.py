"""One error type for every API refusal, rendered as GraphQL errors or as a REST JSON body.

It lives here because the access checks (``accounts.access``) raise it (401, 403, 429, 503); ``api.errors``
re-exports it for the routes. Starlette is imported only when a response is rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.responses import JSONResponse


@dataclass
class ApiError(Exception):
    status: int
    code: str  # machine-readable, e.g. UNAUTHENTICATED, RATE_LIMITED, QUOTA_EXCEEDED, BAD_REQUEST
    message: str  # says what was wrong and what to do
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def rest_response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        from starlette.responses import JSONResponse

        return JSONResponse(
            {"error": {"code": self.code, "message": self.message}},
            status_code=self.status,
            headers={**(extra_headers or {}), **self.headers},
        )

    def graphql_response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        from starlette.responses import JSONResponse

        return JSONResponse(
            {"data": None, "errors": [{"message": self.message, "extensions": {"code": self.code}}]},
            status_code=self.status,
            headers={**(extra_headers or {}), **self.headers},
        )
