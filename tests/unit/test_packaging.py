"""The wheel's package list (pyproject.toml lists it: the examples ship as engine_examples, which a find
cannot map) holds every package of the checkout, and the examples import each other relatively, so that they
run as engine_examples from an installed wheel as they run as examples in the checkout."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_lists_every_package_and_the_examples():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in ("engine", "agents", "cli") for init in (ROOT / top).rglob("__init__.py")}
    assert set(config["packages"]) == found | {"engine_examples"}
    assert config["package-dir"] == {"engine_examples": "examples"}
    assert (ROOT / "examples" / "__init__.py").exists()
    assert (ROOT / "engine" / "py.typed").exists()


def test_the_examples_import_each_other_relatively():
    absolute = re.compile(r"^\s*(from examples\b|import examples\b)", re.MULTILINE)
    offenders = [path.name for path in (ROOT / "examples").glob("*.py") if absolute.search(path.read_text())]
    assert offenders == []
