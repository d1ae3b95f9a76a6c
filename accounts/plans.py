"""The published plans, read from ``accounts/plans.yaml`` or from the file ``settings.plans_file`` names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

BUNDLED_PLANS = Path(__file__).resolve().parent / "plans.yaml"
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class PlansError(ValueError):
    """The plans file is missing or malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Plan:
    name: str  # lower-case id used by `keys create --plan`
    title: str
    price_usd: Decimal
    cu_per_day: int
    requests_per_second: float  # token-bucket rate; the burst equals the rate
    burst: int = 0  # bucket size: the rate, in whole requests (set from it when not given)

    def __post_init__(self) -> None:
        if self.burst <= 0:
            object.__setattr__(self, "burst", max(1, int(self.requests_per_second)))


def _field(path: Path, name: str, spec: dict[str, Any], key: str) -> Any:
    if key not in spec:
        raise PlansError(f"{path}: plan {name!r} has no {key!r}; every plan needs title, price_usd, cu_per_day, "
                         "requests_per_second")
    return spec[key]


def _plan(path: Path, name: str, spec: Any) -> Plan:
    if not isinstance(name, str) or not _NAME.match(name):
        raise PlansError(f"{path}: plan name {name!r} must be lower-case letters, digits, '-' or '_'")
    if not isinstance(spec, dict):
        raise PlansError(f"{path}: plan {name!r} must be a mapping of fields")
    try:
        price = Decimal(str(_field(path, name, spec, "price_usd")))
    except InvalidOperation:
        raise PlansError(f"{path}: plan {name!r}: price_usd must be a number such as \"19.99\"") from None
    cu = _field(path, name, spec, "cu_per_day")
    rate = _field(path, name, spec, "requests_per_second")
    if isinstance(cu, bool) or not isinstance(cu, int) or cu <= 0:
        raise PlansError(f"{path}: plan {name!r}: cu_per_day must be a positive integer, got {cu!r}")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or rate < 1:
        raise PlansError(f"{path}: plan {name!r}: requests_per_second must be a number >= 1, got {rate!r}")
    if price < 0:
        raise PlansError(f"{path}: plan {name!r}: price_usd must not be negative")
    return Plan(name=name, title=str(spec.get("title") or name.title()), price_usd=price, cu_per_day=cu,
                requests_per_second=float(rate))


def load_plans(path: Path | None = None) -> dict[str, Plan]:
    """Plans by name, from ``path`` (the configured override) or the bundled ``accounts/plans.yaml``."""
    path = Path(path) if path else BUNDLED_PLANS
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlansError(f"plans file {path} does not exist: fix CRYPTOWIRE_PLANS_FILE or remove it") from None
    except OSError as exc:  # a directory, no permission
        raise PlansError(f"plans file {path} cannot be read ({exc.strerror}): point CRYPTOWIRE_PLANS_FILE at a "
                         "YAML file or remove it") from None
    except yaml.YAMLError as exc:
        raise PlansError(f"plans file {path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("plans"), dict) or not doc["plans"]:
        raise PlansError(f"plans file {path} must have a top-level 'plans:' mapping with at least one plan")
    return {name: _plan(path, name, spec) for name, spec in doc["plans"].items()}
