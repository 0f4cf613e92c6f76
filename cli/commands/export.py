"""engine export -A module:app TABLE --to PATH: a table as Parquet (and optionally into Spark).

Reads the worker's data dir by default (read-only: fine beside a running worker, which covers the
partitions that worker holds); --from-changelog rebuilds every partition from the changelog topic instead,
so no worker or data dir is needed.
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
    from engine.export import ExportManifest


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("export", help="export a table snapshot to Parquet (and Spark)")
    p.add_argument("table")
    p.add_argument("--to", required=True, metavar="PATH", help="directory to write the export to")
    p.add_argument("--from-changelog", action="store_true",
                   help="rebuild the table from its changelog topic instead of reading a data dir")
    p.add_argument("--data-dir", help="the worker's data dir (default: ./data)")
    p.add_argument("--spark", action="store_true",
                   help="load the export into a local Spark session; print its schema and row count")
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


async def _from_changelog(args: argparse.Namespace, app: App, settings: Settings,
                          bar: ProgressBar) -> ExportManifest:
    """export_from_changelog, with a second bar for the replay that comes before the files."""
    replay = Progress()
    replay_bar = ProgressBar("replaying changelog")
    ticker = asyncio.ensure_future(_replay_progress(replay, replay_bar))
    try:
        return await export.export_from_changelog(app, settings, args.table, args.to, bar, replay=replay)
    finally:
        ticker.cancel()
        replay_bar.finish()


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    settings = app.settings({"broker": args.broker, "data_dir": args.data_dir})
    bar = ProgressBar(f"exporting {args.table}")
    try:
        if args.from_changelog:
            manifest = asyncio.run(_from_changelog(args, app, settings, bar))
        else:
            manifest = export.export_from_store(app, settings, args.table, args.to, bar)
    finally:
        bar.finish()
    offsets = ", ".join(f"{p}@{o}" for p, o in manifest.offsets.items())
    print(f"exported {manifest.rows} rows of {manifest.table} from {manifest.source} to {args.to} "
          f"({len(manifest.files)} of {manifest.partitions} partitions; changelog offsets {offsets})")
    if args.spark:
        spark = export.local_session(f"engine-export-{args.table}")
        try:
            frame = export.read_export(spark, args.to)
            frame.printSchema()
            print(f"spark rows: {frame.count()}")
        finally:
            export.stop_session(spark)
    return 0
