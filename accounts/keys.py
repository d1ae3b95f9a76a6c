"""Access keys: generation, hashing, display, and the key records the platform database stores.

A key is ``cw_live_`` + 32 URL-safe characters from ``secrets`` (192 bits). It is shown once, when created or
rotated; the database keeps only its SHA-256 (a fast hash is enough: the key is random, not a password, and the
hash runs on every request), the prefix and the last four characters for display.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_PREFIX = "cw_live_"
KEY_BYTES = 24  # 192 bits of randomness -> 32 URL-safe characters
KEY_LENGTH = len(KEY_PREFIX) + 32
# After `keys rotate`, the previous key keeps working this long, so clients can be moved to the new key.
ROTATION_GRACE_SECONDS = 24 * 3600


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def new_key_id() -> str:
    """A public, non-secret id for a key (stable across rotations): what `keys revoke ID` takes."""
    return "key_" + secrets.token_hex(6)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def well_formed(key: str) -> bool:
    """Cheap shape check before any lookup (the hash lookup rejects the rest). The format is public."""
    return len(key) == KEY_LENGTH and key.startswith(KEY_PREFIX)


def same_hash(a: str, b: str) -> bool:
    return hmac.compare_digest(a, b)  # both are ASCII hex digests


def display(prefix: str, last4: str) -> str:
    return f"{prefix}…{last4}"


@dataclass(frozen=True)
class KeyRecord:
    """One key as looked up on a request: its id, plan and enabled APIs, and when this secret stops working."""

    id: str
    name: str
    plan: str
    apis: tuple[str, ...]
    key_hash: str
    revoked: bool
    expires_at: float | None  # epoch seconds; set on the old secret by `keys rotate`

    def usable(self, now: float) -> bool:
        return not self.revoked and (self.expires_at is None or now < self.expires_at)
