"""Topics: keyword rules with context, compiled once from `taxonomy.yaml` into dict lookups over tokens."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from models.tagging.text import Tokens, tokenize
from models.tagging.tickers import CRYPTO_WORDS

TAXONOMY_PATH = Path(__file__).resolve().with_name("taxonomy.yaml")
# Context markers computed per text; "@money" ($90K), "@pct" (5%), "@num" (2026, 1.2) and "@version" (v4)
# are token keys, usable inside phrases ("up @pct", "tops @money").
MARKERS = frozenset({"@asset", "@crypto"})
TOKEN_MARKERS = frozenset({"@money", "@pct", "@num", "@version"})
_STRONG, _WEAK, _CONTEXT = 0, 1, 2


class TaxonomyError(ValueError):
    """The taxonomy file is malformed; the message names the topic and what to fix."""


@dataclass(frozen=True)
class Rule:
    """Weak phrases that count only with a context phrase (within `window` tokens; 0: anywhere)."""

    weak: tuple[str, ...]
    context: tuple[str, ...]
    window: int


@dataclass(frozen=True)
class Topic:
    slug: str
    definition: str
    examples: tuple[str, ...]
    strong: tuple[str, ...]
    rules: tuple[Rule, ...]
    veto: frozenset[str]  # a word right before a phrase that cancels it
    veto_after: frozenset[str]  # a word right after a phrase that cancels it
    assets: frozenset[str]  # tickers whose mention assigns the topic
    kinds: frozenset[str]  # registry kinds whose assets assign the topic


def _phrase(text: str) -> str:
    """A phrase as the matcher sees it: lower-case tokens joined by single spaces, markers kept. A number written
    out ("layer 2") is ``@num=2``: the text's token must be that number, not any ("layer 1" is no layer-2 news)."""
    out = []
    for part in text.split():
        if part in TOKEN_MARKERS:
            out.append(part)
            continue
        toks = tokenize(part)
        out += [f"@num={low}" if key == "@num" else key for key, low in zip(toks.keys, toks.lows, strict=True)]
    return " ".join(out)


def _literals(phrase: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """``"layer @num=2"`` -> ``("layer @num", ((1, "2"),))``: the key the tokens' keys are matched with, and the
    numbers that must be written at those positions."""
    words = phrase.split(" ")
    literals = tuple((k, w[5:]) for k, w in enumerate(words) if w.startswith("@num="))
    return " ".join("@num" if w.startswith("@num=") else w for w in words), literals


def _phrases(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key) or []
    if not isinstance(value, list):
        raise TaxonomyError(f"{where}: `{key}` must be a list")
    return tuple(v if v in MARKERS else _phrase(v) for v in map(str, value))


def _rule(entry: dict[str, Any], where: str) -> Rule:
    weak, context = _phrases(entry, "weak", where), _phrases(entry, "context", where)
    if not weak or not context:
        raise TaxonomyError(f"{where}: a rule needs both `weak` phrases and a `context` to confirm them")
    window = entry.get("window", 0)
    if not isinstance(window, int) or window < 0:
        raise TaxonomyError(f"{where}: `window` must be a whole number >= 0")
    return Rule(weak, context, window)


def _topic(entry: Any, i: int, source: str) -> Topic:
    slug = entry.get("slug") if isinstance(entry, dict) else None
    if not isinstance(slug, str) or not slug.isalnum() or slug != slug.lower():
        raise TaxonomyError(f"{source}: topics[{i}]: slug {slug!r} must be lower-case letters/digits only")
    where = f"{source}: topic {slug}"
    definition = str(entry.get("definition", "")).strip()
    if not definition:
        raise TaxonomyError(f"{where} needs a one-line `definition`")
    figures = _phrases(entry, "figures", where)
    plain = [f for f in figures if not TOKEN_MARKERS.intersection(f.split(" "))]
    if plain:
        raise TaxonomyError(f"{where}: `figures` phrases need a marker (@pct, @money, @num, @version): {plain}")
    strong = _phrases(entry, "strong", where) + figures
    rules = [_rule(entry, where)] if "weak" in entry or "context" in entry else []
    for j, sub in enumerate(entry.get("rules") or []):
        if not isinstance(sub, dict):
            raise TaxonomyError(f"{where}: rules[{j}] must be a mapping with weak, context, window")
        rules.append(_rule(sub, f"{where} rules[{j}]"))
    both = set(strong) & {w for r in rules for w in r.weak}
    if both:
        raise TaxonomyError(f"{where}: {sorted(both)} are both strong and weak")
    veto, veto_after = _phrases(entry, "veto", where), _phrases(entry, "veto_after", where)
    if any(" " in v for v in (*veto, *veto_after)):
        raise TaxonomyError(f"{where}: veto entries must be single words")
    return Topic(
        slug=slug,
        definition=definition,
        examples=tuple(str(e) for e in entry.get("examples") or []),
        strong=strong,
        rules=tuple(rules),
        veto=frozenset(veto),
        veto_after=frozenset(veto_after),
        assets=frozenset(str(s) for s in entry.get("assets") or []),
        kinds=frozenset(str(k) for k in entry.get("kinds") or []),
    )


def parse_taxonomy(text: str, source: str = "taxonomy.yaml") -> list[Topic]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TaxonomyError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("topics"), list) or not data["topics"]:
        raise TaxonomyError(f"{source}: expected a mapping with a non-empty `topics:` list")
    topics = [_topic(entry, i, source) for i, entry in enumerate(data["topics"])]
    slugs = [t.slug for t in topics]
    dupes = sorted({s for s in slugs if slugs.count(s) > 1})
    if dupes:
        raise TaxonomyError(f"{source}: topics defined twice: {dupes}")
    return topics


