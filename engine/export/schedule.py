"""Exports run by every worker on a schedule (`app.export(..., every=)`): the body of a timer that ticks at
the same wall-clock times on every worker, exports what this worker owns, and never stops the worker for a
failed round. Each tick is a round that commits every partition as one version (engine.export.rounds; an
Iceberg table whose file IO is not pyarrow's: each worker's partitions, a version of their own)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from engine.clock import wall_time
from engine.errors import ConfigError, EngineError
from engine.export.targets import parse_target
from engine.tables.windowed import EventTimeTable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from engine.app import App
    from engine.tables.base import BaseTable

log = logging.getLogger(__name__)

ALL = "all"


def scheduled_export(app: App, what: BaseTable | EventTimeTable | str, target: str, every: float
                     ) -> tuple[Callable[[], Awaitable[None]], str]:
    """The timer body exporting `what` (a table, or ALL) to `target` every `every` seconds, and the timer's
    name."""
    from engine.export.rounds import export_round, round_of  # (import cycle: the export imports the tables)

    where = parse_target(target)  # a bad target fails at declaration, not at the first round
    if not where.is_lake:
        raise ConfigError(f"app.export needs a lake table (delta:PATH or iceberg:NAMESPACE.TABLE), not "
                          f"{target!r}: every worker exports its own partitions into it, where a Parquet "
                          "directory holds one export's files")
    if isinstance(what, str) and what != ALL:
        raise ConfigError(f"app.export takes a table or {ALL!r}, not {what!r}")
    table = None if isinstance(what, str) else (what.table if isinstance(what, EventTimeTable) else what)
    name = f"export:{ALL if table is None else table.name}:{where}"

    async def run() -> None:
        round_ = round_of(wall_time(), every)
        tables = [t for t in app.tables.values() if not t.is_global and t.active] if table is None else (
            [table] if table.active else [])
        if not tables:
            return
        try:
            targets = {t.name: where if table is not None else where.child(t.name) for t in tables}
            await export_round(tables, targets, round_, every)
        except EngineError as exc:  # the next round starts from what the target holds: it catches up
            log.warning("scheduled export to %s failed: %s; the next round catches up", where, exc)

    return run, name
