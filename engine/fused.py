"""Fused pipelines: a declarative pipeline's steps and aggregation run a mailbox batch at a time.

A pipeline (engine.pipelines) knows its whole computation, so its agent need not take its events one by one
through stream operators (an async generator step, an `await`, a quiesce check and a table call per event):
`run_fused` takes every event waiting in the agent's mailbox (`Stream.take_batch`) and, in one synchronous
loop, applies the filters and maps, and folds each value into the table. It is the same agent, on the same
mailbox, leases, acks and error policy (engine.processing.runner): only how it takes its events differs.

- A plain table (count, sum, reduce, aggregate without a window): a key's first event in the batch reads the
  table, routed and checked as a write of the agent path is (the partition, the lease, the topic
  co-partitioned with the table: `own_slot`); its values fold into a batch-local aggregate, written to
  that partition's buffer once when the batch (or its run of one partition) ends. One table read per
  distinct key per batch; the buffer coalesces the changelog per checkpoint as before.
- Each run of one lease's events is acked together when it ends (`Lease.ack_run`: one step where they are
  its oldest in flight), the events before a failing one included; nothing awaits in between, so no
  checkpoint can tell.
- A windowed table (tumbling, hopping, session, sliding): each event updates its windows with the table's
  own update, as the agent path does: stream time, late events and closed windows are the table's, event by
  event in partition order. The events of one partition's run are routed once (`own_partition`: the
  partition the event's own key writes to) and applied there: a fixed-window table takes the whole run in
  one call (`apply_run`: what every event reads, read once per run), sessions and sliding windows each
  event in turn (`apply`).

Nothing awaits inside a batch, so no checkpoint (nor a revoke) falls within one: what a checkpoint cuts is
whole batches, each event of them acked. A step or aggregation function that raises on an event ends the
batch there: the events before it are folded and acked, the ones after it go back to the front of the
mailbox, and the error propagates with that event current, so the agent's error policy deals with that event
exactly as on the agent path (dead letter and go on, or stop).

A `group_by` is fused too (`Forwarder`): the steps before it and the forwarding to its repartition topic
take a batch of the source at a time, each lease's run encoded and then enqueued in one send, all of it or
none (awaited: under exactly-once the batch counts as one event for the quiesce gate, so a checkpoint waits
for it), its events acked once their records are enqueued, as the stream operators' forwarding does; what
reads the repartition topic is the next batch loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, groupby
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from agents import Fatal
from engine.errors import PartitionMigrated, RecordTooLarge
from engine.streams.stream import UpstreamError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from engine.events import Event
    from engine.streams.stream import Stream
    from engine.tables.base import BaseTable
    from engine.tables.partition import TablePartition
    from engine.tables.sessions import SessionTable
    from engine.tables.sliding import SlidingTable
    from engine.tables.windowed import WindowedTable
    from engine.topics import Topic
    from engine.transport.base import KeyedRecord

    Combine = Callable[[Any, Any], Any]  # (aggregate, value) -> aggregate
    Step = tuple[bool, Callable[[Any], Any]]  # (is a filter, its function), else a map


@dataclass(frozen=True)
class PlainFold:
    """Fold values into a plain table: `table[key] = add(table[key], value)`."""

    table: BaseTable
    add: Combine


@dataclass(frozen=True)
class FixedWindowFold:
    """Fold values into a table of fixed-size windows (tumbling, hopping): each window of the event
    `add(window, value)`."""

    table: WindowedTable
    add: Combine


@dataclass(frozen=True)
class WindowFold:
    """Update a table of windows that events make (sessions, sliding windows) with its own update:
    `apply(partition, event, key, value)`."""

    table: SessionTable | SlidingTable


Fold = PlainFold | FixedWindowFold | WindowFold


async def run_fused(stream: Stream, steps: tuple[Step, ...], fold: Fold) -> None:
    """The agent's body: batch after batch until its mailbox closes, each a run of one lease's events at a
    time (`_runs`): a run is one partition's, so it is routed once, and acked at once when folded."""
    while True:
        try:
            events = await stream.take_batch()
        except StopAsyncIteration:
            return
        for begin, end in _runs(events):
            try:
                if isinstance(fold, PlainFold):
                    _fold_plain(stream, events, begin, end, steps, fold.table, fold.add)
                elif isinstance(fold, FixedWindowFold):
                    _fold_fixed_windows(stream, events, begin, end, steps, fold.table, fold.add)
                else:
                    _fold_windows(stream, events, begin, end, steps, fold.table)
            except BaseException:
                _ack(events, begin, stream.batch_reached - 1)  # (those before the one it failed on)
                raise
            _ack(events, begin, end)
        stream.finish_batch(len(events))


