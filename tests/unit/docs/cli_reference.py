"""docs/cli.md, made from the `engine` command's own parser, so that the page says what the code accepts:
every command, its arguments and options with their help, and its example. A test checks the page against
it; after a change to the CLI, write it again with

    python -m tests.unit.docs.cli_reference > docs/cli.md
"""

from __future__ import annotations

import argparse

from cli.main import build_parser

INTRO = """# Command line

<!-- Written by tests/unit/docs/cli_reference.py from the parser of cli/main.py; a test checks it. -->

`engine COMMAND -A module:app [options]`: every command takes the app as `-A module:attribute`, or
`-A module` alone for `module:app`. `engine COMMAND --help` says the same as this page, and ends with an
example. Every setting ([settings](settings.md)) is an option of every command, `--name-with-dashes
VALUE`, read as its `ENGINE_*` variable is; settings come from the app's `App(...)` arguments, then the
`ENGINE_*` environment, then these options. The password of a secured cluster only from the environment
(`ENGINE_SASL_PASSWORD`), never on a command line. An error is one line that says what to do, and the
command exits nonzero.
"""


def render() -> str:
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    parsers: dict[str, argparse.ArgumentParser] = dict(commands.choices)
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    common = set.intersection(*({a.dest for a in p._actions} for p in parsers.values()))
    first = next(iter(parsers.values()))
    out = [INTRO, "## Options of every command\n", *_table([a for a in first._actions if a.dest in common])]
    for name, command in parsers.items():
        out += [f"## engine {name}\n", f"{_sentence(helps[name])}\n"]
        own = [a for a in command._actions if a.dest not in common]
        if own:
            out += _table(own)
        example = (command.epilog or "").removeprefix("example:\n").strip()
        out += ["Example:\n", "```bash", example, "```\n"]
    return "\n".join(out)


def _table(actions: list[argparse.Action]) -> list[str]:
    rows = ["| argument | what |", "|---|---|"]
    for action in actions:
        if action.help == argparse.SUPPRESS:
            continue
        rows.append(f"| `{_name(action)}` | {_cell(action.help or '')} |")
    return [*rows, ""]


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return str(action.metavar or action.dest)
    takes_value = action.nargs != 0
    metavar = action.metavar or action.dest.upper()
    return ", ".join(action.option_strings) + (f" {metavar}" if takes_value else "")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _sentence(text: str | None) -> str:
    text = text or ""
    return f"{text[:1].upper()}{text[1:]}."


if __name__ == "__main__":
    print(render(), end="")
