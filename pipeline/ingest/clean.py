"""Normalising what feeds publish: canonical URLs, HTML to plain text, dates to UTC.

Rules (the run-level rules are in ``pipeline/ingest/run.py``):

* **Canonical URL** — surrounding whitespace dropped; line breaks (with the indentation around them) and
  tabs inside removed, other inner spaces percent-encoded (what a browser does with a pasted URL); scheme and host lower-cased; default ports
  dropped; the fragment dropped; tracking parameters (``utm_*`` and :data:`TRACKING_PARAMS`) dropped, the
  other parameters kept in their order. Only ``http``/``https`` URLs qualify as article URLs.
  Every link and image URL an item keeps loses any ``user:password@`` (a relative one is joined onto the feed
  URL, which may carry them); control characters inside a URL are percent-encoded.
* **Text** — a feed's ``description``/``content`` is HTML that the XML parser has already unescaped once.
  :func:`html_to_text` drops the markup (``script``/``style``/comments with their content), decodes HTML
  entities exactly once, removes CDATA markers left in the text by double-wrapped feeds, and collapses all
  whitespace (including U+00A0) to single spaces. "Decoded once" means once per layer: the XML source
  ``What&amp;#039;s`` becomes ``What&#039;s`` after XML parsing and ``What's`` after HTML decoding;
  ``&amp;amp;amp;`` (escaped three times by the publisher) stays ``&amp;`` — we never unescape in a loop.
  A ``script``/``iframe``/``svg``/... element or a comment that is never closed loses only its opening tag,
  never the text after it.
  An RSS title is plain text unless it looks like HTML (a tag or an entity); then it is read as HTML, except
  that a bare ``<script>``, ``<iframe>``, ... that nothing closes is text ("Devs patch <iframe> bug" keeps its
  words; ``<p>``, ``<b>`` stay markup); Atom titles follow their ``type``. What becomes a tag only after the one decoding (``&amp;lt;script&amp;gt;``, escaped
  twice) stays in the title as literal text: the API serves JSON, and a page that shows titles escapes them.
  Control characters (C0 and C1 but tab, CR, LF; DEL) and ANSI escape sequences are removed from every
  text field an item keeps (title, summary, content HTML, authors, categories, guid).
  A character reference to a UTF-16 surrogate pair (``&#55357;&#56960;``) is the character; a lone
  surrogate, or a number beyond U+10FFFF, is U+FFFD; the rest of the document is read as usual.
* **Size limits** (``pipeline/ingest/parse.py``) — title 1,000 characters, summary 20,000, an author or
  category 200 (50 of each per item): cut at a word boundary with an ellipsis; content HTML 200,000, cut
  before a tag; a link or image URL over 2,048 is dropped, a longer guid replaced by its SHA-256. The feed's
  warning counts them ("over the size limits: 1 title cut, 1 url dropped").
* **Dates** — RFC 822 (``Fri, 12 Dec 2025 17:33:11 -0500``) and ISO 8601 / RFC 3339 first, then
  feedparser's date handlers for the odd formats; converted to UTC and cut to the second; a date without
  a time zone is taken as UTC. A date that falls outside years 1-9999 once moved to UTC, or has an offset
  no clock has (beyond ±14:00, or 60 minutes or more: ``+9999``, ``+25:00``), is unusable: the item alone
  gets an inferred date.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import quote, urljoin, urlsplit

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
# C0 and C1 control characters but tab, LF and CR (whitespace, handled where whitespace is), and DEL; plus whole
# ANSI escape sequences, so no "[2J" is left behind.
_CONTROL = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_URL_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Every sequence _CONTROL removes holds one of these: one character class is a fast scan of a long text.
_CONTROL_CHAR = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _strip_url(url: str) -> str:
    # Like a browser: trim, drop line breaks with the indentation around them (a re-serialised feed
    # wraps long URLs) and tabs, and percent-encode any space left inside.
    url = url.strip(" \t\n\r\f\v\x00\u00a0\ufeff")
    if "\n" in url or "\r" in url or "\t" in url:
        url = _WRAPPED.sub("", url)
    if not url.isprintable() and _URL_CONTROL.search(url):
        url = _URL_CONTROL.sub(lambda m: quote(m.group(0)), url)  # as a browser does
    return url.replace(" ", "%20") if " " in url else url


def drop_userinfo(url: str) -> str:
    """``url`` without ``user:password@``: a feed URL's credentials must never reach a stored or served link."""
    head, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, end)
    return f"{head}://{rest[at + 1:]}" if at >= 0 else url


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
    if not url.lower().startswith(("http://", "https://")):
        return None
    return drop_userinfo(url) if "@" in url else url


