"""One error type for every API refusal (``accounts.errors.ApiError``, re-exported: the access checks raise it too)."""

from accounts.errors import ApiError

__all__ = ["ApiError"]
