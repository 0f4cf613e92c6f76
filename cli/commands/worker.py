"""engine worker -A module:app: run a worker until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cli.loader import load_app
from engine import run_worker
from engine.tools import run_on_loop, summarise_repeats

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run a worker for the app, until SIGTERM or Ctrl-C",
                       example="engine worker -A examples.wordcount:app --data-dir data")
    p.add_argument("--data-dir", help="where local state lives (default: ./data)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    overrides = {"broker": args.broker, "data_dir": args.data_dir}
    summarise_repeats()  # a broker restart makes aiokafka repeat one error thousands of times
    logging.getLogger("engine").info("starting worker for %s", app.id)
    run_on_loop(run_worker(app, overrides), app.settings(overrides).event_loop)
    return 0
