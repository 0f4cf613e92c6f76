"""Timestamp order within a task: the next records to process are those with the smallest timestamp among the
task's input partitions (Kafka Streams' PartitionGroup).

Why: a stream joined with a table over a source topic must see, for each event, the table as it was at the
event's time. Live, records arrive in about that order anyway; over a backlog (a new app, reprocessing) one
input would otherwise run ahead of the other, and the join would see later table versions than a live run.
So a task whose inputs include a table's source topic buffers its fetched batches per partition and
releases them by timestamp (ties: the table's records first, so an event sees a table update of the same
millisecond, as a live run that wrote the table first would). A stream-stream join's two streams likewise:
which records of one a record of the other finds, and when a record without partner stops waiting, depend
on that order. And the topics from which several agents use one table (a sale must see the stock its own
time saw, whether the shipment before it is processed live or from a backlog).

Kafka Streams' readiness rule (KIP-695), exactly: while an input has nothing buffered, the others wait for it
as long as the broker holds records of it not fetched yet, or its lag is not known yet: those records may
be older, and going on without them would make a backlog's results differ from a live run's. An input that
is caught up (lag 0) holds the others back for at most `idle` seconds (max.task.idle.ms, 0 by default: a
quiet table topic never holds a live stream back); a negative `idle` never waits at all (Kafka Streams' -1:
what is buffered goes, possibly out of order). The wait for fetched records has no deadline, as in Kafka
Streams: how long it lasts depends on the fetch (a busy loop, a slow broker), not on the data, so a deadline
would make results depend on the machine's speed. `overdue` tells when it lasts, for a warning.

Pure and loop-free: tested without Kafka.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from engine.events import TP, RawRecord


@dataclass(frozen=True)
class InputPlan:
    """Which topics a worker's tasks release in timestamp order, made once by the worker from the topology and
    read by the conductor (what it gives a task to buffer instead of dispatching) and the task manager (which
    tasks get ordered inputs): the source topics of tables (applied to the task's table partition, never
    handed to agents), the streams of stream-stream joins, and the topics from which several agents use one
    table (`serial`: a run of one goes to its agent once the others processed theirs, engine.tasks.release);
    and `max_idle`, how long a caught-up input holds the others back (max_task_idle)."""

    table_sources: frozenset[str] = frozenset()
    joined_streams: frozenset[str] = frozenset()
    serial: frozenset[str] = frozenset()
    max_idle: float = 0.0

    @property
    def ordered(self) -> bool:
        """Whether any task of this worker may have inputs in timestamp order."""
        return bool(self.table_sources or self.joined_streams or self.serial)

    def inputs(self, tps: Collection[TP]) -> TaskInputs | None:
        """The timestamp-ordered inputs of a task reading `tps`, or None if its records go as they come."""
        sources = [tp for tp in tps if tp.topic in self.table_sources]
        if sources or any(tp.topic in self.joined_streams or tp.topic in self.serial for tp in tps):
            return TaskInputs(tps, sources, self.max_idle)
        return None


class TaskInputs:
    """The buffered records of one task's input partitions, released in timestamp order."""

    __slots__ = ("_buffers", "_fetch_wait_since", "_idle_deadlines", "_rank", "_told", "idle")

    def __init__(self, inputs: Collection[TP], first: Collection[TP], idle: float) -> None:
        """`inputs`: the task's partitions; `first`: those whose records go first on equal timestamps (the
        table sources)."""
        self._buffers: dict[TP, deque[RawRecord]] = {tp: deque() for tp in inputs}
        ordered = sorted(inputs, key=lambda tp: (tp not in first, tp.topic))
        self._rank = {tp: rank for rank, tp in enumerate(ordered)}
        self._fetch_wait_since: float | None = None  # since when an empty input's records are awaited
        self._idle_deadlines: dict[TP, float] = {}  # caught-up empty inputs: until when they hold the others
        self._told = False  # whether `overdue` reported the present wait
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

    @property
    def buffering(self) -> bool:
        """Whether any input has records buffered."""
        return any(self._buffers.values())

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
        every other input's head. None if nothing is buffered, or while an input with nothing buffered may
        still have older records: records on the broker not fetched yet or a lag not known yet (`lags` of
        the empty inputs, None if not known), or caught up for less than `idle` seconds."""
        buffers = self._buffers
        if self._idle_deadlines:
            for tp in [tp for tp in self._idle_deadlines if buffers[tp]]:
                del self._idle_deadlines[tp]  # it has records again: a later wait starts anew
        if not any(buffers.values()):
            self._fetch_wait_since = None
            return None
        if self.idle >= 0 and self._held_back(lags, now):
            return None
        self._fetch_wait_since = None
        return self._take()

    def _held_back(self, lags: Mapping[TP, int | None], now: float) -> bool:
        """Whether an input with nothing buffered holds the others back now; a wait for its fetch is timed
        from its start (`overdue`)."""
        for tp, buffer in self._buffers.items():
            if buffer:
                continue
            if lags.get(tp) != 0:  # records of it on the broker, or not known yet: wait to fetch them
                if self._fetch_wait_since is None:
                    self._fetch_wait_since, self._told = now, False
                return True
            # caught up: wait up to `idle` for its producers, from when it was first seen so
            if self.idle > 0 and now < self._idle_deadlines.setdefault(tp, now + self.idle):
                self._fetch_wait_since = None
                return True
        return False

    def due(self, now: float, after: float) -> float | None:
        """The next time after `now` at which time alone changes what `next_run` or `overdue` give (a
        caught-up input stops holding the others back; a wait for a fetch has lasted `after` seconds), or
        None: until records come, nothing changes. Only times after `now`: a moment passed is seen when the
        release runs next, which a fetch returning at once would not bring sooner (it would spin)."""
        moments = list(self._idle_deadlines.values())
        if self._fetch_wait_since is not None and not self._told:
            moments.append(self._fetch_wait_since + after)
        return min((moment for moment in moments if moment > now), default=None)

    def overdue(self, now: float, after: float) -> list[TP]:
        """The empty inputs the others have waited for `after` seconds or more to be fetched, once per wait
        (so that a wait that lasts is told, once)."""
        if self._fetch_wait_since is None or self._told or now - self._fetch_wait_since < after:
            return []
        self._told = True
        return self.empty()

    def next_runs(self, lags: Mapping[TP, int | None], now: float, limit: int,
                  apart: Collection[str] = ()) -> list[tuple[TP, list[RawRecord]]]:
        """`next_run`, then the runs after it for as long as their order is known from the buffers alone
        (every input still has records buffered, but those that had none at the call and did not hold the
        others back: a quiet topic of the task), up to about `limit` records: one call for what two
        interleaved streams give as runs of one or two records. A run of a topic of `apart` ends the call
        before a run of another of them (their caller hands each to its agent only once the other's are
        processed: what it took beyond would go back)."""
        buffers = [buffer for buffer in self._buffers.values() if buffer]  # (the deques, which runs drain)
        first = self.next_run(lags, now)
        if first is None:
            return []
        runs, count = [first], len(first[1])
        while count < limit and all(buffers):
            run = self._take()
            last = runs[-1][0].topic
            if last in apart and run[0].topic in apart and run[0].topic != last:
                self.unread(*run)
                break
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
