"""The price template: "Bitcoin Eyes $100K", "ETH Could Hit $5,000 by Year-End", "SOL Slides Toward $150
Support". A level needs a forward-looking cue next to it, a direction and an asset it belongs to."""

from __future__ import annotations

import re

from pipeline.events.mentions import Mention
from pipeline.events.numbers import Amount, find_amounts
from pipeline.events.templates import MAX_PRICE, PRICE, Found

_UP_VERBS = (
    r"hit|reach|top|touch|tag|see|climb|rise|rally|surge|soar|jump|run|pump|rocket|fly|explode|break|breach"
    r"|cross|exceed|surpass|clear|return|reclaim|retake|recover|rebound|go|push|smash|blast|flip|print"
    r"|overtake|challenge|spike|zoom|shoot\s+up|revisit\s+highs\s+of|skyrocket|moon|go\s+parabolic|explode|tap"
)
_DOWN_VERBS = (
    r"drop|fall|sink|slide|slip|dip|tumble|plunge|crash|slump|decline|retreat|correct|collapse|plummet|crater"
    r"|lose|retrace|bleed|nosedive|dump|shed|sag"
)
_NEUTRAL_VERBS = (
    r"test|retest|revisit|trade|hover|stay|hold|be|sit|settle|end|close|finish|head|move|edge|swing|inch|creep|drift"
)


def _verb_forms(stems: str) -> str:
    out = []
    for stem in stems.split("|"):
        if " " in stem or "\\" in stem:
            out.append(stem)
            continue
        out.append(rf"{stem}(?:s|es|ing|{stem[-1]}ing)?" if not stem.endswith("e") else rf"{stem}(?:s|d)?|{stem[:-1]}ing")
    return "|".join(out)


