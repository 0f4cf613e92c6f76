"""Tests share helpers through helper modules, never by importing a test module (which would tie one test
file's internals to another's and run its module-level set-up twice over)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_module_is_imported() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.relative_to(TESTS)}:{node.lineno} imports {name}" for name in names
                      if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")]
    assert found == []