def _runs(events: list[Event]) -> Iterator[tuple[int, int]]:
    """(begin, end) of each run of consecutive events of one lease; an event without one (a test's) is a run
    of its own."""
    begin = 0
    for lease, run in groupby(events, attrgetter("lease")):
        size = len(list(run))
        if lease is None:
            yield from ((at, at + 1) for at in range(begin, begin + size))
        else:
            yield begin, begin + size
        begin += size


def _fold_fixed_windows(stream: Stream, events: list[Event], begin: int, end: int, steps: tuple[Step, ...],
                        table: WindowedTable, add: Combine) -> None:
    """The run's events applied to their windows in one call of the table's `apply_run`, which has each event
    current while it applies it; with steps, each event goes through them just before, so a step sees the
    table as the events before it left it."""
    run = _kept(stream, events, begin, end, steps)
    try:
        first = next(run, None)
        if first is None:
            return
        stream.current_event = first[0]
        part = table.own_partition(first[0])  # (routed for the run's first event the steps keep)
        table.apply_run(part, chain((first,), run), add, stream)
    except BaseException:
        stream.batch_reached = _index_of(events, begin, end, stream.current_event) + 1
        raise


def _fold_windows(stream: Stream, events: list[Event], begin: int, end: int, steps: tuple[Step, ...],
                  table: SessionTable | SlidingTable) -> None:
    part: TablePartition | None = None  # (routed for the run's first event the steps keep)
    try:
        for event, key, value in _kept(stream, events, begin, end, steps):
            stream.current_event = event
            if part is None:
                part = table.own_partition(event)
            table.apply(part, event, key, value)
    except BaseException:
        stream.batch_reached = _index_of(events, begin, end, stream.current_event) + 1
        raise


def _fold_plain(stream: Stream, events: list[Event], begin: int, end: int, steps: tuple[Step, ...],
                table: BaseTable, add: Combine) -> None:
    folded: dict[Any, list[Any]] = {}  # key -> [aggregate, the buffer it goes to]
    try:
        for event, key, value in _kept(stream, events, begin, end, steps):
            stream.current_event = event  # (what the aggregate, reading a table, routes by)
            entry = folded.get(key)
            if entry is None:  # the key's first event: read, routed and checked as the table's writes are
                current, buffer = table.own_slot(event)
                folded[key] = [add(current, value), buffer]
            else:
                entry[0] = add(entry[0], value)
    except BaseException:
        stream.batch_reached = _index_of(events, begin, end, stream.current_event) + 1
        raise
    finally:
        for key, (aggregate, buffer) in folded.items():
            buffer[key] = aggregate


_key_of, _value_of = attrgetter("key"), attrgetter("value")


def _kept(stream: Stream, events: list[Event], begin: int, end: int,
          steps: tuple[Step, ...]) -> Iterator[tuple[Event, Any, Any]]:
    """(event, its key, its value as the steps left it) of each event of the run the steps keep: the one
    step loop of every fold. Each event is made current before its steps run (a step reading a table is
    routed by it; one that raises leaves it current, for the error policy). Without steps, every event as
    it is, through C iterators (no Python frame per event): the fold makes each current itself."""
    if not steps:
        run = events[begin:end]
        return zip(run, map(_key_of, run), map(_value_of, run), strict=True)
    return _stepped(stream, events, begin, end, steps)


def _stepped(stream: Stream, events: list[Event], begin: int, end: int,
             steps: tuple[Step, ...]) -> Iterator[tuple[Event, Any, Any]]:
    for at in range(begin, end):
        event = events[at]
        stream.current_event = event
        value = event.value
        for is_filter, fun in steps:
            if is_filter:
                if not fun(value):
                    break
            else:
                value = fun(value)
        else:
            yield event, event.key, value


def _index_of(events: list[Event], begin: int, end: int, event: Event | None) -> int:
    """Where `event` is in the run (the one a fold failed on: it is current); the run's first if it is not
    (nothing of the run current yet)."""
    return next((at for at in range(begin, end) if events[at] is event), begin)