_UP = _verb_forms(_UP_VERBS) + r"|rising|diving"
_DOWN = _verb_forms(_DOWN_VERBS) + r"|falling|sliding|diving|declining|retreating"
_NEUTRAL = _verb_forms(_NEUTRAL_VERBS)
_PREP = r"(?:back\s+)?(?:above|over|past|beyond|below|under|beneath|to|toward|towards|at|near|around|through)?\s*(?:the\s+)?"
_MODAL = (
    r"(?:could|can|will|would|may|might|should|must|to|set\s+to|poised\s+to|likely\s+to|expected\s+to"
    r"|on\s+track\s+to|primed\s+to|ready\s+to|about\s+to|bound\s+to|tipped\s+to|predicted\s+to|forecast\s+to"
    r"|projected\s+to|needs?\s+to|going\s+to|aims?\s+to|looks?\s+to|seeks?\s+to|threatens?\s+to|risks?"
    r"|on\s+(?:the\s+)?(?:verge|brink|cusp)\s+of|close\s+to)"
)
_W = r"[\w$.'-]+"
# Each pattern ends where the amount starts.
_CUE_MODAL = re.compile(
    rf"\b(?P<modal>{_MODAL})\s+(?:{_W}\s+){{0,3}}?(?:(?P<up>{_UP})|(?P<down>{_DOWN})|(?P<neutral>{_NEUTRAL}))"
    rf"(?:\s+(?:another\s+)?\d+(?:\.\d+)?%)?\s+{_PREP}$",
    re.I,
)
_CUE_DIRECT = re.compile(
    r"\b(?P<cue>eyes?|eyeing|eying|targets?|targeting|sets?\s+sights\s+on|aims?\s+(?:for|at)|bets?\s+on|betting\s+on"
    r"|calls?\s+for|predicts?|predicting|forecasts?|forecasting|sees|seeing|projects?|expects?|expecting"
    r"|anticipates?|anticipating|envisions?|envisioning|sets?\s+eyes\s+on|banking\s+on|case\s+for"
    r"|paves?\s+(?:the\s+)?way\s+for|outlines?\s+(?:a\s+)?path\s+to"
    r"|watch(?:es|ing)?|eyes\s+a\s+(?:move|run|rally|return|push|drop|fall|slide)\s+(?:to|toward|towards)"
    r"|eyes\s+(?:glued|set|fixed)\s+(?:to|on))"
    r"\s+(?:(?:a|an|the)\s+)?(?:(?:fresh|new|next|potential|possible)\s+)?"
    r"(?:(?:bullish|bearish|major|massive|big|huge|strong|sharp|parabolic|explosive|spectacular|further|price)\s+)*"
    r"(?:(?:move|run|rally|return|push|drop|fall|slide|retest|test|breakout|breakdown|surge|rebound|recovery|climb"
    r"|jump|decline|crash|correction|dip|pump)\s+(?:to|toward|towards|of|above|below|past|beyond|under)\s+)?"
    r"(?:(?:price\s+)?target\s+of\s+)?$",
    re.I,
)
# "Aldridge Sees Bitcoin at $135,000", "Analyst Expects ETH to Hit $5K" (the asset sits between cue and level)
_CUE_SEES = re.compile(
    rf"\b(?:sees?|expects?|predicts?|forecasts?|projects?|calls?\s+for|targets?|anticipates?|envisions?)"
    rf"\s+(?:{_W}\s+){{1,3}}?(?:at|to|hitting|reaching|topping|near|past|above|beyond|over|below|under)\s+$",
    re.I,
)
_CUE_TOWARD = re.compile(
    rf"\b(?:(?P<up>{_UP})|(?P<down>{_DOWN})|(?P<neutral>{_NEUTRAL}|march(?:es|ing)?|race[sd]?|racing|grind(?:s|ing)?))"
    r"\s+(?:back\s+)?(?:toward|towards|for)\s+(?:the\s+)?$"
    r"|\bhead(?:s|ed|ing)?\s+(?:back\s+)?(?:to|toward|towards|for)\s+(?:the\s+)?$"
    r"|\b[a-z]+(?:s|ing)\s+(?:(?P<up2>up|higher)|(?P<down2>down|lower))\s+(?:toward|towards)\s+(?:the\s+)?$"
    r"|\bon\s+(?:its|the)\s+way\s+to\s+$",
    re.I,
)
_CUE_NOUN = re.compile(
    r"\b(?:(?:a|an|another)\s+(?:(?:potential|possible|further|fresh|new)\s+)?|(?:potential|possible|further)\s+)(?:(?:move|run|push|rally|return|climb|rise|surge|"
    r"trip|path|drop|fall|slide|decline|retest|test|revisit)\s+(?:back\s+)?(?:to|toward|towards|above|below|of)"
    r")\s+(?:the\s+)?$",
    re.I,
)
# "sending XLM to $0.42", "plan to take ETH to $10K": someone moves the asset, the headline asks nothing.
_MOVED_BY = re.compile(r"\b(?:\w+(?:ing|ed)|take|drive|push|send|bring|boost|lift|propel|pull|get|put)\s+$", re.I)
_HEADLINE_TO = re.compile(r"\bto\s+$", re.I)  # "Bitcoin to $150K by 2026?" - checked with the asset right before
_RIGHT_TARGET = re.compile(
    r"^\s*(?:(?P<asset>[\w$]+)\s+)?(?:price\s+)?(?P<what>target|prediction|forecast|call|projection)s?\b", re.I
)
# Amounts that count something other than one coin's price: "holdings pass 6 million", "market cap to $3
# trillion", "a $500 million fund", "6,000 BTC", "20M users".
COUNT_BEFORE = re.compile(
    r"\b(?:holdings?|holds|reserves?|supply|market\s+(?:cap|capitali[sz]ation|value)|mcap|valuation|valued|fund(?:s|ing)?"
    r"|rais(?:e|es|ed|ing)|TVL|total\s+value\s+locked|volume|open\s+interest|inflows?|outflows?|treasury|stash"
    r"|addresses|wallets|users|holders|transactions|accounts|stak(?:ed|ing)|deposits?|liquidations?|revenue|fees"
    r"|profits?|losses|debt|loans?|bonds?|sales|buy(?:back)?s?|purchases?|acquisitions?|worth|AUM|assets\s+under"
    r"|total|sum)\b"
    r"(?:\W+\w+){0,2}\W+$",
    re.I,
)
COUNT_AFTER = re.compile(
    r"^\s*(?:coins?|tokens?|units?|shares?|users?|addresses|wallets?|holders?|transactions?|accounts?|followers?"
    r"|downloads?|nodes?|validators?|miners?|blocks?|people|investors?|customers?|fund\b|raise\b|round\b"
    r"|valuation|market\s+cap|in\s+(?:assets|AUM|TVL)|TPS|txs?|per\s+second|members|subscribers|developers|devs"
    r"|contracts|dApps|apps|projects|pairs|markets)\b",
    re.I,
)

