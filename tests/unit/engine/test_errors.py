"""One error tree: every error engine defines is in engine/errors.py, exported from `engine`, and drawn in
its docstring (and the docs) as the classes are."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import engine
import engine.errors
from tests.unit.docs import error_tree


def engine_modules() -> list[str]:
    """Every module of the package that imports here (those of an extra not installed are left out)."""
    found = []
    for module in pkgutil.walk_packages(engine.__path__, "engine."):
        try:
            importlib.import_module(module.name)
        except ImportError:
            continue
        found.append(module.name)
    return found


def test_every_error_engine_defines_is_in_the_one_tree_and_exported() -> None:
    assert len(engine_modules()) > 100
    outside = []
    pending = [engine.errors.EngineError]
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls.__module__.startswith("engine.") and cls.__module__ != "engine.errors":
            outside.append(f"{cls.__module__}.{cls.__name__}")
    assert outside == [], "errors defined outside engine/errors.py"
    tree = {name for name, cls in vars(engine.errors).items()
            if inspect.isclass(cls) and issubclass(cls, engine.errors.EngineError)}
    assert tree - set(engine.__all__) == set(), "errors not exported from engine"
    assert all(getattr(engine, name) is getattr(engine.errors, name) for name in tree)


def test_the_docstring_draws_the_tree_the_classes_make() -> None:
    drawn = [re.match(r"[│├└─ ]*\w+", line).group(0)  # type: ignore[union-attr]
             for line in error_tree.docstring_tree()]
    assert drawn == error_tree.class_tree()


def test_the_docs_show_the_tree() -> None:
    page = error_tree.PAGE.read_text()
    start, end = error_tree.block(page)
    assert page[start:end] == error_tree.render(), (
        "docs/agents-and-streams.md's error tree differs from engine/errors.py: "
        "python -m tests.unit.docs.error_tree")