def load_taxonomy(path: Path = TAXONOMY_PATH) -> tuple[Topic, ...]:
    """The topics of a taxonomy file; parsed once per file version."""
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise TaxonomyError(f"cannot read the topic taxonomy {path}: {exc}") from exc
    return _load_taxonomy(path.resolve(), mtime)


@lru_cache(maxsize=4)
def _load_taxonomy(path: Path, mtime_ns: int) -> tuple[Topic, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaxonomyError(f"cannot read the topic taxonomy {path}: {exc}") from exc
    return tuple(parse_taxonomy(text, str(path)))


class TopicMatcher:
    """All phrases of all topics in one dict; one pass over the tokens finds every hit.

    Strong phrases assign their topic at once. Each weak rule is a "group" with its own context, so a weak hit
    counts only when a context phrase of the same group is near enough.
    """

    def __init__(self, topics: tuple[Topic, ...], kind_of: dict[str, str]) -> None:
        self.topics = topics
        self.slugs = tuple(t.slug for t in topics)
        self.group_topic: list[int] = []  # group -> topic index
        self.group_window: list[int] = []
        # phrase -> [(topic or group index, role, topic, numbers)]: strong entries carry the topic, weak/context the
        # group; numbers: (position, number) the text must have there (``_literals``)
        self.table: dict[str, list[tuple[int, int, int, tuple[tuple[int, str], ...]]]] = {}
        self.prefixes: set[str] = set()  # proper prefixes of multi-word phrases, to stop extending early
        self.markers: list[tuple[int, str]] = []  # (group, marker) used as context
        self.asset_topics: dict[str, list[int]] = {}  # symbol -> topics its mention assigns
        for ti, topic in enumerate(topics):
            for phrase in topic.strong:
                self._add(phrase, ti, _STRONG)
            for rule in topic.rules:
                gi = len(self.group_topic)
                self.group_topic.append(ti)
                self.group_window.append(rule.window)
                for phrase in rule.weak:
                    self._add(phrase, gi, _WEAK)
                for phrase in rule.context:
                    if phrase in MARKERS:
                        self.markers.append((gi, phrase))
                    else:
                        self._add(phrase, gi, _CONTEXT)
            for symbol, kind in kind_of.items():
                if symbol in topic.assets or kind in topic.kinds:
                    self.asset_topics.setdefault(symbol, []).append(ti)
        self.veto = [t.veto for t in topics]
        self.veto_after = [t.veto_after for t in topics]
        self.vetoable = frozenset(ti for ti, t in enumerate(topics) if t.veto or t.veto_after)
        self.first_words = frozenset(p.split(" ")[0] for p in (*self.table, *self.prefixes))

    def _add(self, phrase: str, index: int, role: int) -> None:
        topic = index if role == _STRONG else self.group_topic[index]
        phrase, numbers = _literals(phrase)
        entries = self.table.setdefault(phrase, [])
        if (index, role, topic, numbers) not in entries:
            entries.append((index, role, topic, numbers))
        words = phrase.split(" ")
        for k in range(1, len(words)):
            self.prefixes.add(" ".join(words[:k]))

    def match(self, toks: Tokens, asset_positions: list[tuple[str, int]]) -> set[int]:
        """Indices of the topics the text has."""
        fired: set[int] = set()
        keys = toks.keys
        present = self.first_words.intersection(keys)
        if present:
            # 1. every phrase occurrence: (first token, token after it, table entries)
            table, prefixes = self.table, self.prefixes
            n = len(keys)
            found = []
            for i in [i for i, key in enumerate(keys) if key in present]:
                key = keys[i]
                hits = table.get(key)
                if hits:
                    found.append((i, i + 1, hits))
                stop = i + 1
                while key in prefixes and stop < n:  # longer phrases starting here ("price target", "up @pct")
                    key = f"{key} {keys[stop]}"
                    stop += 1
                    hits = table.get(key)
                    if hits:
                        found.append((i, stop, hits))
            # 2. strong phrases fire; weak ones wait for their context
            weak_hits: list[tuple[int, int]] = []  # (group, token index)
            context: dict[int, list[int]] = {}  # group -> token indices of its context phrases
            vetoable, veto, veto_after = self.vetoable, self.veto, self.veto_after
            lows = toks.lows
            for i, stop, hits in found:
                for index, role, topic, numbers in hits:
                    if numbers and any(lows[i + k] != number for k, number in numbers):
                        continue
                    if role == _CONTEXT:
                        context.setdefault(index, []).append(i)
                        continue
                    if topic in vetoable and (
                        (i and keys[i - 1] in veto[topic]) or (stop < n and keys[stop] in veto_after[topic])
                    ):
                        continue
                    if role == _STRONG:
                        fired.add(topic)
                    else:
                        weak_hits.append((index, i))
            if weak_hits:
                self._confirm(keys, asset_positions, weak_hits, context, fired)
        for symbol, _ in asset_positions:
            topics = self.asset_topics.get(symbol)
            if topics:
                fired.update(topics)
        return fired

    def _confirm(self, keys: list[str], asset_positions: list[tuple[str, int]], weak_hits: list[tuple[int, int]],
                 context: dict[int, list[int]], fired: set[int]) -> None:
        """Fire the topics of weak hits that have a context phrase (or marker) close enough."""
        groups = {gi for gi, _ in weak_hits}
        marks: dict[str, list[int]] = {}
        for gi, marker in self.markers:
            if gi not in groups:
                continue
            if marker not in marks:
                if marker == "@asset":
                    marks[marker] = [pos for _, pos in asset_positions]
                else:  # @crypto
                    marks[marker] = [i for i, key in enumerate(keys) if key in CRYPTO_WORDS]
            if marks[marker]:
                context.setdefault(gi, []).extend(marks[marker])
        for gi, pos in weak_hits:
            topic = self.group_topic[gi]
            where = context.get(gi)
            if topic in fired or not where:
                continue
            window = self.group_window[gi]
            if not window or any(p != pos and abs(p - pos) <= window for p in where):
                fired.add(topic)


@lru_cache(maxsize=1)
def topic_definitions() -> dict[str, str]:
    return {t.slug: t.definition for t in load_taxonomy()}
