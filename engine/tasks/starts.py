"""Where each partition of a task being set up starts: its committed offset, or where `auto_offset_reset`
says when there is none to go on from.

A committed offset is gone from the broker when the app stopped for longer than its input's retention (the
records below the log's first offset were deleted), or the topic was deleted, recreated or truncated (the
offset is past the log's end). aiokafka would reset such a partition by itself, at INFO, and nothing would
say that records were skipped; a table's source topic restored from that offset would wait for records that
never come. So the task manager decides here, before it seeks: such a partition follows `auto_offset_reset`
like one never committed, and the jump is kept (`Jump`) to be said once, at WARNING, and shown by
`engine status` (the worker's /status).

Pure (no I/O): tested without Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.events import TP


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