NOT_A_PRICE = re.compile(
    r"^\s*(?:in\s+(?:inflows?|outflows?|liquidations?|volume|funding|fees|revenue|profit|losses?|bitcoin|ether|"
    r"stablecoins?|crypto|tokens?|shares)|worth\b|of\s+(?:inflows?|outflows?|btc|eth|bitcoin|ether))",
    re.I,
)
_ALLOWED_AFTER = frozenset(
    "by before in this next within on again as amid after while level levels mark support resistance price "
    "target targets zone area range handle threshold barrier milestone for with if soon says say said analyst "
    "analysts trader traders is could may until and or but first per ahead despite following then once at from "
    "into over under is next amidst possible likely breakout breakouts rally run move surge push ride mark retest "
    "test region soon coming price prices to eruption explosion moonshot rocket pump spike jump prediction "
    "predictions forecast forecasts projection looms looming closer beckons beckoning thanks monster massive "
    "big huge major explosive parabolic bullish ride leap upswing".split()
)
_UPSIDE_CUE = re.compile(
    r"\b(?:eyes?|eyeing|targets?|targeting|sights|aims?|bets?|betting|calls?|predicts?|forecasts?|expects?|sees?"
    r"|projects?)\b",
    re.I,
)
LEVEL = re.compile(r"^\s*(?:level\s+|mark\s+|area\s+|zone\s+)?(?P<level>support|resistance|floor|ceiling)\b", re.I)
_BEARISH = re.compile(r"\b(?:bear(?:s|ish)?|downside|crash|correction|sell-off|selloff|short(?:s|ing)?)\b", re.I)
# Words that tie a level to the asset's price ("push SOL price to $1,300", "$10 million for Bitcoin price", "the
# coveted $500 mark"), not to an amount of money ("whale moves $8 million as price eyes highs").
_PRICE_BEFORE = re.compile(r"\bprice\b[^.,;:!?$]{0,30}$", re.I)
_PRICE_AFTER = re.compile(r"\s*(?:for\s+(?:the\s+)?(?:[A-Z][\w.]*\s+){1,2}price\b|(?:mark|level|milestone|price\s+target)\b)",
                          re.I)
