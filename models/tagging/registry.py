"""The curated asset registry (`registry.yaml`): loading, validation and the rows of `crypto_assets`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

REGISTRY_PATH = Path(__file__).resolve().with_name("registry.yaml")
KINDS = frozenset({"coin", "token", "stablecoin", "memecoin", "wrapped", "exchange"})
_SYMBOL = re.compile(r"^[A-Z0-9]{1,12}$")


class RegistryError(ValueError):
    """The registry file is malformed; the message names the entry and what to fix."""


@dataclass(frozen=True)
class Asset:
    symbol: str
    name: str
    aliases: tuple[str, ...]
    kind: str
    ambiguous: bool
    former_symbols: tuple[str, ...]
    # Names or aliases that are also ordinary words ("Near", "Flow"): they need a crypto word next to them.
    weak: tuple[str, ...] = ()
    # Names or aliases that are also an app, protocol, game or firm ("Uniswap", "Lido", "Axie Infinity"): the
    # name alone is the app; the token needs a token word or a price move next to it ("Uniswap token").
    app: tuple[str, ...] = ()
    since: date | None = None  # first day it traded (under any symbol); before it, no article names the asset
    renamed: date | None = None  # the day `symbol` replaced `former_symbols[0]` (MATIC -> POL on 2024-09-04)

    def symbol_on(self, day: date | datetime | None) -> str | None:
        """The symbol the asset had on ``day`` (the current one when no day is given); None before it traded."""
        if day is None:
            return self.symbol
        day = day.date() if isinstance(day, datetime) else day
        if self.renamed and day < self.renamed and self.former_symbols:
            return self.former_symbols[0]
        if self.since and day < self.since:
            return None
        return self.symbol

    def names(self) -> tuple[str, ...]:
        """The name followed by every alias."""
        return (self.name, *self.aliases)

    def row(self) -> dict[str, Any]:
        """A row of the warehouse table `crypto_assets`."""
        return {
            "symbol": self.symbol,
            "name": self.name,
            "aliases": list(self.aliases),
            "kind": self.kind,
            "ambiguous": self.ambiguous,
            "former_symbols": list(self.former_symbols),
            "since": self.since,
            "renamed": self.renamed,
        }


@dataclass(frozen=True)
class Company:
    """A firm that is not an asset, even when it issues one (Ripple, Tether, Binance)."""

    name: str
    assets: tuple[str, ...]


def _strings(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
        raise RegistryError(f"{where}: `{key}` must be a list of strings, got {value!r}")
    return tuple(str(v).strip() for v in value)


def _asset(entry: Any, where: str) -> Asset:
    if not isinstance(entry, dict):
        raise RegistryError(f"{where}: each asset must be a mapping with symbol, name, kind, got {entry!r}")
    unknown = set(entry) - {"symbol", "name", "aliases", "kind", "ambiguous", "weak", "app", "former_symbols",
                            "since", "renamed"}
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {sorted(unknown)}")
    symbol = str(entry.get("symbol", "")).strip()
    if not _SYMBOL.match(symbol):
        raise RegistryError(f"{where}: symbol {symbol!r} must be 1-12 upper-case letters or digits")
    where = f"{where} ({symbol})"
    name = str(entry.get("name", "")).strip()
    if not name:
        raise RegistryError(f"{where}: `name` is required")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise RegistryError(f"{where}: kind {kind!r} must be one of {sorted(KINDS)}")
    ambiguous = entry.get("ambiguous", False)
    if not isinstance(ambiguous, bool):
        raise RegistryError(f"{where}: `ambiguous` must be true or false, got {ambiguous!r}")
    aliases = _strings(entry, "aliases", where)
    weak = _strings(entry, "weak", where)
    known = {n.casefold() for n in (name, *aliases)}
    stray = [w for w in weak if w.casefold() not in known]
    if stray:
        raise RegistryError(f"{where}: weak names {stray} must also be the name or an alias")
    app = _strings(entry, "app", where)
    stray = [w for w in app if w.casefold() not in known]
    if stray:
        raise RegistryError(f"{where}: app names {stray} must also be the name or an alias")
    both = {w.casefold() for w in weak} & {w.casefold() for w in app}
    if both:
        raise RegistryError(f"{where}: {sorted(both)} cannot be both weak and app names; keep one")
    former = _strings(entry, "former_symbols", where)
    for old in former:
        if not _SYMBOL.match(old):
            raise RegistryError(f"{where}: former symbol {old!r} must be upper-case letters or digits")
    since, renamed = _date(entry, "since", where), _date(entry, "renamed", where)
    if renamed and not former:
        raise RegistryError(f"{where}: `renamed` needs `former_symbols` (the symbol used before that day)")
    return Asset(symbol, name, aliases, kind, ambiguous, former, weak, app, since, renamed)


def _date(entry: dict[str, Any], key: str, where: str) -> date | None:
    value = entry.get(key)
    if value is None or isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise RegistryError(f"{where}: `{key}` must be a date YYYY-MM-DD, got {value!r}") from None


class _Loader(yaml.SafeLoader):
    """YAML without implicit timestamps: an impossible date (2026-11-31) stays text for ``_date``, which names its
    entry, instead of a ValueError from inside the YAML parser that names nothing."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_registry(text: str, source: str = "registry.yaml") -> tuple[list[Asset], list[Company]]:
    """Parse and validate registry YAML; raise RegistryError naming the bad entry."""
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("assets"), list) or not data["assets"]:
        raise RegistryError(f"{source}: expected a mapping with a non-empty `assets:` list")
    assets = [_asset(entry, f"{source}: assets[{i}]") for i, entry in enumerate(data["assets"])]

    # Every symbol (current or former) and every name must point at one asset only.
    owner: dict[str, str] = {}
    for asset in assets:
        for sym in (asset.symbol, *asset.former_symbols):
            if sym in owner:
                raise RegistryError(f"{source}: symbol {sym} is used by both {owner[sym]} and {asset.symbol}")
            owner[sym] = asset.symbol
    name_owner: dict[str, str] = {}
    for asset in assets:
        for n in {n.casefold() for n in asset.names()}:
            if name_owner.get(n, asset.symbol) != asset.symbol:
                raise RegistryError(f"{source}: name {n!r} is used by both {name_owner[n]} and {asset.symbol}")
            name_owner[n] = asset.symbol

    companies: list[Company] = []
    for i, entry in enumerate(data.get("companies") or []):
        if not isinstance(entry, dict) or not str(entry.get("name", "")).strip():
            raise RegistryError(f"{source}: companies[{i}] must be a mapping with a `name`")
        unknown = set(entry) - {"name", "assets"}
        if unknown:
            raise RegistryError(f"{source}: companies[{i}]: unknown field(s) {sorted(unknown)}; use name, assets")
        issued = _strings(entry, "assets", f"{source}: companies[{i}]")
        missing = [s for s in issued if s not in owner]
        if missing:
            raise RegistryError(f"{source}: companies[{i}] ({entry['name']}) lists unknown assets {missing}")
        companies.append(Company(str(entry["name"]).strip(), issued))
    return assets, companies


def _cached(path: Path | None) -> tuple[tuple[Asset, ...], tuple[Company, ...]]:
    path = (path or REGISTRY_PATH).resolve()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise RegistryError(f"cannot read the asset registry {path}: {exc}") from exc
    return _load(path, mtime)


@lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int) -> tuple[tuple[Asset, ...], tuple[Company, ...]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RegistryError(f"cannot read the asset registry {path}: {exc}") from exc
    assets, companies = parse_registry(text, str(path))
    return tuple(assets), tuple(companies)


def load_registry(path: Path | None = None) -> list[Asset]:
    """The assets of the registry (default: the bundled `registry.yaml`); parsed once per file version."""
    return list(_cached(path)[0])


def load_companies(path: Path | None = None) -> list[Company]:
    """Firms that share a name with, or issue, an asset but are not tokens."""
    return list(_cached(path)[1])
