"""Where settings come from, and the one rule that reads them: defaults < the arguments given to `App(...)`
< `ENGINE_*` environment variables < command-line options, the environment read here only. Text (a variable,
an option) becomes the setting's type by its annotation (`coerce`); a bad value is named as the user gave it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import os
import shlex
import typing
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.errors import BadSetting, ConfigError
from engine.settings import Settings, fail

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
ENV_PREFIX = "ENGINE_"
# Variables of engine's own tools that share the prefix but are not settings (the test suite's broker).
NOT_SETTINGS = frozenset({"ENGINE_TEST_KAFKA", "ENGINE_KAFKA_CACHE"})
# Only an App(...) argument: no text can say it (engine's clients' own objects, an ssl_context).
APP_ONLY = frozenset({"broker_options"})
# Each setting's type, resolved from its annotation: what coerce turns text into.
SETTING_TYPES: dict[str, Any] = typing.get_type_hints(Settings, localns={"Mapping": collections.abc.Mapping})


def variable_name(name: str) -> str:
    """The environment variable that gives setting `name`: ENGINE_WEB_PORT."""
    return ENV_PREFIX + name.upper()


def option_name(name: str) -> str:
    """The command-line option that gives setting `name`: --web-port."""
    return "--" + name.replace("_", "-")


def literals(name: str) -> tuple[object, ...]:
    """The words a setting takes besides its type's values: ('dlq', 'stop'), ('auto',) of `processes`."""
    kind = SETTING_TYPES[name]
    kinds = (kind,) if typing.get_origin(kind) is Literal else typing.get_args(kind)
    return tuple(word for one in kinds if typing.get_origin(one) is Literal for word in typing.get_args(one))


def coerce(name: str, value: Any) -> Any:
    """Turn a user-given value into the setting's type, by its annotation: the one rule for every source (an
    App argument, an ENGINE_* variable, a command-line option). Text: a duration is a number of seconds, a
    bool true/false (yes/no, on/off, 1/0), an int an int, a setting that also takes words (`processes`:
    'auto') the word or an int. A value that does not parse is a ConfigError; what parses is validated by
    Settings."""
    kind = SETTING_TYPES[name]
    kinds = typing.get_args(kind) or (kind,)
    try:
        if kind is timedelta and not isinstance(value, timedelta):
            return timedelta(seconds=float(value))
        if kind is bool and isinstance(value, str):
            if value.lower() not in _TRUE | _FALSE:
                raise ValueError(value)
            return value.lower() in _TRUE
        if kind is Path:
            return Path(value)
        if int in kinds and isinstance(value, str) and value not in literals(name):
            return int(value)
    except (TypeError, ValueError):
        words = " or ".join(repr(word) for word in literals(name))
        fail(name, value, "expected a number of seconds" if kind is timedelta
              else "expected true or false" if kind is bool
              else f"expected an integer or {words}" if words else "expected an integer")
    return value


def _did_you_mean(name: str, known: Collection[str], spell: Callable[[str], str] = str) -> str:
    """`: did you mean x?` for the known setting closest to a misspelled `name` (written as `spell` writes
    it: an option, a variable), if one is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.7)
    return f": did you mean {spell(close[0])}?" if close else ""


def load_settings(
    app_id: str,
    given: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build and validate Settings: defaults < `given` (App arguments) < ENGINE_* env < `overrides` (the
    command line's options; a value None is not given). A bad value from the environment or an option is named
    as the user wrote it (`--web-port abc: expected an integer`)."""
    known = {f.name for f in dataclasses.fields(Settings)} - {"app_id"}
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    for source, label in ((given, "App argument"), (overrides, "option")):
        for name in source:
            if name not in known or (label == "option" and name in APP_ONLY):
                raise ConfigError(f"unknown setting {name!r} ({label})"
                                  f"{_did_you_mean(name, known) or '; known: ' + ', '.join(sorted(known))}")
    env = os.environ if environ is None else environ
    for variable in sorted(env):
        name = variable[len(ENV_PREFIX):].lower()
        if variable.startswith(ENV_PREFIX) and variable not in NOT_SETTINGS and (
                name not in known or name in APP_ONLY):
            expected = ", ".join(variable_name(n) for n in sorted(known - APP_ONLY))
            close = "" if name in APP_ONLY else _did_you_mean(name, known - APP_ONLY, variable_name)
            why = (f"; {name} can only be given to App(...)" if name in APP_ONLY else close
                   or f"; known: {expected}")
            raise ConfigError(f"unknown setting {variable!r} (environment variable){why}")
    values: dict[str, Any] = dict(given)
    said: dict[str, str] = {}  # setting -> how the user wrote it, where it came from as text
    for name in known - APP_ONLY:
        raw = env.get(variable_name(name))
        if raw is not None:
            values[name], said[name] = raw, f"{variable_name(name)}={shlex.quote(raw)}"
    for name, value in overrides.items():
        values[name], said[name] = value, f"{option_name(name)} {shlex.quote(str(value))}"
    try:
        return Settings(app_id=app_id, **{k: coerce(k, v) for k, v in values.items()})
    except BadSetting as exc:
        if exc.setting not in said or exc.setting in SECRET:
            raise
        raise ConfigError(f"{said[exc.setting]}: {exc.expected}") from None


SECRET = frozenset(f.name for f in dataclasses.fields(Settings) if not f.repr)  # never shown, not in errors
