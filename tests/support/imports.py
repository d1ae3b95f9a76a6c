"""The modules a source file imports, read from its syntax tree (nothing is run)."""

from __future__ import annotations

import ast
from pathlib import Path


def imported(path: Path) -> set[str]:
    """Absolute imports of ``path``: ``import a.b`` gives ``a.b``, ``from a.b import c`` gives ``a.b``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found
