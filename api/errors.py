"""One error type for every API refusal, rendered as GraphQL errors or as a REST JSON body."""

from __future__ import annotations

from dataclasses import dataclass, field

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
        return JSONResponse(
            {"error": {"code": self.code, "message": self.message}},
            status_code=self.status,
            headers={**(extra_headers or {}), **self.headers},
        )

    def graphql_response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(
            {"data": None, "errors": [{"message": self.message, "extensions": {"code": self.code}}]},
            status_code=self.status,
            headers={**(extra_headers or {}), **self.headers},
        )
