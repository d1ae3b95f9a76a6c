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
    return _trim(re.sub(r"\s+", " ", text))


def _trim(text: str) -> str:
    """No leading dots (hidden files), no trailing dots, spaces or underscores."""
    return text.strip(" ._")


def _named(text: str) -> str:
    """The name without one trailing ``.pdf`` (in any case; the header adds it), cut at MAX_CHARS."""
    if text.lower().endswith(".pdf"):
        text = _trim(text[:-4])
    return _trim(text[:MAX_CHARS])


def default_name(host: str, today: dt.date | None = None) -> str:
    today = today or dt.datetime.now(dt.UTC).date()
    return _named(_clean(f"{host}-{today.isoformat()}", ascii_only=True)) or f"page-{today.isoformat()}"


def content_disposition(disposition: str, filename: str | None, host: str) -> tuple[str, str]:
    """Return (header value, the file name used). ``disposition`` is ``inline`` or ``attachment``."""
    if disposition not in ("inline", "attachment"):
        raise ValueError(f"disposition must be inline or attachment, not {disposition!r}")
    full = _named(_clean(filename, ascii_only=False)) if filename else ""
    full = full or default_name(host)
    # The fallback is the same name, folded to ASCII only where it is not (its `.pdf` was taken off once, above).
    fallback = full if full.isascii() else _clean(full, ascii_only=True) or default_name(host)
    name = f"{full}.pdf"
    value = f"{disposition}; filename=\"{fallback}.pdf\"; filename*=UTF-8''{quote(name, safe='')}"
    return value, name
