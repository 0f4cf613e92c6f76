"""engine tables / engine table get: the app's tables and what the local stores hold."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cli.loader import load_app
from engine.tools import (
    MISSING,
    dumps,
    local_partitions,
    parse_key,
    planned_partitions,
    read_key,
    table_named,
)

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tables = sub.add_parser("tables", help="list tables, their partitions and local sizes")
    tables.add_argument("--data-dir", help="the worker's data dir (default: ./data)")
    tables.set_defaults(run=run_tables)
    table = sub.add_parser("table", help="read a table's local store")
    table.add_argument("action", choices=["get"])
    table.add_argument("table")
    table.add_argument("key", help="the key, as text (JSON for JSON-keyed tables)")
    table.add_argument("--data-dir", help="the worker's data dir (default: ./data)")
    table.set_defaults(run=run_table)


def run_tables(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    settings = app.settings({"broker": args.broker, "data_dir": args.data_dir})
    infos = local_partitions(app, settings)
    print(f"{'table':24} {'kind':9} {'changelog':40} {'partitions':>10} {'local keys':>10}")
    for table in app.tables.values():
        mine = [i for i in infos if i.table == table.name]
        kind = "windowed" if table.window is not None else table.kind
        partitions = planned_partitions(table.changelog_topic, settings)
        print(f"{table.name:24} {kind:9} {table.changelog_topic.name:40} {partitions:>10} "
              f"{sum(i.keys for i in mine):>10}")
        if table.window is not None:
            print(f"  windows: {table.window}")
        for info in mine:
            windows = "" if info.windows is None else f" in {info.windows} windows"
            print(f"  partition {info.partition}: {info.keys} keys{windows}, changelog offset "
                  f"{info.changelog_offset}")
    return 0


def run_table(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    settings = app.settings({"broker": args.broker, "data_dir": args.data_dir})
    table = table_named(app, args.table)
    key = parse_key(table, args.key)
    partition, value = read_key(app, settings, args.table, key)
    if value is MISSING:
        print(f"{args.table}[{args.key!r}]: no such key in the local stores (partition {partition})")
        return 1
    print(dumps(value).decode())
    return 0
