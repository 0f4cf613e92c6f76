"""Where each partition of a task being set up starts: its committed offset, or where `auto_offset_reset`
says when there is none to go on from.

A committed offset is gone from the broker when the app stopped for longer than its input's retention (the
records below the log's first offset were deleted), or the topic was deleted, recreated or truncated (the
offset is past the log's end). aiokafka would reset such a partition by itself, at INFO, and nothing would
say that records were skipped; a table's source topic restored from that offset would wait for records that
never come. So the task manager decides here, before it seeks: such a partition follows `auto_offset_reset`
like one never committed, and the jump is kept (`Jump`) to be said once, at WARNING, and shown by
`engine status` (the worker's /status).

`start_at` is pure (no I/O), tested without Kafka; `Starts.seek` reads the committed offsets and the logs'
bounds, and seeks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.events import describe

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP
    from engine.transport.base import Consumer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Jump:
    """A partition whose committed offset was gone: it went on at `to` instead."""

    tp: TP
    committed: int
    to: int

    @property
    def skipped(self) -> int:
        """Records after the committed offset that will never be processed: those retention deleted, and
        with "latest" the ones still in the log before its end too."""
        return max(0, self.to - self.committed)

    def describe(self) -> str:
        return (f"{self.tp.topic}[{self.tp.partition}] from {self.committed} to {self.to} "
                f"({self.skipped} records skipped)")


def start_at(tp: TP, committed: int | None, first: int, end: int, *, latest: bool) -> tuple[int, Jump | None]:
    """Where `tp` starts (its log is [first, end)), and the jump if its committed offset is gone. `latest`:
    auto_offset_reset="latest" applies to it (never to a table's source topic: a table is all of it)."""
    reset = end if latest else first
    if committed is None:
        return reset, None
    if first <= committed <= end:
        return committed, None
    return reset, Jump(tp, committed, reset)


class Starts:
    """Where the partitions of tasks being set up start, and the jumps said so far (once each: a rebalance
    sets a partition up again)."""

    def __init__(self, *, from_start: Collection[str], latest: bool) -> None:
        """`from_start`: topics read from their start when never committed whatever `latest` says (tables'
        source topics); `latest`: auto_offset_reset="latest"."""
        self.from_start = frozenset(from_start)
        self.latest = latest
        self.jumps: dict[TP, Jump] = {}

    async def seek(self, consumer: Consumer, tps: Collection[TP]) -> tuple[dict[TP, int], dict[TP, int]]:
        """Seek each partition to where it starts (`start_at`); returns those offsets, and the committed
        offsets read (of the partitions that have one). A jump not said yet is said at WARNING."""
        committed = await consumer.committed(tps)
        bounds = await consumer.offsets(list(committed))
        starts, jumps = {}, []
        for tp, offset in committed.items():
            latest = self.latest and tp.topic not in self.from_start
            start, jump = start_at(tp, offset, *bounds[tp], latest=latest)
            consumer.seek(tp, start)
            starts[tp] = start
            if jump is not None and self.jumps.get(tp) != jump:
                jumps.append(jump)
                self.jumps[tp] = jump
        if jumps:
            log.warning("committed offsets no longer on the broker (deleted by retention, or the topic was "
                        "recreated): %s went on where auto_offset_reset=%r says: %s",
                        describe([j.tp for j in jumps]), "latest" if self.latest else "earliest",
                        "; ".join(j.describe() for j in sorted(jumps, key=lambda j: j.tp)))
        return starts, {tp: offset for tp, offset in committed.items() if offset is not None}
