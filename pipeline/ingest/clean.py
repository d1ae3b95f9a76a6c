"""Normalising what feeds publish: canonical URLs, HTML to plain text, dates to UTC.

Rules (the run-level rules are in ``pipeline/ingest/run.py``):

* **Canonical URL** — surrounding whitespace dropped; line breaks (with the indentation around them) and
  tabs inside removed, other inner spaces percent-encoded (what a browser does with a pasted URL); scheme and host lower-cased; default ports
  dropped; the fragment dropped; tracking parameters (``utm_*`` and :data:`TRACKING_PARAMS`) dropped, the
  other parameters kept in their order. Only ``http``/``https`` URLs qualify as article URLs.
* **Text** — a feed's ``description``/``content`` is HTML that the XML parser has already unescaped once.
  :func:`html_to_text` drops the markup (``script``/``style``/comments with their content), decodes HTML
  entities exactly once, removes CDATA markers left in the text by double-wrapped feeds, and collapses all
  whitespace (including U+00A0) to single spaces. "Decoded once" means once per layer: the XML source
  ``What&amp;#039;s`` becomes ``What&#039;s`` after XML parsing and ``What's`` after HTML decoding;
  ``&amp;amp;amp;`` (escaped three times by the publisher) stays ``&amp;`` — we never unescape in a loop.
* **Dates** — RFC 822 (``Fri, 12 Dec 2025 17:33:11 -0500``) and ISO 8601 / RFC 3339 first, then
  feedparser's date handlers for the odd formats; converted to UTC and cut to the second; a date without
  a time zone is taken as UTC.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

# Query parameters that only identify a campaign, a click or a referrer, never the article.
TRACKING_PARAMS = frozenset(
    {
        "fbclid", "gclid", "dclid", "gbraid", "wbraid", "msclkid", "yclid", "twclid", "ttclid", "li_fat_id",
        "igshid", "mc_cid", "mc_eid", "_hsenc", "_hsmi", "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id",
        "vero_conv", "wickedid", "rb_clickid", "s_cid", "ref", "ref_src", "ref_url", "referrer", "ncid",
        "cmpid", "sr_share", "spm", "guccounter", "guce_referrer", "guce_referrer_sig", "_ga", "_gl",
    }
)  # fmt: skip
TRACKING_PREFIXES = ("utm_", "pk_", "mtm_", "hsa_")

_DEFAULT_PORTS = {"http": "80", "https": "443"}
# scheme://host[:port]path?query#fragment with a plain host (no userinfo, no IPv6 literal).
_SIMPLE_URL = re.compile(r"(?i:(https?))://([A-Za-z0-9.-]+)(?::(\d{1,5}))?(/[^?#]*)?(?:\?([^#]*))?(?:#.*)?\Z")
_WRAPPED = re.compile(r"[ \t]*[\r\n][\s]*|\t")


def _strip_url(url: str) -> str:
    # Like a browser: trim, drop line breaks with the indentation around them (a re-serialised feed
    # wraps long URLs) and tabs, and percent-encode any space left inside.
    url = url.strip(" \t\n\r\f\v\x00\u00a0\ufeff")
    if "\n" in url or "\r" in url or "\t" in url:
        url = _WRAPPED.sub("", url)
    return url.replace(" ", "%20") if " " in url else url


def _is_tracking(key: str) -> bool:
    k = key.lower()
    return k in TRACKING_PARAMS or k.startswith(TRACKING_PREFIXES)


def canonical_url(url: str | None, base: str | None = None) -> str | None:
    """The article URL as we store and key it, or ``None`` when ``url`` is not an http(s) URL."""
    if not url:
        return None
    url = _strip_url(url)
    if not url:
        return None
    if base and not url.lower().startswith(("http://", "https://")):
        url = urljoin(_strip_url(base), url)
    m = _SIMPLE_URL.match(url)
    if m:  # the common case, without urlsplit's generality (and cost)
        scheme, host, port, path, query = m.groups()
        scheme, host = scheme.lower(), host.lower()
    else:
        try:
            parts = urlsplit(url)
            port_num = parts.port  # raises ValueError on a bad port
        except ValueError:
            return None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            return None
        host = parts.hostname.lower()  # .hostname drops userinfo (never part of an article's identity)
        if ":" in host:
            host = f"[{host}]"
        port = str(port_num) if port_num is not None else None
        path, query = parts.path, parts.query
    if port and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{int(port)}"
    if query:
        # Split by hand (not parse_qsl + urlencode) so kept parameters stay byte-for-byte as published.
        query = "&".join(p for p in query.split("&") if p and not _is_tracking(p.split("=", 1)[0]))
    return f"{scheme}://{host}{path or '/'}{'?' + query if query else ''}"


def clean_link(url: str | None, base: str | None = None) -> str | None:
    """A non-article link (an image): whitespace removed, made absolute; query and fragment kept."""
    if not url:
        return None
    url = _strip_url(url)
    if not url:
        return None
    if base and not url.lower().startswith(("http://", "https://", "//")):
        url = urljoin(_strip_url(base), url)
    elif url.startswith("//"):
        url = "https:" + url
    return url if url.lower().startswith(("http://", "https://")) else None


# --- HTML to text -------------------------------------------------------------------------------------
_DROPPED_TAGS = ("script", "style", "noscript", "template", "iframe", "object", "svg", "math")
_DROP_WITH_CONTENT = re.compile(
    rf"<!--.*?(?:-->|$)|<({'|'.join(_DROPPED_TAGS)})\b[^>]*>.*?(?:</\1\s*>|$)",
    re.IGNORECASE | re.DOTALL,
)
_DROP_HINT = re.compile(rf"<(?:!--|{'|'.join(_DROPPED_TAGS)})", re.IGNORECASE)
_CDATA_MARKERS = re.compile(r"<!\[CDATA\[|\]\]>", re.IGNORECASE)
# Tags that separate words when rendered; every other tag (a, b, span, ...) is removed without a gap.
_BLOCK = frozenset(
    "address article aside blockquote br caption dd div dl dt figcaption figure footer form h1 h2 h3 h4 h5 h6 "
    "header hr img li main nav ol p pre section table tbody td tfoot th thead tr ul video audio".split()
)
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9:-]*)[^>]*>|<![^>]*>|<\?[^>]*>")
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_HTMLISH = re.compile(r"</?[a-zA-Z][^>]*>|&#?[a-zA-Z0-9]+;")
_HAS_TEXT = re.compile(r"(?:\A|>)[^<]*?[^\s<]")


def _tag_sub(m: re.Match[str]) -> str:
    name = m.group(2)
    return " " if name and name.lower() in _BLOCK else ""


def has_text(fragment: str) -> bool:
    """Whether an HTML fragment has any text outside its tags (cheap: stops at the first)."""
    return bool(_HAS_TEXT.search(fragment))


def normalize_space(text: str) -> str:
    """All whitespace runs (any Unicode space, U+00A0 included) to one space; invisible characters removed."""
    if not text.isascii() and _INVISIBLE.search(text):
        text = _INVISIBLE.sub("", text)
    return " ".join(text.split())


def html_to_text(fragment: str | None) -> str:
    """Plain text of an HTML fragment: markup dropped, entities decoded once, whitespace normalised."""
    if not fragment:
        return ""
    text = fragment
    if "<" in text:
        if _DROP_HINT.search(text):
            text = _DROP_WITH_CONTENT.sub("", text)
        if "<![" in text:
            text = _CDATA_MARKERS.sub("", text)
        text = _TAG.sub(_tag_sub, text)
    elif "]]>" in text:
        text = text.replace("]]>", "")
    if "&" in text:
        text = html.unescape(text)
    return normalize_space(text)


def looks_like_html(text: str) -> bool:
    """feedparser's test for a title published as HTML: a tag or an entity in it."""
    return bool(_HTMLISH.search(text))


