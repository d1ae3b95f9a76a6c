"""A safe ``Content-Disposition`` (RFC 6266 / RFC 8187): whatever the user sends, the header stays one clean line.

The name keeps letters, digits and ``-_.()+,`` and spaces; everything else (quotes, CR/LF, ``/``, ``\\``, ``;``,
control and format characters) becomes ``_``. ``filename`` is its ASCII fallback, ``filename*`` the UTF-8 form.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from urllib.parse import quote

MAX_CHARS = 100
_KEEP_PUNCT = set("-_.()+, ")
_UNDERSCORES = re.compile(r"_{2,}")


def _clean(name: str, ascii_only: bool) -> str:
    name = unicodedata.normalize("NFKC", name)
    if ascii_only:
        name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    out = []
    for ch in name:
        cat = unicodedata.category(ch)
        ok = ch in _KEEP_PUNCT or (cat[0] in "LN" and (ch.isascii() or not ascii_only))
        out.append(ch if ok else "_")
    text = _UNDERSCORES.sub("_", "".join(out))
    text = re.sub(r"\s+", " ", text).strip(" ._")  # no leading dots (hidden files), no trailing dots/spaces
    if text.lower().endswith(".pdf"):
        text = text[:-4].rstrip(" ._")
    return text[:MAX_CHARS].rstrip(" ._")


def default_name(host: str, today: dt.date | None = None) -> str:
    today = today or dt.datetime.now(dt.UTC).date()
    return _clean(f"{host}-{today.isoformat()}", ascii_only=True) or f"page-{today.isoformat()}"


def content_disposition(disposition: str, filename: str | None, host: str) -> tuple[str, str]:
    """Return (header value, the file name used). ``disposition`` is ``inline`` or ``attachment``."""
    if disposition not in ("inline", "attachment"):
        raise ValueError(f"disposition must be inline or attachment, not {disposition!r}")
    full = _clean(filename, ascii_only=False) if filename else ""
    full = full or default_name(host)
    fallback = _clean(full, ascii_only=True) or default_name(host)
    name = f"{full}.pdf"
    value = f"{disposition}; filename=\"{fallback}.pdf\"; filename*=UTF-8''{quote(name, safe='')}"
    return value, name
