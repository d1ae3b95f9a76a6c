"""Parameters of /api/html-to-pdf: one parser for the GET query string and the POST JSON body.

Query values are strings; in JSON the same values may also be given natively (``true``, ``2``, ``0.8``) and mean
the same. Unknown parameters are refused, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api.errors import ApiError
from api.pdf.ssrf import Url, parse_url

MAX_TIMEOUT_MS = 60_000
MIN_TIMEOUT_MS = 1_000
DISPOSITIONS = ("inline", "attachment")
MEDIA_TYPES = ("screen", "print")
WAIT_UNTIL = ("load", "domcontentloaded", "networkidle")
# ASCII digits only: `\d` also matches other scripts' digits (١٠, １０), which Chromium refuses after the fetch.
_LENGTH = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(px|in|cm|mm)?$")
# Paper sizes (portrait width, height in inches) and CSS pixels per unit as Playwright sends them to Chromium.
# Margins that leave no content area make Chromium refuse to print (a 502, after the charge) and a sliver of one
# prints as hundreds of pages, so margins must leave MIN_PRINTABLE_IN each way.
PAPER_INCHES = {
    "Letter": (8.5, 11.0), "Legal": (8.5, 14.0), "Tabloid": (11.0, 17.0), "Ledger": (17.0, 11.0),
    "A0": (33.1, 46.8), "A1": (23.4, 33.1), "A2": (16.54, 23.4), "A3": (11.7, 16.54), "A4": (8.27, 11.7),
    "A5": (5.83, 8.27), "A6": (4.13, 5.83),
}
FORMATS = tuple(PAPER_INCHES)
_PX_PER_UNIT = {"px": 1.0, "in": 96.0, "cm": 37.8, "mm": 3.78}
MIN_PRINTABLE_IN = 1.0


@dataclass(frozen=True)
class PdfParams:
    url: Url
    filename: str | None = None
    disposition: str = "inline"
    emulate_media_type: str = "print"
    format: str = "A4"
    landscape: bool = False
    print_background: bool = True
    margin: tuple[str, str, str, str] | None = None  # top, right, bottom, left
    wait_until: str = "load"
    wait_for_selector: str | None = None
    timeout_ms: int = 30_000
    scale: float = 1.0


PARAMETERS = (
    "url",
    "filename",
    "disposition",
    "emulateMediaType",
    "format",
    "landscape",
    "printBackground",
    "margin",
    "waitUntil",
    "waitForSelector",
    "timeoutMs",
    "scale",
)


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, "INVALID_PARAMETER", f"`{param}`: {message}")


def parse_params(raw: Mapping[str, Any], default_timeout_ms: int = 30_000) -> PdfParams:
    """Validate raw parameters (query or JSON); raise ApiError 400 naming the parameter and allowed values."""
    unknown = sorted(set(raw) - set(PARAMETERS))
    if unknown:
        raise ApiError(
            400,
            "INVALID_PARAMETER",
            f"unknown parameter(s) {', '.join(f'`{u}`' for u in unknown)}; allowed: {', '.join(PARAMETERS)}",
        )
    if raw.get("url") in (None, ""):
        raise bad("url", "required: the absolute http:// or https:// URL of the page to render")
    url = parse_url(_string(raw, "url"), "url")
    filename = _string(raw, "filename") if raw.get("filename") not in (None, "") else None
    if filename is not None and len(filename) > 1000:
        raise bad("filename", "at most 1000 characters (it is cut to 100 in the header)")
    paper = _choice(raw, "format", FORMATS, "A4")
    landscape = _bool(raw, "landscape", False)
    return PdfParams(
        url=url,
        filename=filename,
        disposition=_choice(raw, "disposition", DISPOSITIONS, "inline"),
        emulate_media_type=_choice(raw, "emulateMediaType", MEDIA_TYPES, "print"),
        format=paper,
        landscape=landscape,
        print_background=_bool(raw, "printBackground", True),
        margin=_margin(raw, paper, landscape),
        wait_until=_choice(raw, "waitUntil", WAIT_UNTIL, "load"),
        wait_for_selector=_selector(raw),
        timeout_ms=_int(raw, "timeoutMs", min(max(default_timeout_ms, MIN_TIMEOUT_MS), MAX_TIMEOUT_MS),
                        MIN_TIMEOUT_MS, MAX_TIMEOUT_MS),
        scale=_float(raw, "scale", 1.0, 0.1, 2.0),
    )


def _string(raw: Mapping[str, Any], name: str) -> str:
    value = raw[name]
    if not isinstance(value, str):
        raise bad(name, f"must be a string, not {type(value).__name__}")
    return value


def _choice(raw: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    if raw.get(name) in (None, ""):
        return default
    value = _string(raw, name)
    for a in allowed:
        if value.lower() == a.lower():
            return a
    raise bad(name, f"{value[:50]!r} is not allowed; use one of: {', '.join(allowed)} (default {default})")


def _bool(raw: Mapping[str, Any], name: str, default: bool) -> bool:
    value = raw.get(name)
    if value in (None, ""):
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "false", "0"):
        return value.lower() in ("true", "1")
    raise bad(name, f"{str(value)[:50]!r} is not a boolean; use true or false (default {str(default).lower()})")


def _number(raw: Mapping[str, Any], name: str) -> float | None:
    value = raw.get(name)
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise bad(name, "must be a number, not a boolean")
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits
            raise bad(name, "is far too large") from None
    elif isinstance(value, str):
        try:
            if not value.isascii():  # float() also reads other scripts' digits (١٠): one spelling, as for margins
                raise ValueError(value)
            number = float(value)
        except ValueError:
            raise bad(name, f"{value[:50]!r} is not a number; write it with the digits 0-9") from None
    else:
        raise bad(name, f"must be a number, not {type(value).__name__}")
    if not math.isfinite(number):
        raise bad(name, "must be a finite number")
    return number


def _int(raw: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    number = _number(raw, name)
    if number is None:
        return default
    if number != int(number) or not lo <= number <= hi:
        raise bad(name, f"must be a whole number from {lo} to {hi} (default {default})")
    return int(number)


def _float(raw: Mapping[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    number = _number(raw, name)
    if number is None:
        return default
    if not lo <= number <= hi:
        raise bad(name, f"must be from {lo} to {hi} (default {default})")
    return number


def _margin(raw: Mapping[str, Any], paper: str, landscape: bool) -> tuple[str, str, str, str] | None:
    value = raw.get("margin")
    if value in (None, ""):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise bad("margin", "must be a CSS length or four of them, as a string")
    parts = [p for p in re.split(r"[\s,]+", value.strip()) if p]
    lengths = []
    for p in parts:
        m = _LENGTH.match(p.lower())
        if not m or float(m.group(1)) > 1000:
            break
        lengths.append(m.group(1) + (m.group(2) or "px"))
    if len(lengths) != len(parts) or len(lengths) not in (1, 4):
        raise bad(
            "margin",
            f"{value[:50]!r} is not allowed; give one length for all sides or four (top right bottom left), "
            "each a number (digits 0-9) with unit px, in, cm or mm, e.g. `10mm` or `1cm 2cm 1cm 2cm`",
        )
    if len(lengths) == 1:
        lengths *= 4
    _check_fits(value, lengths, paper, landscape)
    return (lengths[0], lengths[1], lengths[2], lengths[3])


def _check_fits(value: str, lengths: list[str], paper: str, landscape: bool) -> None:
    """400 unless the margins leave at least MIN_PRINTABLE_IN of the page each way, saying how much they may take."""
    width, height = PAPER_INCHES[paper]
    if landscape:  # Chromium turns the page: the format's height becomes the width
        width, height = height, width
    top, right, bottom, left = (_inches(m) for m in lengths)
    max_x, max_y = width - MIN_PRINTABLE_IN, height - MIN_PRINTABLE_IN
    if round(left + right, 6) <= round(max_x, 6) and round(top + bottom, 6) <= round(max_y, 6):
        return
    raise bad(
        "margin",
        f"{value[:50]!r} leaves too little to print on {paper} {'landscape' if landscape else 'portrait'} "
        f"({width:g}in × {height:g}in): left + right may be at most {_both(max_x)} and top + bottom at most "
        f"{_both(max_y)}, to leave at least {MIN_PRINTABLE_IN:g}in each way; use smaller margins or a larger "
        "`format`",
    )


def _inches(length: str) -> float:
    m = _LENGTH.match(length)
    assert m is not None  # _margin only returns lengths it matched
    return float(m.group(1)) * _PX_PER_UNIT[m.group(2)] / 96


def _both(inches: float) -> str:
    mm = math.floor(inches * 96 / _PX_PER_UNIT["mm"])  # rounded down: the figure itself must fit
    return f"{round(inches, 2):g}in ({mm}mm)"


def _selector(raw: Mapping[str, Any]) -> str | None:
    if raw.get("waitForSelector") in (None, ""):
        return None
    value = _string(raw, "waitForSelector")
    if len(value) > 500:
        raise bad("waitForSelector", "at most 500 characters")
    return value
