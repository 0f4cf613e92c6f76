"""Every setting as a command-line option: what `engine worker --name VALUE` gives reaches the worker's
settings (each field of engine.Settings, checked from the dataclass itself, with values and expectations
written here from the field's type, not from engine's own parsing), a bad value is one line naming the
option, and the options come after App(...) and ENGINE_* variables."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import cli.commands.worker as worker_command
from cli.main import build_parser, main
from engine import App, Settings

# Settings that no option gives, and why: the app's id is -A's; broker_options only App(...) takes (objects);
# the passwords never (a command line is seen by every user of the machine).
NO_OPTION = {"app_id", "broker_options", "sasl_password", "schema_registry_auth"}
HINTS = typing.get_type_hints(Settings, localns={"Mapping": typing.Mapping})
SECRET = "pw-from-the-environment"
PRECEDENCE_APP = App("precedence", broker="memory://precedence", web_port=7001, commit_interval=3,
                     processing_guarantee="exactly_once")


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def other_value(field: dataclasses.Field[Any], pem: Path) -> tuple[str, Any]:
    """A valid value of the field other than its default: (as typed on a command line, as Settings holds
    it). Text settings, which have no value to derive, say theirs here; the security ones fit together
    (SASL over TLS with a client certificate)."""
    default, kind = field.default, HINTS[field.name]
    words = [word for one in (kind, *typing.get_args(kind)) if typing.get_origin(one) is typing.Literal
             for word in typing.get_args(one)]
    texts = {"broker": "kafka://broker-a:9093,broker-b:9093", "store": "memory://", "web_host": "0.0.0.0",
             "group_instance_id": "worker-a", "security_protocol": "SASL_SSL",
             "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "app", "ssl_cafile": str(pem),
             "ssl_certfile": str(pem), "ssl_keyfile": str(pem),
             "schema_registry_url": "https://registry-a:8081/apis/ccompat/v7",
             "schema_registry_cafile": str(pem), "schema_registry_certfile": str(pem),
             "schema_registry_keyfile": str(pem)}
    if field.name in texts:
        return texts[field.name], texts[field.name]
    if kind is timedelta:
        return "7.25", timedelta(seconds=7.25)
    if kind is bool:
        return str(not default).lower(), not default
    if kind is Path:
        return "/srv/engine-data", Path("/srv/engine-data")
    if words and typing.get_origin(kind) is typing.Literal:
        [other, *_] = [word for word in words if word != default]
        return other, other
    if int in (kind, *typing.get_args(kind)):
        number = (default or 1) + 1
        return str(number), number
    raise AssertionError(f"{field.name}: no value to give it on a command line; add one here")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """The settings `engine worker` starts with: its run_worker and run_processes replaced by ones that take
    the settings as the real ones do (run_worker: app.settings(overrides)) and return."""
    found: list[Settings] = []

    async def run_worker(app: App, overrides: Any = None) -> None:
        found.append(app.settings(overrides))

    async def run_processes(settings: Settings, command: list[str], count: int) -> int:
        found.append(settings)
        return 0

    monkeypatch.setattr(worker_command, "run_worker", run_worker)
    monkeypatch.setattr(worker_command, "run_processes", run_processes)
    for name in HINTS:
        monkeypatch.delenv(f"ENGINE_{name.upper()}", raising=False)
    return found


def test_every_setting_given_on_the_command_line_reaches_the_workers_settings(started, monkeypatch, tmp_path):
    pem = tmp_path / "ca.pem"
    pem.write_text("")
    monkeypatch.setenv("ENGINE_SASL_PASSWORD", SECRET)
    fields = [f for f in dataclasses.fields(Settings) if f.name not in NO_OPTION]
    given = {f.name: other_value(f, pem) for f in fields}
    argv = [word for name, (text, _) in given.items() for word in (option(name), text)]
    assert main(["worker", "-A", "examples.wordcount:app", *argv]) == 0
    [settings] = started
    for name, (text, expected) in given.items():
        assert getattr(settings, name) == expected, f"{option(name)} {text}"
        assert expected != Settings.__dataclass_fields__[name].default, f"{name}: give another value"
    assert settings.sasl_password == SECRET  # from the environment, with the options


def test_every_command_takes_the_settings_less_those_no_command_line_gives():
    parser = build_parser()
    [commands] = [a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)]
    every = {option(f.name) for f in dataclasses.fields(Settings)}
    for name, command in commands.choices.items():
        shown = {o for action in command._actions if action.help != argparse.SUPPRESS
                 for o in action.option_strings}
        assert shown & every == every - {option(n) for n in NO_OPTION}, f"engine {name}"


def test_the_password_on_a_command_line_is_refused_without_showing_it(started, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["worker", "-A", "examples.wordcount:app", "--sasl-password", SECRET])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.splitlines()[-1] == ("engine worker: error: --sasl-password is never given on a command line "
                                    "(every user of the machine sees it, shell histories keep it): set "
                                    "ENGINE_SASL_PASSWORD")
    assert SECRET not in err
    assert "sasl_password" not in vars(build_parser().parse_args(["worker", "-A", "x"]))
    assert started == []


def test_precedence_app_then_environment_then_option(started, monkeypatch):
    monkeypatch.setenv("ENGINE_WEB_PORT", "7002")
    monkeypatch.setenv("ENGINE_COMMIT_INTERVAL", "4")
    assert main(["worker", "-A", "tests.unit.cli.test_settings_options:PRECEDENCE_APP",
                 "--web-port", "7003"]) == 0
    [settings] = started
    assert settings.web_port == 7003  # App < ENGINE_* < option
    assert settings.commit_interval == timedelta(seconds=4)  # App < ENGINE_*
    assert settings.processing_guarantee == "exactly_once"  # App alone
    assert settings.broker == "memory://precedence"


@pytest.mark.parametrize(("argv", "expected"), [
    (["--web-port", "80a"], "--web-port 80a: expected an integer"),
    (["--web-port", "70000"], "--web-port 70000: expected a port number (0: any free port)"),
    (["--commit-interval", "soon"], "--commit-interval soon: expected a number of seconds"),
    (["--commit-interval", "0"], "--commit-interval 0: expected a positive duration (seconds or timedelta)"),
    (["--tracing", "maybe"], "--tracing maybe: expected true or false"),
    (["--processing-guarantee", "exactly-once"],
     "--processing-guarantee exactly-once: expected one of ('at_least_once', 'exactly_once')"),
    (["--processes", "many"], "--processes many: expected an integer or 'auto'"),
    (["--group-instance-id", "a b"],
     "--group-instance-id 'a b': expected 'auto' or 1-200 letters, digits, '.', '_' or '-'"),
    (["--broker", "kafka://nohost"], "--broker kafka://nohost: 'nohost' is not host:port; expected "
                                     "kafka://host:port[,host:port...] or memory://[name]"),
])
def test_a_bad_value_is_one_line_naming_the_option(started, capsys, argv, expected):
    for command in (["worker"], ["topics"]):
        assert main([*command, "-A", "examples.wordcount:app", *argv]) == 1
        assert capsys.readouterr().err == f"engine: {expected}\n"
    assert started == []


def test_a_worker_processs_members_get_every_option_but_what_sets_them_apart(monkeypatch, tmp_path):
    """`engine worker --processes N` runs each member with a command line of its own and the settings that
    set it apart in its environment (engine.processes.member_environment): a member's settings are the
    supervisor's but for those."""
    from engine.tools import member_environment

    for name in HINTS:
        monkeypatch.delenv(f"ENGINE_{name.upper()}", raising=False)
    args = build_parser().parse_args([
        "worker", "-A", "examples.wordcount:app", "--processes", "2", "--data-dir", str(tmp_path),
        "--web-port", "7100", "--group-instance-id", "w", "--processing-guarantee", "exactly_once",
        "--tracing", "true", "--commit-interval", "0.5", "--broker", "kafka://b:9092"])
    app = App("members")
    supervisor = app.settings(worker_command.given_settings(args))
    command = worker_command.member_command(args, supervisor)
    assert command[1:4] == ["-m", "cli.main", "worker"]
    for variable, value in member_environment(supervisor, 1).items():
        monkeypatch.setenv(variable, value)
    member = app.settings(worker_command.given_settings(build_parser().parse_args(command[3:])))
    assert member == dataclasses.replace(supervisor, data_dir=tmp_path / "1", web_port=7101, processes=1,
                                         group_instance_id="w-1")
