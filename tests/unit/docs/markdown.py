"""The documentation's pages and their code blocks, as the tests of the docs read them.

The pages are README.md and every Markdown file under docs/ (the site mkdocs.yml builds). A Python block is an
example a reader copies: it runs in the tests, in order with the blocks before it on its page (a page is read
top to bottom, so a later block may use what an earlier one defined). A block that cannot run by itself (it
needs a Spark session, a lake table on disk) says so on the line before its fence:

    <!-- fragment: needs a SparkSession and an exported table -->

and the tests check that it really cannot: run where it stands, it must fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_FENCE = re.compile(r"^(?P<indent> *)```(?P<language>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                    re.DOTALL | re.MULTILINE)
_FRAGMENT = re.compile(r"<!--[ \t]*fragment:[ \t]*(?P<reason>[^\n]*?)[ \t]*-->\s*\Z")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the block's first line of code, 1-based
    language: str
    code: str
    fragment: str | None  # why it cannot run alone, or None: it runs

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def compiled(self) -> object:
        """The code, compiled so that a traceback names the page and its line there."""
        # (dont_inherit: not this module's `from __future__ import annotations`, which a reader's code lacks)
        return compile("\n" * (self.line - 1) + self.code, str(self.page.relative_to(ROOT)), "exec",
                       dont_inherit=True)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        indent = len(match["indent"])
        code = "".join(line[indent:] for line in match["code"].splitlines(keepends=True))
        fragment = _FRAGMENT.search(text, 0, match.start())
        found.append(Block(page=page, line=text.count("\n", 0, match.start("code")) + 1,
                           language=match["language"], code=code,
                           fragment=fragment["reason"] if fragment else None))
    return found


def python_blocks(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.language == "python"]


def generated_block(source: str, begin: str, end: str) -> tuple[int, int]:
    """Where in `source` the block a generator writes between the lines `begin` and `end` (included) is."""
    start = source.index(begin)
    return start, source.index(end, start) + len(end)


def rewrite_block(page: Path, begin: str, end: str, block: str) -> None:
    """Write `block` (its `begin` and `end` lines included) over the generated block of `page`."""
    source = page.read_text()
    start, stop = generated_block(source, begin, end)
    page.write_text(source[:start] + block + source[stop:])
