"""Event ids: ``pevt_`` + 20 base62 characters of a SHA-256 over what defines the event.

Only the question's defining fields go in (asset, kind, comparator, threshold, resolution time, and for
listings / launches the venue or product), never the article's wording, so that re-deriving gives the same id
and an edited article does not change it.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from pipeline.events.numbers import canonical_number

ID_PREFIX = "pevt_"
ID_RE = re.compile(r"^pevt_[A-Za-z0-9]{20}$")
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_LENGTH = 20
_SCHEME = "v1"  # bump only with a migration that rewrites stored ids


def event_key(
    asset: str,
    kind: str,
    comparator: str | None,
    threshold: float | None,
    date: datetime,
    subject: str | None = None,
) -> str:
    """The canonical text an id is hashed from (exposed for debugging and tests)."""
    parts = [
        _SCHEME,
        asset.strip().upper(),
        kind.strip().lower(),
        (comparator or "").strip().lower(),
        "" if threshold is None else canonical_number(threshold),
        date.strftime("%Y-%m-%dT%H:%M:%S"),
    ]
    if subject:
        parts.append(slug(subject))
    return "|".join(parts)


def event_id(
    asset: str,
    kind: str,
    comparator: str | None,
    threshold: float | None,
    date: datetime,
    subject: str | None = None,
) -> str:
    """``pevt_`` + exactly 20 characters of [0-9A-Za-z], deterministic in its arguments."""
    if not asset or not kind:
        raise ValueError(f"event_id needs an asset and a kind (got asset={asset!r}, kind={kind!r})")
    digest = hashlib.sha256(event_key(asset, kind, comparator, threshold, date, subject).encode()).digest()
    n = int.from_bytes(digest, "big") % (len(_ALPHABET) ** _LENGTH)  # 62^20 ~ 2^119 ids
    chars = []
    for _ in range(_LENGTH):
        n, r = divmod(n, len(_ALPHABET))
        chars.append(_ALPHABET[r])
    return ID_PREFIX + "".join(reversed(chars))


def slug(text: str) -> str:
    """``"Pectra upgrade"`` -> ``"pectra-upgrade"``: the part of a name that identifies it."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
