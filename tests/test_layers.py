"""The direction of dependencies, read from every module's import statements: the server (`api`) stays small and
`models` and `warehouse` stay usable without Dagster (docs: README, "Layout")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.imports import imported

PROJECT = Path(__file__).resolve().parents[1]
# package -> the top-level modules it must never import, at any depth of its tree
BANNED = {
    "api": {"pipeline", "models", "torch", "transformers", "dagster"},
    "models": {"pipeline", "api", "accounts", "dagster"},
    "warehouse": {"pipeline", "api", "accounts", "models", "dagster", "torch", "transformers"},
}



@pytest.mark.parametrize("package", sorted(BANNED))
def test_package_imports_nothing_above_it(package: str) -> None:
    bad = {str(p.relative_to(PROJECT)): sorted(m for m in imported(p) if m.split(".")[0] in BANNED[package])
           for p in sorted((PROJECT / package).rglob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}
