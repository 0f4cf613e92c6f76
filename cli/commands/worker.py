"""engine worker -A module:app: run a worker until SIGTERM/SIGINT; with --processes N, N of them, each its
own process, under this one (engine.processes)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from cli.loader import load_app
from cli.settings_options import as_options, given_settings
from engine import run_worker
from engine.tools import (
    member_environment,
    process_count,
    run_on_loop,
    run_processes,
    setting_docs,
    summarise_repeats,
)

if TYPE_CHECKING:
    import argparse

    from engine import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run a worker for the app, until SIGTERM or Ctrl-C",
                       example="engine worker -A examples.wordcount:app --data-dir data --processes auto "
                               "--web-port 8080 --processing-guarantee exactly_once")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    overrides = given_settings(args)
    settings = app.settings(overrides)
    summarise_repeats()  # a broker restart makes aiokafka repeat one error thousands of times
    count = process_count(settings.processes)
    if count > 1:  # (the supervisor handles no events: asyncio's own loop, whose subprocesses it knows best)
        return run_on_loop(run_processes(settings, member_command(args, settings), count), "asyncio")
    logging.getLogger("engine").info("starting worker for %s", app.id)
    run_on_loop(run_worker(app, overrides), settings.event_loop)
    return 0


def member_command(args: argparse.Namespace, settings: Settings) -> list[str]:
    """The command line of one member process: this command as given, less the settings the supervisor gives
    each member in its environment (member_environment: its data dir, its web port, its processes: 1...),
    which an option would override."""
    own = {s.name for s in setting_docs() if s.variable in member_environment(settings, 0)}
    given = {name: value for name, value in given_settings(args).items() if name not in own}
    return [sys.executable, "-m", "cli.main", "worker", "-A", args.app, "--loglevel", args.loglevel,
            *as_options(given)]
