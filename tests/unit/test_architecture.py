"""ARCHITECTURE.md is read as the map: its drawing of engine's floors is the import contract's, and it is
short sections, not wide tables (no line past the code's line length)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def drawn_floors() -> list[str]:
    """The floors drawn in ARCHITECTURE.md, highest first, as the contract writes them ("a | b", "a : b")."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = text[text.index("```\n top"):]
    block = block[4:block.index("```", 4)]
    floors: list[str] = []
    for line in block.splitlines():
        rooms = re.split(r"\s{2,}", line[12:].strip())[0] if len(line) > 12 else ""
        if not rooms:
            continue
        if floors and floors[-1].endswith(":"):
            floors[-1] += " " + rooms
        else:
            floors.append(rooms)
    return [floor.replace("│", "|") for floor in floors]


def test_the_floors_drawn_are_the_contracts() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [floors] = [c["layers"] for c in contracts if c.get("containers") == ["engine"]]
    assert drawn_floors() == floors


def test_no_line_is_wider_than_the_code() -> None:
    lines = (ROOT / "ARCHITECTURE.md").read_text().splitlines()
    wide = [number for number, line in enumerate(lines, 1) if len(line) > 110]
    assert wide == []
