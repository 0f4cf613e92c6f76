"""engine export -A module:app TABLE --to TARGET: a table as Parquet files, or into a Delta Lake table
(TARGET `delta:PATH`) or an Iceberg table (`iceberg:[CATALOG.]NAMESPACE.TABLE`), and optionally into Spark;
--all for every table (each to TARGET/<table>, or NAMESPACE.<table>); --status TARGET for where a lake
table is in the stream.

Reads the worker's data dir by default (read-only: fine beside a running worker, which covers the
partitions that worker holds, as of its last checkpoint); --from-changelog rebuilds every partition from
the changelog topic instead, so no worker or data dir is needed; --live asks the running workers (through
one's web server) for an export round now: each runs a checkpoint and stages its partitions, and one lake
version holds them all (engine.export.rounds). A lake table written before gets only what changed since.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING, TextIO

from cli.loader import load_app
from cli.settings_options import given_settings
from engine import EngineError, export
from engine.tools import Progress, ask_worker

if TYPE_CHECKING:
    import argparse

    from engine import App, Settings
    from engine.export import ExportResult


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("export", help="export a table snapshot to Parquet, Delta Lake or Iceberg (and Spark)",
                       example="engine export -A examples.wordcount:app word-counts --to delta:lake/counts "
                               "--data-dir data")
    p.add_argument("table", nargs="?", help="the table (or --all)")
    p.add_argument("--all", action="store_true", help="every table of the app, each to TARGET/<table>")
    p.add_argument("--to", metavar="TARGET",
                   help="a directory for Parquet files, delta:PATH for a Delta Lake table, or "
                        "iceberg:[CATALOG.]NAMESPACE.TABLE for an Iceberg table (default catalog: SQLite "
                        "in the data dir)")
    p.add_argument("--status", metavar="TARGET",
                   help="print where the lake table TARGET is in the stream (offsets per partition)")
    p.add_argument("--from-changelog", action="store_true",
                   help="rebuild the table from its changelog topic instead of reading a data dir")
    p.add_argument("--live", action="store_true",
                   help="ask the running workers for an export round now (a lake TARGET the workers reach: "
                        "a local Delta path is taken from this directory): one checkpoint each, every "
                        "partition in one version")
    p.add_argument("--url", help="with --live: a running worker's web address (default: http://web_host:"
                                 "web_port of the app's settings)")
    p.add_argument("--wait", type=float, default=30.0,
                   help="with --live: seconds the round waits for every worker's part (default 30)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="with --live: seconds to wait for the round's answer (default 3600)")
    p.add_argument("--spark", action="store_true",
                   help="load a Parquet export into a local Spark session; print its schema and row count")
    p.set_defaults(run=run)


class ProgressBar:
    """One line on a terminal, redrawn at most ten times a second; silent when output is not a terminal."""

    def __init__(self, label: str, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.label = label
        self.stream = stream
        self.width = width
        self.enabled = stream.isatty()
        self._drawn = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._drawn < 0.1 and done < total):
            return
        self._drawn = now
        share = done / total if total else 1.0
        filled = round(self.width * share)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{share:4.0%} {done:,}/{total:,} rows")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")


async def _replay_progress(progress: Progress, bar: ProgressBar) -> None:
    while True:
        await asyncio.sleep(0.2)
        bar(progress.applied, progress.applied + max(progress.remaining, 0))


async def _from_changelog(app: App, settings: Settings, table: str, target: str,
                          bar: ProgressBar) -> ExportResult:
    """export_from_changelog, with a second bar for the replay that comes before the rows."""
    replay = Progress()
    replay_bar = ProgressBar("replaying changelog")
    ticker = asyncio.ensure_future(_replay_progress(replay, replay_bar))
    try:
        return await export.export_from_changelog(app, settings, table, target, bar, replay=replay)
    finally:
        ticker.cancel()
        replay_bar.finish()


def _usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the combination of arguments, if anything."""
    if args.status:
        return None
    if args.to is None:
        return ("export needs --to TARGET (a directory, delta:PATH or iceberg:NAMESPACE.TABLE), or --status "
                "TARGET")
    if args.all == (args.table is not None):
        return "export needs a table name, or --all (not both)"
    if args.spark and (args.all or export.parse_target(args.to).is_lake):
        return "--spark loads one Parquet export; read a lake table with Spark's Delta or Iceberg reader"
    if args.live and (args.from_changelog or not export.parse_target(args.to).is_lake):
        return ("--live exports into a lake table (delta:PATH or iceberg:NAMESPACE.TABLE), from the running "
                "workers (not --from-changelog)")
    return None


