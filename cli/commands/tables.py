"""engine tables / engine table get: the app's tables, what the local stores hold, and a key's value as a
running worker answers it (or, --offline, as this machine's stores hold it)."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from cli.loader import load_app
from cli.settings_options import given_settings
from engine import EngineError
from engine.tools import (
    MISSING,
    ask_worker,
    dumps,
    key_text,
    local_partitions,
    parse_key,
    parse_time_ms,
    planned_partitions,
    read_key,
    table_named,
)

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tables = sub.add_parser("tables", help="list tables, their partitions and local sizes",
                            example="engine tables -A examples.wordcount:app --data-dir data")
    tables.add_argument("--url", help="also ask the running worker at this web address (default: "
                                      "http://web_host:web_port of the app's settings, if one answers)")
    tables.set_defaults(run=run_tables)
    table = sub.add_parser("table", help="read a key of a table: asked of a running worker, or --offline "
                                         "from this machine's stores",
                           example="engine table get -A examples.wordcount:app word-counts fox")
    table.add_argument("action", choices=["get"], metavar="get", help="get: read the key (the one action)")
    table.add_argument("table", metavar="TABLE", help="the table's name")
    table.add_argument("key", metavar="KEY", help="the key, as text (JSON for JSON-keyed tables)")
    table.add_argument("--url", help="a running worker's web address (default: http://web_host:web_port of "
                                     "the app's settings); any worker of the app answers for every key")
    table.add_argument("--window", help="a windowed table's windows: latest (default), all, or a window's "
                                        "start (seconds or an ISO datetime)")
    table.add_argument("--as-of", dest="as_of", help="a versioned table's value valid at this time (seconds "
                                                     "or an ISO datetime); without it, the latest")
    table.add_argument("--from", dest="since", help="a versioned table's versions valid from this time on "
                                                    "(with --to: in that range)")
    table.add_argument("--to", dest="until", help="a versioned table's versions valid up to this time")
    table.add_argument("--stale", action="store_true", help="a worker may answer from its standby copy")
    table.add_argument("--offline", action="store_true",
                       help="read this machine's local stores (--data-dir) instead of asking a worker")
    table.set_defaults(run=run_table)


def run_tables(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    settings = app.settings(given_settings(args))
    infos = local_partitions(app, settings)
    print(f"{'table':24} {'kind':9} {'changelog':40} {'partitions':>10} {'local keys':>10}")
    for table in app.tables.values():
        mine = [i for i in infos if i.table == table.name]
        kind = {"plain": table.kind, "versioned": "versioned"}.get(table.key_layout, "windowed")
        partitions = planned_partitions(table.changelog_topic, settings)
        print(f"{table.name:24} {kind:9} {table.changelog_topic.name:40} {partitions:>10} "
              f"{sum(i.keys for i in mine):>10}")
        if table.window is not None:
            print(f"  {'history' if table.key_layout == 'versioned' else 'windows'}: {table.window}")
        for info in mine:
            what = "versions" if table.key_layout == "versioned" else "windows"
            windows = "" if info.windows is None else f" in {info.windows} {what}"
            print(f"  partition {info.partition}: {info.keys} keys{windows}, changelog offset "
                  f"{info.changelog_offset}")
    if not infos:
        print(f"no local stores of this app under {settings.app_dir} (pass the worker's --data-dir)")
    url = args.url or f"http://{settings.web_host}:{settings.web_port}"
    answer = asyncio.run(_ask_app(app.id, url, "/tables"))
    if answer is None or answer[0] != 200:
        if args.url:
            raise EngineError(f"no worker of {app.id!r} answered at {url}")
        return 0
    print(f"the running worker at {url} holds:")
    for table in answer[1]["tables"]:
        about = "" if table.get("local_keys_exact") else "about "
        print(f"  {table['name']:22} partitions {table['here']}, {about}{table['local_keys']} keys")
    return 0


def run_table(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    settings = app.settings(given_settings(args))
    table = table_named(app, args.table)
    key = parse_key(table, args.key)
    if args.offline:
        times = {name: None if text is None else parse_time_ms(text, f"--{flag} must be a time")
                 for name, flag, text in (("at", "as-of", args.as_of), ("since", "from", args.since),
                                          ("until", "to", args.until))}
        partition, value = read_key(app, settings, args.table, key, **times)
        if value is MISSING:
            print(f"{args.table}[{args.key!r}]: no such key in the local stores (partition {partition})")
            return 1
        print(dumps(value).decode())
        return 0
    url = args.url or f"http://{settings.web_host}:{settings.web_port}"
    query = {"window": args.window, "as_of": args.as_of, "from": args.since, "to": args.until,
             "stale": "ok" if args.stale else None}
    path = (f"/tables/{quote(table.name, safe='')}/{quote(key_text(table, key), safe='')}?"
            f"{urlencode({k: v for k, v in query.items() if v is not None})}")
    answer = asyncio.run(_ask_app(app.id, url, path.rstrip("?")))
    if answer is None:
        raise EngineError(f"no worker of {app.id!r} answered at {url} (a worker logs its address as 'web "
                          "server at http://...'); pass --url, or --offline to read this machine's stores")
    status, body = answer
    if status == 200:
        print(dumps(next(body[name] for name in ("windows", "versions", "value") if name in body)).decode())
        return 0
    print(f"{args.table}[{args.key!r}]: {body.get('error', status)}", file=sys.stderr)
    return 1


async def _ask_app(app_id: str, url: str, path: str) -> tuple[int, Any] | None:
    """Ask the worker at `url`, if it is one of app `app_id`'s (another app's may serve on that port)."""
    health = await ask_worker(url, "/health")
    if health is None or health[0] != 200 or health[1].get("app") != app_id:
        return None
    return await ask_worker(url, path)