# A target with no direction word is an upside one, unless bears set it, named next to its cue.
_BEARS = re.compile(r"\b(?:bears?|bearish)\b", re.I)
_CLAUSE_START = re.compile(r"[:;]|\sas\s", re.I)  # "Bears Trapped: Ethereum Bulls Aim for $5,000" is the bulls' aim
_AIM = re.compile(r"\b(?:aims?|aiming|targets?|targeting|eyes?|eyeing|sets?\s+sights)\b", re.I)  # not "hold $52K"
# "added 1% to reach $909", "jumped to hit $100K": an infinitive after a move that already happened.
_TO_AFTER_MOVE = re.compile(
    r"(?:%|\b\w+ed|\bfail(?:s|ing)?|\b(?:rises|jumps|climbs|soars|surges|falls|drops|slides|sinks|rallies|gains|spikes"
    r"|dips|rose|fell|sank|slid|ran|grew|swung))\s*$",
    re.I,
)
# "may never fall below $1 again", "XRP's days below $1 are over": a claim that the level will not be seen.
NEGATED = re.compile(r"\b(?:never|no\s+longer|won'?t|will\s+not|cannot|can'?t|days\s+(?:above|below|under|over))\b", re.I)
PAST_GUARD = re.compile(r"\b(?:after|since|following|fail(?:s|ed)?\s+to|failing\s+to)\s+(?:\S+\s+){0,2}$", re.I)
_REF_LEFT = re.compile(
    r"(?:\b(?:trad(?:es|ed|ing)|chang(?:es|ed|ing)\s+hands|was|is|sits|sat|stood|stands|hover(?:s|ed|ing)?"
    r"|holding|holds|held|priced|steady|flat)\s+(?:(?:just\s+)?(?:at|near|around|above|below|close\s+to)\s+)?"
    r"|\b(?:rose|fell|climbed|dropped|slid|jumped|gained|lost|rallied|sank|dipped|added|slipped|surged|tumbled"
    r"|up|down)\s+(?:\d+(?:\.\d+)?%\s+)?to\s+|@\s*|\bat\s+)$",
    re.I,
)


# Words that make a sentence about a future level, for the cues below that are not forward-looking by themselves.
_FORWARD = re.compile(
    r"\?|\b(?:could|can|will|would|may|might|should|possible|possibly|likely|within\s+reach|in\s+sight|in\s+view"
    r"|closer\s+than\s+ever|looms?|looming|nigh|in\s+the\s+cards|on\s+the\s+cards|on\s+the\s+horizon|imminent"
    r"|envision\w*|predict\w*|expect\w*|forecast\w*|target\w*|eyes?|eyeing|eying|next|ahead|soon|upcoming"
    r"|potential|poised|primed|set\s+(?:to|for)|beckons?|beckoning|in\s+the\s+offing|looks?\s+near)\b",
    re.I,
)
# "could push Bitcoin to $45K", "will it send price to $3?", "plan to boost ETH price to $10K"
_CUE_PUSH = re.compile(
    r"\b(?:could|can|will|would|may|might|should|to)\s+(?:(?:it|also|further|eventually|soon|then)\s+)?"
    r"(?:(?P<up>lift|boost|propel|catapult|rocket|fuel|thrust)|(?P<down>drag|sink|tank)|push|send|drive|take|bring|pull)"
    r"\s+(?:[\w$.'()-]+\s+){0,3}?(?:to|toward|towards)\s+(?:the\s+)?$",
    re.I,
)
# "cuts 2025 ether price target by 60% to $4,000", "raises its BTC target to $150K": a target is an upside level.
_CUE_TARGET_TO = re.compile(r"\b(?:price\s+)?(?:target|forecast|prediction)s?\s+(?:by\s+[\d.]+%\s+)?to\s+$", re.I)
# "XRP price explosion to $5 in the cards", "explosive breakout to $5", "rally to $15 possible"
_CUE_NOMINAL = re.compile(
    r"\b(?:(?P<up>explosion|eruption|rally|surge|pump|run|rocket|moonshot|jump|breakout|spike|climb|rise|ascent|rebound"
    r"|recovery|upswing|liftoff)|(?P<down>crash|drop|fall|decline|slide|plunge|dump|correction|breakdown|dip))"
    r"\s+(?:to|toward|towards|above|past|beyond|below|under)\s+(?:the\s+)?$",
    re.I,
)


# A move named right after the level, in a forward-looking sentence: "$200 run?", "$1 monster move", "$0.93 breakout".
_MOVE_AFTER = re.compile(
    r"^\s*(?:(?:monster|massive|big|huge|major|explosive|parabolic|bullish)\s+)?(?:(?P<up>run|ride|rally|breakout|surge"
    r"|explosion|eruption|pump|moonshot|spike|jump|upswing|leap)|move)\b",
    re.I,
)


