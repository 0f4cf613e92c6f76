"""The table of docs/settings.md, made from `engine.Settings` (engine.settings_docs: each field's `doc`
metadata and its default), so that the page says what the code takes. A test checks the page against it;
after a change to a setting, write the table again with

    python -m tests.unit.docs.settings_reference
"""

from __future__ import annotations

from engine.settings_docs import setting_docs
from tests.unit.docs.markdown import ROOT

PAGE = ROOT / "docs" / "settings.md"
HEADER = "| setting | default | what |\n|---|---|---|\n"


def render_table() -> str:
    rows = [f"| `{s.name}` | {'none' if s.default == 'none' else f'`{s.default}`'} | {s.text} |\n"
            for s in setting_docs()]
    return HEADER + "".join(rows)


def page_table(page: str) -> tuple[int, int]:
    """Where the table is on the page: from its header to the first line that is no row."""
    start = page.index(HEADER)
    end = page.find("\n\n", start)
    return start, end + 1 if end >= 0 else len(page)


def rewrite() -> None:
    page = PAGE.read_text()
    start, end = page_table(page)
    PAGE.write_text(page[:start] + render_table() + page[end:])


if __name__ == "__main__":
    rewrite()
