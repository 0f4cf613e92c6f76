"""engine reset -A module:app [--to-datetime WHEN | --shift-by N] [--intermediate TOPIC]... [--input TOPIC]...
[--execute]: make an app reprocess.

Prints the plan (each topic the app reads with its class, input, intermediate or internal, and each
partition's committed offset and where it goes; the internal topics deleted, the local state wiped); does it
only with --execute. Refused while a worker of the app runs, and while the plan cannot tell whether the app
writes a topic it reads (--intermediate and --input say, as Kafka Streams' --intermediate-topics does)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cli.loader import load_app
from cli.settings_options import given_settings
from engine import ConfigError
from engine.tools import ResetTarget, execute_reset, plan_reset

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("reset", help="rewind the app's inputs, delete its internal topics and local state",
                       example="engine reset -A examples.wordcount:app --to-datetime 2026-11-24T08:00:00 "
                               "--execute")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--to-datetime", metavar="WHEN",
                       help="ISO 8601 (e.g. 2026-11-24T08:00:00+00:00; UTC when no offset is given): inputs "
                            "go to the first record at or after it (default: to their start)")
    where.add_argument("--shift-by", type=int, metavar="N",
                       help="move each input's committed offset by N records (negative: back)")
    p.add_argument("--intermediate", action="append", default=[], metavar="TOPIC",
                   help="a topic the app writes and reads again: it goes to its end (repeatable; the plan "
                        "finds those its agents declare or send to by name)")
    p.add_argument("--input", action="append", default=[], metavar="TOPIC",
                   help="a topic the app reads that only others write: it goes back like every input "
                        "(repeatable)")
    p.add_argument("--execute", action="store_true", help="do it (without it, only the plan is printed)")
    p.set_defaults(run=run)


def _target(args: argparse.Namespace) -> ResetTarget:
    if args.to_datetime is not None:
        try:
            when = datetime.fromisoformat(args.to_datetime)
        except ValueError:
            raise ConfigError(f"--to-datetime {args.to_datetime!r} is not an ISO 8601 date and time "
                              "(e.g. 2026-11-24T08:00:00+00:00)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return ResetTarget(timestamp_ms=round(when.timestamp() * 1000))
    return ResetTarget(shift_by=args.shift_by)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    settings = app.settings(given_settings(args))
    if settings.transport_scheme == "memory":
        raise ConfigError(f"engine reset cannot reach {settings.broker}: an in-memory broker lives inside "
                          "the worker's process; run it against Kafka (--broker kafka://host:port)")
    plan = asyncio.run(plan_reset(app, settings, _target(args), intermediate=args.intermediate,
                                  inputs=args.input))
    for line in plan.lines():
        print(line)
    if not args.execute:
        print("nothing done: run again with --execute to do it")
        return 0
    asyncio.run(execute_reset(plan, settings))
    print(f"reset done: the next start of {app.id} reprocesses from there")
    return 0
