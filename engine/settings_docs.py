"""What a user is told about each setting, made from `engine.Settings` itself: its description (the
field's `doc` metadata, markdown), its default written as an ENGINE_* variable takes it, and the names it
goes by (ENGINE_WEB_PORT, --web-port). The settings reference (docs/settings.md, made by
tests/unit/docs/settings_reference.py) and the command line's options (cli.settings_options) are both made
from this, so neither repeats a description or a default."""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from engine.settings import Settings
from engine.settings_load import APP_ONLY, SECRET, SETTING_TYPES, literals, option_name, variable_name

_LINKED = re.compile(r" \(\[[^\]]*\]\([^)]*\)\)")  # " ([page](page.md))": a pointer to a page
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


@dataclass(frozen=True)
class SettingDoc:
    name: str
    text: str  # markdown, with links to the other pages of docs/
    default: str  # as an ENGINE_* variable or an option gives it; "none": no value
    metavar: str  # what an option takes: SECONDS, N, N|auto, true|false, dlq|stop...

    @property
    def option(self) -> str:
        return option_name(self.name)

    @property
    def variable(self) -> str:
        return variable_name(self.name)

    @property
    def plain(self) -> str:
        """The description as a terminal shows it: no links, no code marks."""
        return _LINK.sub(r"\1", _LINKED.sub("", self.text)).replace("`", "")

    @property
    def secret(self) -> bool:
        """Shown nowhere, and never given on a command line (which every user of the machine sees, and shell
        histories keep): only App(...) or its ENGINE_* variable give it."""
        return self.name in SECRET

    @property
    def on_command_line(self) -> bool:
        """Whether an option gives it: not the App-only ones, and never a secret."""
        return self.name not in APP_ONLY and not self.secret


def setting_docs() -> list[SettingDoc]:
    """Every setting, in the order Settings declares them (app_id aside: it is the app's, `-A`)."""
    return [SettingDoc(f.name, f.metadata["doc"], default_text(_default(f)), _metavar(f.name))
            for f in dataclasses.fields(Settings) if f.name != "app_id"]


def default_text(value: Any) -> str:
    """A value written as an ENGINE_* variable gives it (engine.settings_load.coerce reads it back)."""
    if value is None or value == {}:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}"
    return str(value)


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _metavar(name: str) -> str:
    kind = SETTING_TYPES[name]
    words = [str(word) for word in literals(name)]
    if kind is timedelta:
        return "SECONDS"
    if kind is bool:
        return "true|false"
    if kind is Path:
        return "DIR"
    if kind is int or int in typing.get_args(kind):
        return "|".join(["N", *words])
    return "|".join(words) or name.upper()
