"""engine export -A module:app TABLE --to TARGET: a table as Parquet files, or into a Delta Lake table
(TARGET `delta:PATH`) or an Iceberg table (`iceberg:[CATALOG.]NAMESPACE.TABLE`), and optionally into Spark;
--all for every table (each to TARGET/<table>, or NAMESPACE.<table>); --status TARGET for where a lake
table is in the stream.

Reads the worker's data dir by default (read-only: fine beside a running worker, which covers the
partitions that worker holds); --from-changelog rebuilds every partition from the changelog topic instead,
so no worker or data dir is needed. A Delta table written before gets only what changed since.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING, TextIO

from cli.loader import load_app
from engine import export
from engine.tools import Progress

if TYPE_CHECKING:
    import argparse

    from engine import App, Settings
    from engine.export import ExportResult


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("export", help="export a table snapshot to Parquet or Delta Lake (and Spark)")
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
    p.add_argument("--data-dir", help="the worker's data dir (default: ./data)")
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


def run(args: argparse.Namespace) -> int:
    wrong = _usage(args)
    if wrong is not None:
        print(f"engine: {wrong}", file=sys.stderr)
        return 2
    app = load_app(args.app)
    settings = app.settings({"broker": args.broker, "data_dir": args.data_dir})
    if args.status:
        for line in export.lake_status(args.status, settings):
            print(line)
        return 0
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
