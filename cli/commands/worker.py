"""engine worker -A module:app: run a worker until SIGTERM/SIGINT; with --processes N, N of them, each its
own process, under this one (engine.processes)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from cli.loader import load_app
from engine import run_worker
from engine.tools import process_count, run_on_loop, run_processes, summarise_repeats

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run a worker for the app, until SIGTERM or Ctrl-C",
                       example="engine worker -A examples.wordcount:app --data-dir data --processes auto")
    p.add_argument("--data-dir", help="where local state lives (default: ./data)")
    p.add_argument("--processes", metavar="N|auto",
                   help="run N workers of the app, each its own process (its data dir DATA_DIR/<index>, its "
                        "web port WEB_PORT+<index>), under this one, which restarts a crashed one; auto: one "
                        "per core (default: 1, the worker runs in this process)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    overrides = {"broker": args.broker, "data_dir": args.data_dir, "processes": args.processes}
    settings = app.settings(overrides)
    summarise_repeats()  # a broker restart makes aiokafka repeat one error thousands of times
    count = process_count(settings.processes)
    if count > 1:  # (the supervisor handles no events: asyncio's own loop, whose subprocesses it knows best)
        return run_on_loop(run_processes(settings, member_command(args), count), "asyncio")
    logging.getLogger("engine").info("starting worker for %s", app.id)
    run_on_loop(run_worker(app, overrides), settings.event_loop)
    return 0


def member_command(args: argparse.Namespace) -> list[str]:
    """The command line of one member process: this command as given, less what the supervisor gives each
    member in its environment (its data dir, its processes: 1). The security options reach it as ENGINE_*
    variables (cli.main)."""
    broker = ["--broker", args.broker] if args.broker else []
    return [sys.executable, "-m", "cli.main", "worker", "-A", args.app, "--loglevel", args.loglevel, *broker]
