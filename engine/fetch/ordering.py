"""Timestamp order within a task: the next records to process are those with the smallest timestamp among the
task's input partitions (Kafka Streams' PartitionGroup).

Why: a stream joined with a table over a source topic must see, for each event, the table as it was at the
event's time. Live, records arrive in about that order anyway; over a backlog (a new app, reprocessing) one
input would otherwise run ahead of the other, and the join would see later table versions than a live run.
So a task whose inputs include a table's source topic buffers its fetched batches per partition and
releases them by timestamp (ties: the table's records first, so an event sees a table update of the same
millisecond, as a live run that wrote the table first would). A stream-stream join's two streams likewise:
which records of one a record of the other finds, and when a record without partner stops waiting, depend
on that order.

An input with nothing buffered blocks the others only while the broker is known to hold records of it not
fetched yet (its lag is above zero or not known yet), and for at most `idle` seconds (Kafka Streams'
max.task.idle.ms): a quiet table topic never holds a live stream back.

Pure and loop-free: tested without Kafka.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from engine.events import TP, RawRecord


class TaskInputs:
    """The buffered records of one task's input partitions, released in timestamp order."""

    __slots__ = ("_buffers", "_rank", "_waiting_since", "idle")

    def __init__(self, inputs: Collection[TP], first: Collection[TP], idle: float) -> None:
        """`inputs`: the task's partitions; `first`: those whose records go first on equal timestamps (the
        table sources)."""
        self._buffers: dict[TP, deque[RawRecord]] = {tp: deque() for tp in inputs}
        ordered = sorted(inputs, key=lambda tp: (tp not in first, tp.topic))
        self._rank = {tp: rank for rank, tp in enumerate(ordered)}
        self._waiting_since: float | None = None
        self.idle = idle

    @property
    def inputs(self) -> Collection[TP]:
        return self._buffers.keys()

    def add(self, tp: TP, records: list[RawRecord]) -> None:
        self._buffers[tp].extend(records)

    def unread(self, tp: TP, run: list[RawRecord]) -> None:
        """Put a run back in front (it cannot be processed yet)."""
        self._buffers[tp].extendleft(reversed(run))

    def buffered(self, tp: TP) -> int:
        return len(self._buffers[tp])

    def empty(self) -> list[TP]:
        """The inputs with nothing buffered (whose lag decides whether the others wait)."""
        return [tp for tp, buffer in self._buffers.items() if not buffer]

    def clear(self) -> int:
        """Drop everything buffered (the task's partitions were revoked or lost); returns how many."""
        dropped = sum(len(buffer) for buffer in self._buffers.values())
        for buffer in self._buffers.values():
            buffer.clear()
        return dropped

    def next_run(self, lags: Mapping[TP, int | None], now: float) -> tuple[TP, list[RawRecord]] | None:
        """The next records to process: from the input whose head is oldest, as many in a row as come before
        every other input's head. None if nothing is buffered, or while an empty input may still have older
        records on the broker (`lags` of the empty inputs: records known there and not fetched, None if not
        known), for at most `idle` seconds since the wait began."""
        buffers = self._buffers
        if not any(buffers.values()):
            self._waiting_since = None
            return None
        behind = any(lags.get(tp) != 0 for tp, buffer in buffers.items() if not buffer)
        if behind:
            if self._waiting_since is None:
                self._waiting_since = now
            if now - self._waiting_since < self.idle:
                return None
        self._waiting_since = None
        return self._take()

    def next_runs(self, lags: Mapping[TP, int | None], now: float, limit: int
                  ) -> list[tuple[TP, list[RawRecord]]]:
        """`next_run`, then the runs after it for as long as their order is known from the buffers alone
        (every input still has records buffered), up to about `limit` records: one call for what two
        interleaved streams give as runs of one or two records."""
        first = self.next_run(lags, now)
        if first is None:
            return []
        runs, count, buffers = [first], len(first[1]), self._buffers.values()
        while count < limit and all(buffers):
            run = self._take()
            runs.append(run)
            count += len(run[1])
        return runs

    def _take(self) -> tuple[TP, list[RawRecord]]:
        """The run of the input whose head is oldest, up to the next head of any other (one is buffered)."""
        chosen: TP | None = None
        head = bound = None
        for tp, buffer in self._buffers.items():
            if buffer:
                key = (buffer[0].timestamp, self._rank[tp])
                if head is None or key < head:
                    chosen, bound, head = tp, head, key
                elif bound is None or key < bound:
                    bound = key
        assert chosen is not None
        buffer, rank = self._buffers[chosen], self._rank[chosen]
        run = [buffer.popleft()]
        if bound is None:
            run += buffer
            buffer.clear()
            return chosen, run
        while buffer and (buffer[0].timestamp, rank) < bound:
            run.append(buffer.popleft())
        return chosen, run