def _ack(events: list[Event], begin: int, end: int) -> None:
    """Ack `events[begin:end]`, events of one lease one after another, processed: in one step where the
    lease has them as its oldest in flight (`ack_run`), else one by one."""
    if begin >= end:
        return
    lease = events[begin].lease
    if lease is None:
        return
    if not lease.ack_run(events[begin].record.offset, events[end - 1].record.offset, end - begin):
        for at in range(begin, end):
            lease.ack(events[at].record.offset)


class Forwarder:
    """A fused group_by: `await forwarder()` forwards one batch of `source` to the repartition topic
    `target`, each value kept by the steps re-keyed by `key(value)`, with its record's headers and event time
    (as the stream operators' group_by does); False once the source's mailbox is closed. Each run of one
    lease's events is encoded, then enqueued at once (`Topic.send_encoded`: whole batches per target
    partition, into that lease's task's transaction, all of them or none), then acked. What fails on an event
    raises UpstreamError for it, the events before it forwarded and acked first (the agent's error policy
    deals with it as on the operators' path); a send that fails stops the worker (see `_send`)."""

    __slots__ = ("key", "source", "steps", "target")

    def __init__(self, source: Stream, steps: tuple[Step, ...], key: Callable[[Any], Any],
                 target: Topic) -> None:
        self.source = source
        self.steps = steps
        self.key = key
        self.target = target

    async def __call__(self) -> bool:
        source = self.source
        try:
            events = await source.take_batch()
        except StopAsyncIteration:
            return False
        for begin, end in _runs(events):
            lease = events[begin].lease
            if lease is not None and lease.ended:
                continue  # its partition moved while an earlier send waited: its new owner's
            await self._forward(events, begin, end)
        source.finish_batch(len(events))
        return True

    async def _forward(self, events: list[Event], begin: int, end: int) -> None:
        source, target, steps, key_of = self.source, self.target, self.steps, self.key
        topic, encode = source.topic, target.encode
        records: list[KeyedRecord] = []
        owners: list[Event] = []  # the event each record is of
        failure: Exception | None = None
        at = end  # (where the run stops: an event that failed)
        try:
            for event, _, value in _kept(source, events, begin, end, steps):
                source.current_event = event  # (what a key function reading a table routes by)
                time_ms = topic.event_time_ms(event) if topic is not None else event.record.timestamp
                key, encoded = encode(key_of(value), value)
                records.append((key, encoded, event.headers, time_ms))
                owners.append(event)
        except Exception as exc:
            failure, at = exc, _index_of(events, begin, end, source.current_event)
        if records:
            try:
                await self._send(events, begin, records)
            except RecordTooLarge as exc:  # (nothing enqueued: as if encoding its event had failed)
                if exc.index:
                    await self._send(events, begin, records[:exc.index])
                at, failure = _index_of(events, begin, end, owners[exc.index]), exc
        _ack(events, begin, at)
        if failure is not None:
            source.current_event, source.batch_reached = events[at], at + 1
            raise UpstreamError(events[at], failure) from failure
        source.batch_reached = end

    async def _send(self, events: list[Event], begin: int, records: list[KeyedRecord]) -> None:
        """Send a run's records at once. While the send waits, the run's events are the current one and
        those after it: what an abandoned agent gives back to the mailbox (the send routes by the current
        event's partition). A send enqueues all of its records or none (Producer.send_many), so a run given
        back while its send waited is sent again once, and acked with nothing awaited after its send. A
        partition that moved (or a transaction aborted) drops the run as for any event of it. Any other
        failure is no event's fault (the producer failed, or had no room for as long as its request
        timeout): the worker stops with it, nothing of the run committed; dead-lettering the run's first
        event for it would lose that event, and taking the run again would meet the same failure."""
        source = self.source
        source.current_event, source.batch_reached = events[begin], begin + 1
        try:
            await self.target.send_encoded(records)
        except RecordTooLarge:
            raise
        except PartitionMigrated as exc:
            raise UpstreamError(events[begin], exc) from exc
        except Exception as exc:
            raise UpstreamError(events[begin], Fatal(
                f"forwarding {events[begin].topic}[{events[begin].partition}] to {self.target.name!r} "
                f"failed ({type(exc).__name__}: {exc}); the worker stops, with none of its events committed "
                "(processed again after a restart)")) from exc
