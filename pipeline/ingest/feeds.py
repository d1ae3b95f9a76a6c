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

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import yaml

ALLOWED_KEYS = ("name", "url", "enabled", "language")


@dataclass(frozen=True)
class Feed:
    name: str
    url: str  # http(s) URL, or a file: URL (local paths are turned into absolute file: URLs)
    enabled: bool = True
    language: str | None = None


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
    if lower.startswith(("http://", "https://")):
        parts = urlsplit(raw)
        if not parts.hostname:
            raise ValueError(f"url {raw!r} has no host")
        try:
            parts.port  # noqa: B018 - urlsplit checks the port only when asked
        except ValueError:
            raise ValueError(f"url {raw!r} has a port that is not a number in 0-65535") from None
        return raw
    if lower.startswith("file:"):
        parts = urlsplit(raw)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URL {raw!r} names a remote host; only local files are read")
        path = Path(url2pathname(unquote(parts.path)))
    elif "://" in raw or lower.startswith(("mailto:", "javascript:", "data:")):
        raise ValueError(f"url {raw!r} has an unsupported scheme; use http, https, file or a local path")
    else:
        path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return path.resolve().as_uri()


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
        doc = yaml.safe_load(text)
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
        if resolved in urls:
            raise FeedsFileError(path, f"duplicate url {url.strip()!r} (also {urls[resolved]})", label)
        names[name] = label
        urls[resolved] = label
        feeds.append(
            Feed(name=name, url=resolved, enabled=enabled, language=language.strip() if language else None)
        )
    return feeds