# --- HTML to text -------------------------------------------------------------------------------------
_DROPPED_TAGS = ("script", "style", "noscript", "template", "iframe", "object", "svg", "math")
_DROP_HINT = re.compile(rf"<(?:!--|{'|'.join(_DROPPED_TAGS)})", re.IGNORECASE)
_OPENERS: dict[tuple[str, ...], re.Pattern[str]] = {}
_CDATA_MARKERS = re.compile(r"<!\[CDATA\[|\]\]>", re.IGNORECASE)
# Tags that separate words when rendered; every other tag (a, b, span, ...) is removed without a gap.
_BLOCK = frozenset(
    "address article aside blockquote br caption dd div dl dt figcaption figure footer form h1 h2 h3 h4 h5 h6 "
    "header hr img li main nav ol p pre section table tbody td tfoot th thead tr ul video audio".split()
)
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9:-]*)[^>]*>|<![^>]*>|<\?[^>]*>")
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_HTMLISH = re.compile(r"</?[a-zA-Z][^>]*>|&#?[a-zA-Z0-9]+;")
_BARE_TAG = re.compile(r"<([a-zA-Z][a-zA-Z0-9]*)>")
_CLOSING_TAG = re.compile(r"</([a-zA-Z][a-zA-Z0-9]*)\s*>")
_VOID = frozenset({"br", "hr", "img", "wbr"})
_HAS_TEXT = re.compile(r"(?:\A|>)[^<]*?[^\s<]")


def _tag_sub(m: re.Match[str]) -> str:
    name = m.group(2)
    return " " if name and name.lower() in _BLOCK else ""


def drop_blocks(fragment: str, tags: tuple[str, ...]) -> str:
    """Comments and ``tags`` elements removed with their content. An element or comment that is never closed
    loses only its opening tag: "Devs patch <iframe> bug ..." must not lose everything after the tag. Repeated
    until nothing changes: removing one opener may join its neighbours into another ("<scr<script>ipt>")."""
    while True:
        out = _drop_blocks_once(fragment, tags)
        if out == fragment:
            return out
        fragment = out


def _drop_blocks_once(fragment: str, tags: tuple[str, ...]) -> str:
    opener = _OPENERS.get(tags)
    if opener is None:
        opener = _OPENERS[tags] = re.compile(rf"<!--|<({'|'.join(tags)})\b[^>]*>", re.IGNORECASE)
    out: list[str] = []
    pos = 0
    unclosed: set[str] = set()  # no closing tag after one opener means none after a later one either
    while m := opener.search(fragment, pos):
        out.append(fragment[pos:m.start()])
        name = (m.group(1) or "!--").lower()
        end = -1
        if name not in unclosed:
            if name == "!--":
                end = fragment.find("-->", m.end())
                end = end + 3 if end >= 0 else -1
            else:
                close = re.compile(rf"</{name}\s*>", re.IGNORECASE).search(fragment, m.end())
                end = close.end() if close else -1
            if end < 0:
                unclosed.add(name)
        pos = end if end >= 0 else m.end()
    out.append(fragment[pos:])
    return "".join(out)


def has_text(fragment: str) -> bool:
    """Whether an HTML fragment has any text outside its tags (cheap: stops at the first)."""
    return bool(_HAS_TEXT.search(fragment))


def normalize_space(text: str) -> str:
    """All whitespace runs (any Unicode space, U+00A0 included) to one space; invisible characters removed."""
    if not text.isascii() and _INVISIBLE.search(text):
        text = _INVISIBLE.sub("", text)
    text = " ".join(text.split())
    return text if text.isprintable() else " ".join(drop_controls(text).split())


