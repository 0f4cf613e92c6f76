"""The README's test examples run as they are written: a reader copies them into a test file."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def block_defining(test: str, prefix: str = "\ndef") -> str:
    [block] = [b for b in python_blocks() if f"{prefix} {test}(" in f"\n{b}"]
    return block


@pytest.mark.parametrize("test", ["test_counts_words", "test_hourly_clicks"])
def test_the_readmes_driver_examples_pass_as_written(test: str) -> None:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(block_defining(test), f"README.md:{test}", "exec"), namespace)
    namespace[test]()


def test_the_readmes_async_example_has_its_marker_and_passes(tmp_path: Path) -> None:
    """Without a marker pytest-asyncio's default (strict) mode refuses an async test; this project's
    asyncio_mode = "auto" would hide that, so the marker is checked here."""
    block = block_defining("test_counts", "\nasync def")
    assert "@pytest.mark.asyncio\nasync def test_counts(" in re.sub(r" *#.*", "", block)
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(block, "README.md:test_counts", "exec"), namespace)
    asyncio.run(namespace["test_counts"](tmp_path))