def _follower_ok(after: str, mentions_after: bool) -> bool:
    stripped = after.lstrip()
    if not stripped or stripped[0] in "?!.,;:()-'\"–—":
        return True
    if mentions_after:
        return True
    word = re.match(r"[A-Za-z]+", stripped)
    return bool(word) and word.group(0).lower() in _ALLOWED_AFTER


def reference_price(text: str, threshold: Amount) -> float | None:
    """The asset's current price as the article states it ("trades at $18.40", "fell 7% to $158"), if any.
    Only amounts within 0.2x-5x of the level count: other assets' prices are usually far off."""
    for amount in find_amounts(text):
        if amount.value == threshold.value or amount.currency not in (None, "USD"):
            continue
        if not (0.2 * threshold.value <= amount.value <= 5 * threshold.value):
            continue
        if _REF_LEFT.search(text[max(0, amount.start - 40) : amount.start]):
            return amount.value
    return None


# "to surpass the $0.00001 mark for the first time since 2021": it happened.
FIRST_TIME = re.compile(r"\s*(?:\w+\s+)?for\s+the\s+first\s+time\b", re.I)
# A preposition right before the amount: the strongest direction signal ("close above", "dip below").
PREP_BEFORE = re.compile(r"\b(above|over|past|beyond|below|under|beneath)\s+(?:the\s+)?$", re.I)
# "struggling to stay above $5", "must hold above $60K": the level is a floor the asset may lose, so the question
# is whether it falls below it (and "stay below" a ceiling it may break).
_STAY = re.compile(r"\b(?:stay|stays|staying|remain|remains|remaining|hold|holds|holding|keep|keeps|keeping)\s+$", re.I)


HOLD = re.compile(r"\b(?:hold|holds|holding|keep|keeps|keeping|defend|defends|defending)\s+(?:on(?:to)?\s+)?(?:the\s+)?$",
                   re.I)


_WISH = re.compile(r"\b(?:dream(?:s|ing|ed)?\s+(?:of|about)|wish(?:es|ing)?(?:\s+for)?|fantas\w+\s+(?:of|about)|hop(?:e|es|ing)"
                   r"\s+for)\s+(?:a\s+|the\s+)?$", re.I)
# Within the level's own clause, a few words on: "Ether to $8,000? Standard Chartered Cuts Target to $4,000" (not
# "... $150,000 by Year-End Even as JPMorgan Cuts Its Ether Target to $4,000": another clause, another asset).
_TARGET_CUT = re.compile(r"(?:(?!\b(?:as|while|but|whereas|even)\b)[^.;!,:]){0,40}?\b(?:cuts?|lowers?|slashes|slash|trims?"
                         r"|reduces?|downgrades?|halves)\s+(?:\w+\s+){0,3}?(?:price\s+)?(?:target|forecast|prediction)s?\s+"
                         r"(?:by\s+[\d.]+%\s+)?to\b", re.I)


_AS_LEVEL = re.compile(r"\s*(?:-\s*\$?[\d.,]+\s*[kmb]?\s+)?(?:as\s+(?:the\s+|a\s+)?(?:next\s+|key\s+|major\s+|new\s+|strong\s+)?)"
                       r"?(?:(?P<down>support|floor)|(?P<up>resistance|ceiling))(?:\s+(?:zone|area|level|band))?\b", re.I)


def wished_or_revised(left: str, right: str) -> bool:
    """A level someone dreams of ("holders dream of $10"; not "Solana's $1,000 Dream: ... SOL Could Soar", which
    readers ask), or one the same sentence revises ("Ether
    to $8,000? Standard Chartered Cuts Target to $4,000": the new target is the question)."""
    return bool(_WISH.search(left[-40:]) or _TARGET_CUT.match(right))


def prep_direction(left: str, prep: re.Match[str]) -> str:
    """The direction a preposition right before the level gives ("close above" -> above, "stay above" -> below)."""
    up = prep.group(1).lower() in ("above", "over", "past", "beyond")
    if _STAY.search(left[: prep.start()]):
        up = not up
    return "above" if up else "below"


