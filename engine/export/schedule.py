"""Export rounds run by every worker (engine.export.rounds), on a schedule or when asked.

- On a schedule (`app.export(..., every=)`): the body of a timer that ticks at the same wall-clock times on
  every worker, exports what this worker owns, and never stops the worker for a failed round.
- When asked (`engine export --live`): a worker's web server is asked for a round, picks its number and asks
  every other worker for the same round (engine.web.server); `AskedExports` runs this worker's part and
  reports it as JSON.

Either way a round commits every partition as one version (an Iceberg table whose file IO is not
pyarrow's: each worker's partitions, a version of their own)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.errors import ConfigError, EngineError
from engine.export.lake import LakeExport
from engine.export.rounds import asked_round, export_round, round_of
from engine.operations.inspect import table_named
from engine.schedule import Timer
from engine.targets import ALL, Target, lake_target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.app import App, ScheduledExport
    from engine.export.rounds import RoundResult
    from engine.tables.base import BaseTable

log = logging.getLogger(__name__)

def scheduled_export(app: App, export: ScheduledExport) -> Timer:
    """The timer of a scheduled export (`app.export`): each tick, a round of what this worker owns."""
    every = export.every.total_seconds()

    async def run() -> None:
        tables, targets = round_tables(app, export.table, export.target)
        if not tables:
            return
        try:
            await export_round(tables, targets, round_of(wall_time(), every), every)
        except EngineError as exc:  # the next round starts from what the target holds: it catches up
            log.warning("scheduled export to %s failed: %s; the next round catches up", export.target, exc)

    return Timer(export.name, export.every, run, aligned=True)


def round_tables(app: App, table: BaseTable | None, where: Target
                 ) -> tuple[list[BaseTable], dict[str, Target]]:
    """The tables this worker exports in a round of `table` (None: every table that is not global) to
    `where`, those with partitions active here, and each one's lake table (for every table: each a child of
    `where`)."""
    candidates = [t for t in app.tables.values() if not t.is_global] if table is None else [table]
    tables = [t for t in candidates if t.active]
    return tables, {t.name: where if table is not None else where.child(t.name) for t in tables}


class AskedExports:
    """This worker's part of a round asked for over HTTP (engine.web.server, `POST /export`)."""

    def __init__(self, app: App) -> None:
        self.app = app

    def new_round(self) -> int:
        """The number of a round asked for now (after every scheduled tick before it)."""
        return asked_round(wall_time())

    async def run(self, what: str, target: str, round_: int, wait: float) -> dict[str, Any]:
        """Round `round_` of `what` (a table's name, or ALL) to `target`, this worker's part: per table the
        partitions staged here and, from the worker that committed, the version (`round_report`). A
        ConfigError (or ExportError) for a request that cannot be done."""
        where = lake_target(target, "a live export")
        table = None if what == ALL else table_named(self.app, what)
        if table is not None and table.is_global:
            raise ConfigError(f"table {what!r} is global: every worker holds all of it; export it with "
                              "`engine export --data-dir` or --from-changelog")
        tables, targets = round_tables(self.app, table, where)
        return round_report(await export_round(tables, targets, round_, wait) if tables else {})


def round_report(results: dict[str, RoundResult]) -> dict[str, Any]:
    """A worker's round results as JSON (its part of the answer `read_round` reads)."""
    return {name: {"staged": result.staged, "skipped": result.skipped,
                   "export": None if result.export is None else result.export.to_dict()}
            for name, result in results.items()}


@dataclass
class TableRound:
    """What an asked round did with one table, over every worker."""

    staged: dict[str, list[int]] = field(default_factory=dict)  # worker endpoint: the partitions it staged
    exports: list[LakeExport] = field(default_factory=list)  # the committer's version (one per worker for
    # an Iceberg table that keeps no stages)
    skipped: str | None = None  # why no version, as the committer said


@dataclass
class AskedRound:
    """The answer of a worker's web server to `POST /export`, read: the round, each worker's error (a part
    it could not do), and what was done with each table."""

    round: int
    errors: dict[str, str]
    tables: dict[str, TableRound]


def read_round(answer: Mapping[str, Any]) -> AskedRound:
    """The answer to `POST /export` (engine.web.server: each worker's `round_report`, by endpoint)."""
    errors: dict[str, str] = {}
    tables: dict[str, TableRound] = {}
    for endpoint, part in answer["workers"].items():
        if "error" in part:
            errors[endpoint] = part["error"]
        for name, result in part.get("tables", {}).items():
            table = tables.setdefault(name, TableRound())
            table.staged[endpoint] = result["staged"]
            if result["export"] is not None:
                table.exports.append(LakeExport.from_dict(result["export"]))
            table.skipped = table.skipped or result["skipped"]
    return AskedRound(int(answer["round"]), errors, tables)