def drop_controls(text: str) -> str:
    """``text`` without control characters (but tab, LF, CR) and ANSI escape sequences: stored text is shown in
    terminals and pages, where they clear screens or hide text."""
    return _CONTROL.sub("", text) if _CONTROL_CHAR.search(text) else text


def html_to_text(fragment: str | None) -> str:
    """Plain text of an HTML fragment: markup dropped, entities decoded once, whitespace normalised."""
    if not fragment:
        return ""
    text = fragment
    if "<" in text:
        if _DROP_HINT.search(text):
            text = drop_blocks(text, _DROPPED_TAGS)
        if "<![" in text:
            text = _CDATA_MARKERS.sub("", text)
        text = _TAG.sub(_tag_sub, text)
    elif "]]>" in text:
        text = text.replace("]]>", "")
    if "&" in text:
        text = html.unescape(fix_charrefs(text))
    return normalize_space(text)


# A numeric character reference that may name no character: a UTF-16 half (D800-DFFF, 55296-57343) or a number
# beyond U+10FFFF. The XML parser rejects them and feedparser crashes on them (UnicodeEncodeError).
_ODD_REF = r"&#(?:[xX]0*([dD][89a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{5,})|0*(5[5-7]\d{3}|\d{7,}));"
_ODD_REFS = re.compile(_ODD_REF)
_ODD_REFS_BYTES = re.compile(_ODD_REF.encode())


def _code(m: re.Match[str]) -> int:
    hex_digits, digits = m.groups()
    text = hex_digits or digits
    if len(text) > 8:
        return -1
    return int(text, 16) if hex_digits else int(text)


def fix_charrefs(text: str) -> str:
    """A reference to a high then a low UTF-16 half (``&#55357;&#56960;``) becomes one to the character they
    encode; any other half, or a number beyond Unicode, becomes U+FFFD."""
    if "&#" not in text:
        return text
    out: list[str] = []
    pos = 0
    for m in _ODD_REFS.finditer(text):
        if m.start() < pos:
            continue  # the low half of a pair written just before
        code, end = _code(m), m.end()
        low = _ODD_REFS.match(text, end) if 0xD800 <= code < 0xDC00 else None
        if low and 0xDC00 <= (second := _code(low)) < 0xE000:
            code, end = 0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00), low.end()
        elif not 0 <= code <= 0x10FFFF or 0xD800 <= code < 0xE000:
            code = 0xFFFD
        out += [text[pos:m.start()], f"&#x{code:X};"]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def fix_document_charrefs(data: bytes) -> bytes:
    """:func:`fix_charrefs` on a UTF-8 document (a cheap scan when it has none, as nearly all have)."""
    if b"&#" not in data or not _ODD_REFS_BYTES.search(data):
        return data
    return fix_charrefs(data.decode("utf-8", "replace")).encode("utf-8")


def looks_like_html(text: str) -> bool:
    """feedparser's test for a title published as HTML: a tag or an entity in it."""
    return bool(_HTMLISH.search(text))


def _keep_mentions(title: str) -> str:
    """A bare ``<script>``, ``<iframe>``, ... that nothing closes, in a title, names a tag ("Devs patch <iframe>
    bug"): escaped, so it is kept as text; ordinary markup (``<p>``, ``<b>``, which need no closing tag) and a tag
    with attributes or closed later stay markup."""
    closes: dict[str, int] = {}
    for m in _CLOSING_TAG.finditer(title):
        closes[m.group(1).lower()] = m.start()
    return _BARE_TAG.sub(
        lambda m: m.group(0)
        if (name := m.group(1).lower()) not in _DROPPED_TAGS or closes.get(name, -1) > m.start()
        else "&lt;" + m.group(0)[1:],
        title,
    )


