"""The feeds file: a YAML document with a top-level ``feeds:`` list of sources.

.. code-block:: yaml

    feeds:
      - name: CoinDesk
        url: https://www.coindesk.com/arc/outboundfeeds/rss/
        language: en          # optional; otherwise the feed's own <language>
      - name: Local sample
        url: sample/coindesk.xml   # a path (relative to this file) or a file: URL
        enabled: false        # optional, default true
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import yaml

ALLOWED_KEYS = ("name", "url", "enabled", "language")
# user:password@ (or a token@) in a URL, up to the netloc's last "@": what redact() hides
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s]*@")
# "localhost", "1.2.3.4" or "example.com", with or without a port: a path's first part that is a web host
_HOST_LIKE = re.compile(r"(?i)^(localhost|[a-z0-9-]+(\.[a-z0-9-]+)*\.[a-z]{2,}|\d+(\.\d+){3})(:\d+)?$")


def redact(text: str, mask: str = "***@") -> str:
    """``text`` with the credentials of every URL in it shown as ``mask`` (``""``: dropped): they are sent, never
    shown nor stored."""
    return _USERINFO.sub(lambda m: m[1] + mask, text)


@dataclass(frozen=True)
class Feed:
    name: str
    url: str  # http(s) URL, or a file: URL (local paths are turned into absolute file: URLs); credentials redacted
    enabled: bool = True
    language: str | None = None
    # The url as configured, credentials included: for the request only (never logged, shown nor stored).
    fetch_url: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        full = self.fetch_url or self.url
        object.__setattr__(self, "fetch_url", full)
        object.__setattr__(self, "url", redact(full))


class FeedsFileError(ValueError):
    """A feeds file that cannot be used; the message names the file, the entry and what is wrong."""

    def __init__(self, path: Path, problem: str, entry: str | None = None) -> None:
        where = f"{path}" + (f", {entry}" if entry else "")
        super().__init__(f"feeds file {where}: {problem}")
        self.path = path
        self.entry = entry
        self.problem = problem


def local_path(url: str) -> Path | None:
    """The file a ``file:`` URL points at, or ``None`` for any other URL."""
    if not url.lower().startswith("file:"):
        return None
    parts = urlsplit(url)
    return Path(url2pathname(unquote(parts.path)))


def _resolve_url(raw: str, base_dir: Path) -> str:
    """http(s) URLs unchanged; local paths and ``file:`` URLs to absolute ``file:`` URLs."""
    lower = raw.lower()
    shown = redact(raw)
    if lower.startswith(("http://", "https://")):
        try:
            parts = urlsplit(raw)
        except ValueError as exc:  # "http://[::1/feed"
            raise ValueError(f"url {shown!r} is not a valid URL ({exc})") from None
        if not parts.hostname:
            raise ValueError(f"url {shown!r} has no host")
        try:
            parts.port  # noqa: B018 - urlsplit checks the port only when asked
        except ValueError:
            raise ValueError(f"url {shown!r} has a port that is not a number in 0-65535") from None
        return raw
    if lower.startswith("file:"):
        parts = urlsplit(raw)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URL {shown!r} names a remote host; only local files are read")
        path = Path(url2pathname(unquote(parts.path)))
    elif "://" in raw or lower.startswith(("mailto:", "javascript:", "data:")):
        raise ValueError(f"url {shown!r} has an unsupported scheme; use http, https, file or a local path")
    else:
        path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    head, slash, _ = raw.partition("/")
    if (slash or ":" in head) and _HOST_LIKE.match(head) and not path.exists():  # "127.0.0.1:8080/feed"
        raise ValueError(f"url {shown!r} has no scheme, and there is no such file {str(path)!r}: for a web feed "
                         f"write it with its scheme, http://{shown} (or https://)")
    return path.resolve().as_uri()


def _same_feed_key(url: str) -> str:
    """What tells two feed URLs apart: not the case of the scheme and host, a default port, a #fragment (never
    sent) nor credentials (stored redacted, two feeds would share one row of validators)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return url.split("#", 1)[0]
    host = (parts.hostname or "").rstrip(".")
    host = f"[{host}]" if ":" in host else host
    port = parts.port
    default = {"http": 80, "https": 443}[parts.scheme.lower()]
    netloc = host if port in (None, default) else f"{host}:{port}"
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{netloc}{parts.path or '/'}{query}"


