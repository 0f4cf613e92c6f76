"""No room reaches into another room's privates: `x._name` (x not `self`, `cls` or `super()`) names only what
its own module defines. A class's privates are its module's business; what another module needs of it is
public, so that a change inside a room is seen to be safe by reading that room alone.

The quarantines of third-party privates are exempt (each use explained and contract-tested there), and
the standard library's few privates that Python documents for use are listed with why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "agents", "cli")
QUARANTINES = {"engine/transport/aiokafka_private.py", "engine/transport/aiokafka_private_fetch.py",
               "engine/export/pyspark_private.py"}
STANDARD = {
    "sys._current_frames",  # every thread's frame: the blocked-loop watch's stack of the loop thread
    "argparse._SubParsersAction",  # the parser's subcommands, to list them (argparse gives no public name)
}


def defined_privates(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, attributes it assigns, slots it declares."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # (a __slots__ entry, a setattr's name)
    return {name for name in names if name.startswith("_")}


def reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    own = defined_privates(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in own:
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            continue
        text = ast.unparse(node)
        if text not in STANDARD:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")
    return found


def test_no_module_reaches_into_another_modules_privates() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if str(path.relative_to(ROOT)) not in QUARANTINES:
                found += reaches(path)
    assert found == []


def test_the_check_sees_a_reach_and_lets_a_modules_own_privates_be() -> None:
    """(The check itself: it must flag what it is for.)"""
    source = ("class A:\n    def __init__(self):\n        self._mine = 1\n\n"
              "def f(a, b):\n    return a._mine + b._theirs + b.__class__.__name__\n")
    tree = ast.parse(source)
    assert defined_privates(tree) >= {"_mine"}
    sample = ROOT / "build" / "private_access_sample.py"
    sample.parent.mkdir(exist_ok=True)
    sample.write_text(source)
    try:
        assert reaches(sample) == ["build/private_access_sample.py:6: b._theirs"]
    finally:
        sample.unlink()