def _export_one(args: argparse.Namespace, app: App, settings: Settings, table: str,
                target: str) -> ExportResult:
    bar = ProgressBar(f"exporting {table}")
    try:
        if args.from_changelog:
            return asyncio.run(_from_changelog(app, settings, table, target, bar))
        return export.export_from_store(app, settings, table, target, bar)
    finally:
        bar.finish()


def _summary(result: ExportResult, target: str) -> str:
    offsets = ", ".join(f"{p}@{o}" for p, o in result.offsets.items())
    if isinstance(result, export.LakeExport):
        commit = result.commit
        if not result.written:
            return (f"nothing to export to {target}: it holds {commit.table} as it is "
                    f"(version {result.version})")
        what = (f"{result.rows} rows" if commit.mode == "full"
                else f"{result.rows} changed rows and {result.deleted} deletes")
        return (f"exported {what} of {commit.table} from {commit.source} to {target}, version "
                f"{result.version} ({commit.mode}; {len(commit.partitions)} of {commit.partition_count} "
                f"partitions; changelog offsets {offsets})")
    return (f"exported {result.rows} rows of {result.table} from {result.source} to {target} "
            f"({len(result.files)} of {result.partitions} partitions; changelog offsets {offsets})")


def _live(args: argparse.Namespace, app: App, settings: Settings) -> int:
    """Ask the worker at --url for an export round of the table (or --all) and print what it committed."""
    url = args.url or f"http://{settings.web_host}:{settings.web_port}"
    target = str(export.parse_target(args.to).absolute())  # (workers run in their own directories)
    health = asyncio.run(ask_worker(url, "/health"))
    if health is None or not isinstance(health[1], dict) or health[1].get("app") != app.id:
        raise EngineError(f"no worker of {app.id!r} answered at {url} (a worker logs its address as 'web "
                          "server at http://...'); pass --url")
    asked = {"tables": "all" if args.all else args.table, "target": target, "wait": args.wait}
    answer = asyncio.run(ask_worker(url, "/export", asked, timeout=args.timeout))
    if answer is None:
        raise EngineError(f"the worker at {url} gave no answer to the export within {args.timeout:.0f}s")
    status, body = answer
    if status != 200:
        raise EngineError(f"the worker at {url} refused the export: {body.get('error', status)}")
    done = export.read_round(body)
    for endpoint, error in sorted(done.errors.items()):
        print(f"worker {endpoint}: {error}", file=sys.stderr)
    lines = _round_lines(args, done)
    for line, ok in lines:
        print(line, file=sys.stdout if ok else sys.stderr)
    return 1 if done.errors or not all(ok for _, ok in lines) else 0


def _round_lines(args: argparse.Namespace, done: export.AskedRound) -> list[tuple[str, bool]]:
    """Per table of an asked round: a line saying what was committed (and which worker staged which
    partitions), or why nothing was; and whether that is a success."""
    if not done.tables:
        return [(f"round {done.round} exported nothing: no worker holds partitions of "
                 f"{'any table' if args.all else args.table} now (partitions moving, or not assigned yet); "
                 "ask again once they are placed", False)]
    lines = []
    for name, table in sorted(done.tables.items()):
        staged = "; ".join(f"{', '.join(map(str, numbers))} from {endpoint}" for endpoint, numbers in
                           sorted(table.staged.items(), key=lambda item: item[1] or [-1]) if numbers)
        lines += [(f"{_summary(result, result.target)} (round {done.round}: partitions {staged})", True)
                  for result in table.exports]
        if not table.exports:
            why = table.skipped or "the worker that holds partition 0 did not take part"
            lines.append((f"round {done.round} committed nothing of {name}: {why} (partitions {staged})",
                          False))
    return lines


def run(args: argparse.Namespace) -> int:
    wrong = _usage(args)
    if wrong is not None:
        print(f"engine: {wrong}", file=sys.stderr)
        return 2
    app = load_app(args.app)
    settings = app.settings(given_settings(args))
    if args.status:
        for line in export.lake_status(args.status, settings):
            print(line)
        return 0
    if args.live:
        return _live(args, app, settings)
    target = export.parse_target(args.to)
    names = [args.table] if not args.all else sorted(t.name for t in app.tables.values() if not t.is_global)
    for name in names:
        where = str(target.child(name)) if args.all else args.to
        print(_summary(_export_one(args, app, settings, name, where), where))
    if args.spark:
        spark = export.local_session(f"engine-export-{args.table}")
        try:
            frame = export.read_export(spark, args.to)
            frame.printSchema()
            print(f"spark rows: {frame.count()}")
        finally:
            export.stop_session(spark)
    return 0