def text_field(value: str | None, *, is_html: bool | None = None) -> str:
    """A title-like field: HTML when declared so or when it looks like it, plain text otherwise."""
    if not value:
        return ""
    if is_html is None:
        is_html = looks_like_html(value)
    if is_html:
        return html_to_text(value)
    return normalize_space(_CDATA_MARKERS.sub("", value))


_IMG = re.compile(r"<img\b[^>]*?\bsrc\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+))", re.IGNORECASE)


def first_image(fragment: str | None, base: str | None = None) -> str | None:
    """``src`` of the first ``<img>`` in an HTML fragment (entities in it decoded once)."""
    if not fragment or "<img" not in fragment.lower():
        return None
    for m in _IMG.finditer(fragment):
        src = html.unescape(m.group(1) or m.group(2) or m.group(3) or "")
        if src.startswith("data:"):
            continue
        link = clean_link(src, base)
        if link:
            return link
    return None


def shorten(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


# --- dates --------------------------------------------------------------------------------------------
# The usual RFC 822 shape, read without email.utils (the odd ones still go through it).
_RFC822 = re.compile(
    r"(?:[A-Za-z]{3},?\s+)?(\d{1,2})\s+([A-Za-z]{3})\s+(\d{4})\s+(\d{1,2}):(\d{2})(?::(\d{2}))?\s+([+-]\d{4}|[A-Za-z]{1,3})\Z"
)
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_ZONES = {"GMT": 0, "UT": 0, "UTC": 0, "Z": 0, "EST": -300, "EDT": -240, "CST": -360, "CDT": -300,
          "MST": -420, "MDT": -360, "PST": -480, "PDT": -420}  # fmt: skip


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.replace(microsecond=0)


def parse_date(value: str | None) -> datetime | None:
    """A feed date as naive UTC, to the second; ``None`` when it cannot be read."""
    if not value:
        return None
    value = " ".join(value.split())
    if not value:
        return None
    m = _RFC822.match(value)
    if m:
        day, month, year, hh, mm, ss, zone = m.groups()
        mon = _MONTHS.get(month.lower())
        offset = _ZONES.get(zone.upper()) if zone[0] not in "+-" else None
        if zone[0] in "+-" and zone[1:].isdigit():
            offset = (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[3:5]))
        if mon and offset is not None:
            try:
                value_dt = datetime(int(year), mon, int(day), int(hh), int(mm), int(ss or 0))
            except ValueError:
                return None
            return value_dt - timedelta(minutes=offset)
    if value[:4].isdigit():
        iso = value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value
        try:
            return _to_utc(datetime.fromisoformat(iso))
        except ValueError:
            pass
    else:
        try:
            return _to_utc(parsedate_to_datetime(value))
        except (TypeError, ValueError, IndexError):
            pass
    return _parse_date_fallback(value)


def _parse_date_fallback(value: str) -> datetime | None:
    # feedparser knows many broken real-world formats (W3CDTF variants, Korean, Greek, Hungarian, ...).
    from feedparser.datetimes import _parse_date

    parsed = _parse_date(value)  # a UTC struct_time, or None
    if parsed is None:
        return None
    try:
        return datetime(*parsed[:6])
    except ValueError:
        return None
