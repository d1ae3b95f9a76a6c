"""Tokenising a headline once, for both the ticker and the topic rules."""

from __future__ import annotations

import html
import re

# One findall of one regex. A token is a word (Unicode letters, digits, "_"; joined by "." or "," as in
# "ether.fi", "1,200", "5.2"; "OP_RETURN" stays one identifier) with an optional leading "$" (cashtag or money)
# and trailing "%". A possessive ending is dropped ("Bitcoin's" -> "Bitcoin", "investors'" -> "investors").
# The second group is what separates the token from the next one, so "BTC/USD" gives "BTC" + "/" + "USD" and
# "ether-based" gives "ether" + "-" + "based".
_TOKEN = re.compile(r"(\$?\w+(?:[.,]\w+)*%?)(?:['’]s\b|['’](?!\w))?([^\w$]*)")
_SPECIAL = re.compile(r"[$%\d]")
_TAG = re.compile(r"<[^>]*>")

WORD, CASHTAG, MONEY, PCT = 0, 1, 2, 3


class Tokens:
    """Parallel lists, one entry per token (cheaper than an object per token)."""

    __slots__ = ("words", "lows", "keys", "seps", "kinds")

    def __init__(self, text: str) -> None:
        pairs = _TOKEN.findall(text)
        words = [p[0] for p in pairs]
        lows = [w.lower() for w in words]
        kinds = [WORD] * len(words)
        keys = lows
        if _SPECIAL.search(text):  # only texts with "$", "%" or digits need a look at each token
            keys = lows.copy()
            for i, word in enumerate(words):
                first = word[0]
                if first.isalpha() and word[-1] != "%" and not (first in "vV" and word[1:2].isdigit()):
                    continue
                if first == "$":
                    word = word[1:]
                    words[i] = word
                    lows[i] = keys[i] = word.lower()
                    if word[0].isdigit():
                        kinds[i], keys[i] = MONEY, "@money"
                    else:
                        kinds[i] = CASHTAG
                elif word[-1] == "%":
                    kinds[i], keys[i] = PCT, "@pct"
                elif first.isdigit():
                    keys[i] = "@num"
                elif first in "vV":
                    keys[i] = "@version"
        self.words = words  # as written, without "$" and possessive
        self.lows = lows
        # what topic phrases match: lower case, with figures as markers ("up 5%" -> "up @pct")
        self.keys = keys
        self.seps = [p[1] for p in pairs]  # the text between token i and token i + 1
        self.kinds = kinds  # WORD | CASHTAG | MONEY | PCT

    def __len__(self) -> int:
        return len(self.words)


def tokenize(text: str) -> Tokens:
    return Tokens(text)


def clean(text: str) -> str:
    """Plain text from a feed field: entities decoded, tags dropped."""
    if "&" in text:
        text = html.unescape(text)
    if "<" in text:
        text = _TAG.sub(" ", text)
    return text
