"""The dependency rules of the accounts package: it imports warehouse.config only (never api, pipeline, models,
dagster or torch); the CLI's key commands use accounts, never api internals; APIS is listed in one place."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.imports import imported

PROJECT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("accounts", "api", "pipeline", "models", "warehouse", "tests", "bench")
BANNED_THIRD_PARTY = ("dagster", "torch", "transformers")



def test_accounts_imports_warehouse_config_only() -> None:
    bad = {}
    for path in sorted((PROJECT / "accounts").rglob("*.py")):
        for mod in imported(path):
            top = mod.split(".")[0]
            if (top in FIRST_PARTY and top != "accounts" and mod != "warehouse.config") or top in BANNED_THIRD_PARTY:
                bad.setdefault(path.name, []).append(mod)
    assert bad == {}


def test_the_key_commands_use_accounts_not_api() -> None:
    for rel in ("pipeline/commands/keys.py", "pipeline/up.py"):
        used = imported(PROJECT / rel)
        assert not [m for m in used if m.split(".")[0] == "api"], rel
        assert any(m.split(".")[0] == "accounts" for m in used), rel


def test_importing_accounts_loads_no_api_pipeline_dagster_or_torch() -> None:
    code = ("import sys, accounts, accounts.postgres, accounts.sqlite; "
            "print(sorted(m for m in ('api', 'pipeline', 'models', 'dagster', 'torch', 'starlette') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_api_names_are_listed_once() -> None:
    pattern = re.compile(r"""\(\s*["']news["']\s*,\s*["']events["']\s*,\s*["']pdf["']\s*\)|\[\s*["']news["']\s*,"""
                         r"""\s*["']events["']\s*,\s*["']pdf["']\s*\]""")
    found = [str(p.relative_to(PROJECT)) for top in ("accounts", "api", "pipeline", "warehouse")
             for p in (PROJECT / top).rglob("*.py") if pattern.search(p.read_text())]
    assert found == ["accounts/apis.py"]


def test_every_public_name_resolves() -> None:
    import accounts

    assert all(getattr(accounts, name) is not None for name in accounts.__all__)
