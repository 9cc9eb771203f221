"""The modules a Python source file imports, read from its syntax tree (imports inside
functions included, which an import-time check cannot see). Used by the layering tests."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``import`` and ``from … import`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
    return found