# "if"/"unless"/"in case" opening the clause that holds the level, with no clause break in between.
CONDITION = re.compile(r"\b(?:if|unless|in\s+case|should)\s+(?:[^,;:?!.\u2013\u2014]){0,60}$", re.I)


def could_be_price(unit: str, amount: Amount) -> bool:
    """The filters the rules and the learned model (``learned.candidates``) share: an amount in dollars (or none)
    under ``MAX_PRICE``, no count, sum or market cap, and no level the guideline refuses whatever the cue."""
    if amount.currency not in (None, "USD") or not (0 < amount.value < MAX_PRICE):
        return False
    left, right = unit[: amount.start], unit[amount.end :]
    return not (
        NOT_A_PRICE.match(right) or COUNT_AFTER.match(right) or COUNT_BEFORE.search(left[-60:])
        # "to surpass the $0.00001 mark for the first time since 2021": it happened
        or FIRST_TIME.match(right)
        # "Best coins to buy if Bitcoin falls below $30K": a condition, not a forecast
        or CONDITION.search(left[-80:])
        or wished_or_revised(left, right)
    )


def find_price(unit: str, mentions: list[Mention], context: str) -> Found | None:
    """A price level with a forward-looking cue next to it, and the asset it is about."""
    for amount in find_amounts(unit):
        if not could_be_price(unit, amount):
            continue
        left = unit[: amount.start]
        right = unit[amount.end :]
        after_mentions = [m for m in mentions if m.start >= amount.end and m.start - amount.end <= 2]
        if after_mentions and not amount.currency and not re.match(r"\s*(?:price|target|level)", unit[after_mentions[0].end:], re.I):
            continue  # "6 million ETH", "6,000 BTC": a number of coins
        if not _follower_ok(right, bool(after_mentions)):
            continue
        direction: str | None = None
        cue_start: int | None = None
        neutral = False
        target = _RIGHT_TARGET.match(right)
        for pattern in (_CUE_MODAL, _CUE_TOWARD):
            m = pattern.search(left)
            if m and m.groupdict().get("modal", "").lower() == "to" and _TO_AFTER_MOVE.search(left[: m.start()]):
                m = None
            if m:
                cue_start = m.start()
                if m.groupdict().get("up") or m.groupdict().get("up2"):
                    direction = "above"
                elif m.groupdict().get("down") or m.groupdict().get("down2"):
                    direction = "below"
                else:
                    neutral = True
                break
        if cue_start is None:
            m = _CUE_DIRECT.search(left) or _CUE_NOUN.search(left) or _CUE_SEES.search(left)
            if m:
                cue_start = m.start()
                text = m.group(0).lower()
                if re.search(rf"\b(?:{_DOWN})\b", text):
                    direction = "below"
                elif re.search(rf"\b(?:{_UP})\b", text):
                    direction = "above"
                else:
                    neutral = True
        if cue_start is None and target and (target.group("asset") is None or after_mentions):
            cue_start = amount.start
            neutral = True
        if cue_start is None and _HEADLINE_TO.search(left):
            before = [m for m in mentions if m.end <= amount.start]
            if (before and re.fullmatch(r"\s*(?:\([A-Z0-9]+\)\s*)?(?:price\s+)?to\s*", unit[before[-1].end : amount.start], re.I)
                    and not _MOVED_BY.search(unit[: before[-1].start])):  # not "sending XLM to $0.42"
                cue_start = before[-1].start
                neutral = True
        if cue_start is None and (m := _CUE_TARGET_TO.search(left)):
            cue_start, direction = m.start(), "above"
        if cue_start is None and _FORWARD.search(unit):
            m = _CUE_PUSH.search(left) or _CUE_NOMINAL.search(left)
            if m:
                cue_start = m.start()
                direction = "below" if m.groupdict().get("down") else "above" if m.groupdict().get("up") else None
                neutral = direction is None
            elif (move := _MOVE_AFTER.match(right)) and not after_mentions:
                cue_start = amount.start  # "can ETF hype fuel SOL's $200 run?", "Is ADA Ready for a $2 Ride?"
                direction = "above" if move.group("up") else None
                neutral = direction is None
            elif after_mentions and re.match(r"\s*(?:\([A-Z0-9]+\)\s*)?price\b", unit[after_mentions[0].end :], re.I):
                cue_start = amount.start  # "$0.001 SHIB price could become reality", "is $300 SOL price within reach?"
                neutral = True
            elif any(0 <= amount.start - m.end <= 2 for m in mentions) and re.match(r"\W*(?:\w+\s+)?price\b", right, re.I):
                cue_start = amount.start  # "XRP $5 eruption price now looks nigh"
                neutral = True
        if cue_start is None or PAST_GUARD.search(left[:cue_start]) or NEGATED.search(left[max(0, cue_start - 40):]):
            continue
        # A preposition right before the amount is the strongest direction signal ("close above", "dip below").
        prep = PREP_BEFORE.search(left)
        if prep:
            direction = prep_direction(left, prep)
            neutral = False
        elif as_level := _AS_LEVEL.match(right):  # "Eye $70,000-$72,000 as Next Support": a floor, asked "below"
            direction, neutral = ("below" if as_level.group("down") else "above"), False
        if neutral:
            level = LEVEL.match(right) or LEVEL.match(re.sub(r"^\s*(?:[\w$]+\s+)?", " ", right, count=1))
            if level:
                direction = "below" if level.group("level").lower() in ("support", "floor") else "above"
            elif target and _BEARISH.search(unit):
                direction = "below"
            elif _AIM.search(left[cue_start : amount.start]) and _BEARS.search(
                    _CLAUSE_START.split(left[max(0, cue_start - 30) : amount.start])[-1]):
                direction = "below"  # "Bears Aim For $50", "Bearish Trend Targets $0.41"
            else:
                ref = reference_price(context, amount)
                if ref is not None and ref != amount.value:
                    direction = "above" if ref < amount.value else "below"
                elif target or _UPSIDE_CUE.search(unit[cue_start : amount.start]):
                    direction = "above"  # a target or an "eyes" with nothing pointing down is an upside target
        # "$1 ADA price", "the case for $500K bitcoin": the asset named right after the level is its asset.
        nominal = bool(after_mentions) and not unit[amount.end : after_mentions[0].start].strip()
        asset = asset_for(mentions, amount, after_mentions if nominal else [])
        if asset is None and target:  # "$64K target for Bitcoin"
            asset = next((m.ticker for m in mentions if m.start >= amount.end
                          and re.fullmatch(r"\s*(?:price\s+)?\w+\s+(?:for|on)\s+", unit[amount.end : m.start], re.I)), None)
        if asset is None:
            continue
        if direction is None:
            if not neutral:
                continue
            direction = None  # a level with no direction in the words: the asset's reference price decides (derive)
        priced = nominal or bool(_PRICE_BEFORE.search(left[-40:]) or _PRICE_AFTER.match(right))
        # "struggling to hold $30": a floor it may lose; asked "below" once the price shows it is a question at all
        hold = "1" if direction is None and not prep and HOLD.search(left) else ""
        return Found(
            kind=PRICE, ticker=asset, unit=unit, anchor=(amount.start, amount.end), comparator=direction,
            threshold=amount.value, currency="USD",
            detail={"written": amount.text, "currency": amount.currency or "", "priced": "1" if priced else "",
                    "hold": hold},
        )
    return None


def asset_for(mentions: list[Mention], amount: Amount, after: list[Mention]) -> str | None:
    """The asset a price belongs to: the nearest one named before it, else one named right after it
    ("$76K BTC price target")."""
    before = [m for m in mentions if m.end <= amount.start]
    if after and (not before or amount.start - before[-1].end > 2):
        return after[0].ticker  # "... against Ethereum, but is $300 SOL price within reach?"
    if before:
        return before[-1].ticker
    return None
