"""The reference pages say what the code does: every setting with its default, every command with its
options; and the README's two commands are the ones the project runs."""

from __future__ import annotations

import dataclasses

from engine.settings import Settings
from engine.settings_docs import setting_docs
from engine.settings_load import coerce
from tests.unit.docs import app_signature, cli_reference, settings_reference
from tests.unit.docs.markdown import ROOT, blocks, pages


def test_the_cli_page_is_the_parsers_own() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    assert page == cli_reference.render(), (
        "docs/cli.md differs from the CLI's parser: python -m tests.unit.docs.cli_reference > docs/cli.md")


def test_the_settings_page_is_made_from_the_settings() -> None:
    """docs/settings.md's table is engine.Settings' own: every setting, its default and its description."""
    page = settings_reference.PAGE.read_text()
    start, end = settings_reference.page_table(page)
    assert page[start:end] == settings_reference.render_table(), (
        "docs/settings.md's table differs from engine/settings.py: "
        "python -m tests.unit.docs.settings_reference")


def test_every_default_is_written_as_a_variable_gives_it() -> None:
    """The default the page and the help show, read back the way engine reads ENGINE_* text, is the
    default (a setting without one: none)."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    for setting in setting_docs():
        field = fields[setting.name]
        given = field.default_factory is not dataclasses.MISSING
        default = field.default_factory() if given else field.default
        if setting.default == "none":
            assert not default, f"{setting.name}: its default is {default!r}, not none"
        else:
            assert coerce(setting.name, setting.default) == default, f"{setting.name}: {setting.default!r}"


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    said = readme.index("`.ci/run` runs exactly this command")
    [command] = [b.code.strip() for b in blocks(ROOT / "README.md")
                 if b.language == "bash" and readme.index(b.code) > said][:1]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert ci == [command]


def test_the_readmes_first_app_is_the_example_app() -> None:
    """The README shows examples/wordcount.py, which tests/integration/test_wordcount.py runs on Kafka."""
    [first, *_] = [b for b in blocks(ROOT / "README.md") if b.language == "python"]
    example = (ROOT / "examples" / "wordcount.py").read_text().split('"""', 2)[2]  # past its docstring

    def code(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.strip()]

    assert code(first.code) == code(example)


def test_every_engine_command_line_of_the_docs_parses() -> None:
    """The `engine ...` lines of the docs' shell blocks are command lines the CLI accepts as they are."""
    import contextlib
    import io
    import shlex

    from cli.main import build_parser

    lines = [(b.where, line) for page in pages() for b in blocks(page) if b.language == "bash"
             for line in b.code.splitlines()]
    commands = [(where, words[1:]) for where, line in lines
                if (words := shlex.split(line, comments=True)) and words[0].endswith("engine")]
    assert len(commands) > 10  # (the pages' examples, found)
    for where, argv in commands:
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors):
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                raise AssertionError(f"{where}: engine {shlex.join(argv)}: {errors.getvalue()}") from None


def test_every_code_fence_of_the_docs_is_closed() -> None:
    """A fence left open swallows the rest of its page, and the blocks in it would go untested."""
    for page in pages():
        fences = [line for line in page.read_text().splitlines() if line.lstrip().startswith("```")]
        assert len(fences) == 2 * len(blocks(page)), f"{page.relative_to(ROOT)}: a code fence is not closed"


def test_the_apps_keyword_arguments_are_the_settings() -> None:
    """App(...)'s keyword arguments (what editors and help() show) are engine.Settings' own: every setting,
    the types it is given as, its description."""
    source = app_signature.PAGE.read_text()
    start, end = app_signature.block(source)
    assert source[start:end] == app_signature.render(), (
        "engine/app.py's App.__init__ differs from engine/settings.py: "
        "python -m tests.unit.docs.app_signature")