def _name_problem(name: str) -> str | None:
    """Why a feed name cannot be shown on one line as it is (a line break, a terminal escape, a bidi override)."""
    for i, ch in enumerate(name):
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return (f"`name` holds a control character (U+{ord(ch):04X}) at position {i + 1}; "
                    "write the name as plain text on one line")
    return None


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # type: ignore[override]
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (lines {seen[key]} and {line}); keep one",
                    key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _entry_label(index: int, raw: Any) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("name"), str) and raw["name"].strip():
        return f"entry {index + 1} ({raw['name'].strip()!r})"
    return f"entry {index + 1}"


def load_feeds(path: Path) -> list[Feed]:
    """Read and validate a feeds file; relative paths in it are resolved against its folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FeedsFileError(path, "no such file (pass --feeds FILE or set CRYPTOWIRE_FEEDS_FILE)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FeedsFileError(path, f"cannot be read: {exc}") from None
    try:
        doc = yaml.load(text, Loader=_Loader)  # a SafeLoader that refuses duplicate keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise FeedsFileError(path, f"is not valid YAML{at}: {problem}") from None
    if not isinstance(doc, dict) or "feeds" not in doc:
        raise FeedsFileError(path, "expected a top-level `feeds:` list (see feeds.yaml for an example)")
    items = doc["feeds"]
    if not isinstance(items, list):
        raise FeedsFileError(path, f"`feeds:` must be a list of sources, got {type(items).__name__}")
    if not items:
        raise FeedsFileError(path, "`feeds:` is empty; list at least one source with a name and a url")

    feeds: list[Feed] = []
    names: dict[str, str] = {}
    urls: dict[str, str] = {}
    for i, raw in enumerate(items):
        label = _entry_label(i, raw)
        if not isinstance(raw, dict):
            raise FeedsFileError(path, "must be a mapping with `name` and `url`", label)
        unknown = sorted(str(k) for k in raw if k not in ALLOWED_KEYS)
        if unknown:
            raise FeedsFileError(
                path, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(ALLOWED_KEYS)}", label
            )
        name, url = raw.get("name"), raw.get("url")
        if not isinstance(name, str) or not name.strip():
            raise FeedsFileError(path, "`name` is missing or not a non-empty string", label)
        if (problem := _name_problem(name.strip())) is not None:
            raise FeedsFileError(path, problem, f"entry {i + 1}")
        if not isinstance(url, str) or not url.strip():
            raise FeedsFileError(path, "`url` is missing or not a non-empty string", label)
        enabled = raw.get("enabled", True)
        if not isinstance(enabled, bool):
            raise FeedsFileError(path, f"`enabled` must be true or false, got {enabled!r}", label)
        language = raw.get("language")
        if language is not None and (not isinstance(language, str) or not language.strip()):
            raise FeedsFileError(
                path, f"`language` must be a language code such as en, got {language!r}", label
            )
        try:
            resolved = _resolve_url(url.strip(), path.resolve().parent)
        except ValueError as exc:
            raise FeedsFileError(path, str(exc), label) from None
        name = name.strip()
        if name in names:
            raise FeedsFileError(path, f"duplicate name {name!r} (also {names[name]})", label)
        key = _same_feed_key(resolved)
        if key in urls:
            raise FeedsFileError(path, f"duplicate url {redact(url.strip())!r} (also {urls[key]}): the same feed, "
                                 "whatever the case of its scheme and host, a #fragment or its credentials", label)
        names[name] = label
        urls[key] = label
        feeds.append(
            Feed(name=name, url=resolved, enabled=enabled, language=language.strip() if language else None)
        )
    if not any(f.enabled for f in feeds):  # a run would fetch nothing and report success, as if the feeds had
        raise FeedsFileError(path, f"every feed is disabled (`enabled: false` on all {len(feeds)}): enable at least "
                             "one; to stop polling, turn the `poll_feeds` schedule off instead (`cryptowire materialize --select` "
                             "refreshes other assets without the feeds)")
    return feeds
