"""The README's test examples run as they are written: a reader copies them into a test file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def block_defining(test: str) -> str:
    [block] = [b for b in python_blocks() if f"def {test}(" in b]
    return block


@pytest.mark.parametrize("test", ["test_counts_words", "test_hourly_clicks"])
def test_the_readmes_driver_examples_pass_as_written(test: str) -> None:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(block_defining(test), f"README.md:{test}", "exec"), namespace)
    namespace[test]()