def text_field(value: str | None, *, is_html: bool | None = None) -> str:
    """A title-like field: HTML when declared so or when it looks like it, plain text otherwise."""
    if not value:
        return ""
    if is_html is None:
        if looks_like_html(value):
            return html_to_text(_keep_mentions(value) if "<" in value else value)
        is_html = False
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
    r"(?:[A-Za-z]{3},?\s+)?(\d{1,2})\s+([A-Za-z]{3})\s+(\d{4})\s+(\d{1,2}):(\d{2})(?::(\d{2}))?\s+"
    r"([+-]\d\d:?\d\d|[A-Za-z]{1,4})\Z"
)
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_ZONES = {"GMT": 0, "UT": 0, "UTC": 0, "Z": 0, "EST": -300, "EDT": -240, "CST": -360, "CDT": -300,
          "MST": -420, "MDT": -360, "PST": -480, "PDT": -420,
          # not RFC 822's, but written by real feeds (an unknown name is read as UTC, off by hours at most)
          "WET": 0, "WEST": 60, "BST": 60, "CET": 60, "CEST": 120, "EET": 120, "EEST": 180, "MSK": 180,
          "SGT": 480, "HKT": 480, "JST": 540, "KST": 540, "AEST": 600, "AEDT": 660, "NZST": 720, "NZDT": 780}  # fmt: skip


# A zone like +9999 or +25:00 is no real clock, and read as one it moves the date by days: such a date is unusable.
MAX_OFFSET_MINUTES = 14 * 60  # the widest real time zones are -12:00 and +14:00
# A numeric zone at the end: "+0100", "-05:00" ("2026-05-11" is not one).
_OFFSET = re.compile(r"[+-](\d\d):?(\d\d)\Z")


def _real_offset(hours: int, minutes: int) -> bool:
    return minutes < 60 and hours * 60 + minutes <= MAX_OFFSET_MINUTES


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)  # OverflowError near year 1 or 9999
    return value.replace(microsecond=0)


def parse_date(value: str | None) -> datetime | None:
    """A feed date as naive UTC, to the second; ``None`` when it cannot be read."""
    if not value:
        return None
    value = " ".join(value.split())
    if not value:
        return None
    try:
        return _read_date(value)
    except (OverflowError, ValueError):  # out of datetime's range once moved to UTC (0001-01-01 +01:00)
        return None


def _read_date(value: str) -> datetime | None:
    m = _RFC822.match(value)
    if m:
        day, month, year, hh, mm, ss, zone = m.groups()
        mon = _MONTHS.get(month.lower())
        offset = _ZONES.get(zone.upper()) if zone[0] not in "+-" else None
        if zone[0] in "+-":  # "+0200", or "+02:00" (which email.utils would drop, reading the time as UTC)
            hours, minutes = int(zone[1:3]), int(zone[-2:])
            if not _real_offset(hours, minutes):
                return None
            offset = (1 if zone[0] == "+" else -1) * (hours * 60 + minutes)
        if mon and offset is not None:
            try:
                value_dt = datetime(int(year), mon, int(day), int(hh), int(mm), int(ss or 0))
            except ValueError:
                return None
            return value_dt - timedelta(minutes=offset)
    if (m := _OFFSET.search(value)) and not _real_offset(int(m.group(1)), int(m.group(2))):
        return None  # the readers below would shift the date by it, or ignore it
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


_ZONE_AT_END = re.compile(r"(?:(?P<sign>[+-])(?P<hh>\d\d):?(?P<mm>\d\d)|\s(?P<name>[A-Za-z]{1,4})|(?<=\d)(?P<z>[Zz]))\Z")


def date_offset(value: str | None) -> int | None:
    """The UTC offset, in minutes, a feed date is written in ("+09:00" -> 540, "EDT" -> -240, "Z" -> 0); None
    without one. Relative phrases ("tomorrow", "by year-end") count from the publisher's date, not the UTC one."""
    m = _ZONE_AT_END.search(" ".join((value or "").split()))
    if m is None:
        return None
    if m["z"]:
        return 0
    if m["name"]:
        return _ZONES.get(m["name"].upper())
    hours, minutes = int(m["hh"]), int(m["mm"])
    if not _real_offset(hours, minutes):
        return None
    return (1 if m["sign"] == "+" else -1) * (hours * 60 + minutes)


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
