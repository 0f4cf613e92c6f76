"""The settings as command-line options: one `--name-with-dashes VALUE` per setting of `engine.Settings`,
made from its own description (engine.tools.setting_docs), given to engine as the text the user typed, so
that engine reads it with the same rule and checks it the same way as an ENGINE_* variable
(engine.settings_load: App(...) < ENGINE_* < these options). The SASL password has none: a command line is
seen by every user of the machine and kept in shell histories (ENGINE_SASL_PASSWORD gives it).

Every command takes every setting. The settings are the app's, whichever command reads them, with the same
three sources for each: ENGINE_* variables reach every command whole, and so do these options, so that one
set of them serves every command (`engine worker $SETTINGS`, `engine status $SETTINGS`) and one page lists
them (docs/cli.md, "Options of every command"). A command reads those it needs (the broker and security
ones, `--data-dir` for the local stores, the topic ones for the topology); the others are checked and left
unused, as the environment's are.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from engine.tools import setting_docs

if TYPE_CHECKING:
    from collections.abc import Mapping


def add_setting_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "settings", "Each overrides the app's App(...) argument and its ENGINE_* variable; a duration is in "
                    "seconds. The secrets (the SASL password, the schema registry's auth) only as their "
                    "ENGINE_* variables, never on a command line.")
    for setting in setting_docs():
        if setting.on_command_line:
            text = f"{setting.plain} (default: {setting.default}; {setting.variable})"
            group.add_argument(setting.option, dest=setting.name, metavar=setting.metavar,
                               help=text.replace("%", "%%"))
        elif setting.secret:  # refused by name, so that argparse does not echo it as an unknown argument
            group.add_argument(setting.option, action=_Refused, variable=setting.variable,
                               default=argparse.SUPPRESS, help=argparse.SUPPRESS)


class _Refused(argparse.Action):
    """An option a secret setting would have: refused in one line that says where it goes, the value not
    shown."""

    def __init__(self, *args: Any, variable: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.variable = variable

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} is never given on a command line (every user of the machine sees it, "
                     f"shell histories keep it): set {self.variable}")


def given_settings(args: argparse.Namespace) -> dict[str, str]:
    """The settings the command line gave, as the user typed them: the overrides of `App.settings`."""
    return {s.name: value for s in setting_docs()
            if s.on_command_line and (value := getattr(args, s.name, None)) is not None}


def as_options(given: Mapping[str, str]) -> list[str]:
    """`given_settings` written back as command-line options (a member process's command line)."""
    named = {s.name: s.option for s in setting_docs()}
    return [word for name, value in given.items() for word in (named[name], value)]
