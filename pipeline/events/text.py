"""Text helpers shared by the event templates: quotes and dashes made plain, sentences, dates and names as
questions print them."""

from __future__ import annotations

import re
from datetime import datetime

_TRANSLATE = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2010": "-", "\u2011": "-", "\u2012": "-",
    "\u2013": "-", "\u2014": " - ", "\u00a0": " ", "\u202f": " ", "\u2009": " ",
})
_BOILERPLATE = re.compile(r"\s*(?:The post .*? appeared first on .*|This article first appeared on [^.]*\.)\s*$")
_ABBREVIATIONS = ("U.S.", "U.K.", "Inc.", "Corp.", "Ltd.", "Co.", "Mr.", "Ms.", "Dr.", "St.", "vs.", "No.", "Mt.")
_MONTH_ABBREVIATIONS = ("Jan.", "Feb.", "Mar.", "Apr.", "Jun.", "Jul.", "Aug.", "Sep.", "Sept.", "Oct.", "Nov.", "Dec.")


def clean(text: str) -> str:
    """Plain quotes and dashes, single spaces, without feed boilerplate ("The post ... appeared first on")."""
    text = (text or "").translate(_TRANSLATE)
    text = re.sub(r"\s+", " ", text).strip()
    return _BOILERPLATE.sub("", text).strip()


# A link to another article that feeds append to a summary ("Related: Can Tron Reach $1?"): that article's words,
# not this one's. Everything from the label on is left out (after a sentence: "Trending: ..." opening a summary is
# its own text).
_LINKED = re.compile(
    r"(?<=[.!?\"')\]])\s{0,3}[\[(]?(?:read\s+(?:more|also|next|this)|also\s+read|related(?:\s+(?:reading|news|articles?"
    r"|stories|coverage|posts?))?|recommended(?:\s+(?:reading|for\s+you|stories))?|trending(?:\s+(?:now|stories|news))?"
    r"|you\s+(?:may|might)\s+also\s+(?:like|read)|don'?t\s+miss|must\s+read|editor'?s\s+picks?|top\s+stories"
    r"|see\s+also|suggested(?:\s+reading)?|more\s+news|further\s+reading|continue\s+reading|up\s+next)"
    r"\s*[\])]?\s*(?::|\||->|>>?|\s-\s)",
    re.I,
)


def summary_text(raw: str | None) -> str:
    """A summary as the templates read it: ``clean``, without the links to other articles feeds append to it."""
    text = clean(raw or "")
    linked = _LINKED.search(text)
    return text[: linked.start()].strip() if linked else text


# "at 9:44 p.m. UTC": a time of day's "p.m." before its zone ends no sentence.
_MERIDIEM_ZONE = re.compile(r"\b([aApP])\.([mM])\.(?=\s+(?:UTC|GMT|ET|EST|EDT|PT|PST|PDT|CT|CST|CDT|MT|MST|MDT|CET|CEST"
                            r"|BST|JST|KST|SGT|HKT)\b)")


def sentences(text: str) -> list[str]:
    """Split a summary into sentences without breaking "U.S.", "Oct. 26" or "9 p.m. ET"."""
    protected = _MERIDIEM_ZONE.sub("\\1\x00\\2\x00", text)
    for abbr in _ABBREVIATIONS + _MONTH_ABBREVIATIONS:
        protected = protected.replace(abbr, abbr.replace(".", "\x00"))
    parts = re.split(r"(?<=[.!?])\s+(?=[\"'(\[$A-Z0-9])", protected)
    return [p.replace("\x00", ".").strip() for p in parts if p.strip()]


def long_date(value: datetime) -> str:
    """``December 31, 2026``, or ``14:00 UTC on March 15, 2026`` when a time of day is set."""
    day = f"{value:%B} {value.day}, {value.year}"
    if value.hour or value.minute:
        return f"{value:%H:%M} UTC on {day}"
    return day


def indefinite(word: str) -> str:
    """ "a" or "an" for the word, by sound: an XRP ETF, an Ethereum ETF, a Solana ETF, a USDC ..."""
    if not word:
        return "a"
    if word.isupper() and len(word) > 1:  # read letter by letter
        return "an" if word[0] in "AEFHILMNORSX" else "a"
    if word.lower().startswith(("uni", "use", "usd", "one")):
        return "a"
    return "an" if word[0].lower() in "aeiou" else "a"


def possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"
