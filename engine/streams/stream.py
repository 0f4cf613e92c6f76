"""Streams: what an agent iterates, one event at a time.

Acknowledgement is implicit and exact: the root stream acks an event when the agent asks for the next one, so
an event counts as processed only after the agent's body finished with it (including awaited sends and yields
to sinks). Operators wrap the root and keep that rule: a filtered-out event is acked when the next is pulled,
`take` holds every event of a batch until the batch is done.

`through(topic)` and `group_by(key, name=)` forward each value to a topic and continue from that topic, with
the source record's headers and its event time as the record timestamp. The forwarding runs on the agent's
own task, inside `__anext__`: no background task to orphan, and an error
upstream (a failing key function, a poison value) surfaces in the agent body, where its error policy applies.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agents import Mailbox, MailboxClosed
from engine.events import Event, Headers, Restamped
from engine.streams.current import current_source
from engine.streams.operators import DerivedStream, Operators

if TYPE_CHECKING:
    from engine.streams.context import StreamContext
    from engine.topics import Topic
    from engine.tracing import AgentSpans, Span

TIMED_EVERY = 32  # one event in this many is timed, for the agent's processing-time histogram


class UpstreamError(Exception):
    """An error while forwarding upstream of through/group_by; carries the event it happened on."""

    def __init__(self, event: Event | None, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.event = event
        self.error = error


class Shape(enum.Enum):
    """What a root stream's __anext__ returns for each event (compared by identity on the per-event path)."""

    VALUE = "value"  # `async for value in stream`
    PAIR = "pair"  # `stream.items()`: (key, value)
    EVENT = "event"  # `stream.events()`: the Event


# The shapes __anext__ compares with, as module globals: reading a global is cheaper than an enum's attribute.
_VALUE, _PAIR = Shape.VALUE, Shape.PAIR
_source = current_source.get


class _RootShaped:
    """items() or events() of a root stream: its own __anext__, told what to return. A plain method, not a
    coroutine awaiting the root's: the agent awaits one coroutine per event instead of two."""

    __slots__ = ("_root", "_shape")

    def __init__(self, root: Stream, shape: Shape) -> None:
        self._root = root
        self._shape = shape

    def __aiter__(self) -> _RootShaped:
        return self

    def __anext__(self) -> Awaitable[Any]:
        return self._root.__anext__(self._shape)


class Stream(Operators):
    """A root stream over one mailbox of events; what an agent function receives."""

    current_event: Event | None = None  # an attribute here (the operators' property reads the root's)
    # The span of the current event (TracedStream's; here, where the event may end, for ending it).
    _span: Span | None = None
    _spans: AgentSpans | None = None

    def __init__(self, mailbox: Mailbox[Event], context: StreamContext, topic: Topic | None) -> None:
        self.root = self
        self.context = context
        self.topic = topic
        self._mailbox = mailbox
        self.current_event = None  # the event the agent is processing (`current_event()`)
        self._holding = False
        self._held: list[Event] = []
        self._batch: list[Event] = []  # the batch taken by take_batch, until finish_batch
        self.batch_reached = 0  # its events before this one are dealt with or current
        self._upstream: AsyncIterator[Any] | None = None
        # What forwards upstream of through/group_by into this stream's topic, one step a call (False: the
        # source ended): `_forward_one`, or a fused pipeline's forwarder (a batch a call, engine.fused).
        self._pumping: Callable[[], Coroutine[Any, Any, bool]] | None = None
        self._pump: asyncio.Task[Any] | None = None
        self._get: asyncio.Task[Event] | None = None
        self._quiesce = context.quiesce
        self._pulled = False
        # One event in TIMED_EVERY is timed, from its hand-over to the agent to the agent's next pull: a
        # countdown per event and a clock read per sample, not two clock reads per event.
        self._timings = context.timings
        self._countdown = TIMED_EVERY if self._timings is not None else -1
        self._timed_since = 0.0
        context.opened(self)

    def __aiter__(self) -> Stream:
        return self

    @property
    def agent_name(self) -> str:
        """The agent whose instance reads this stream."""
        return self.context.agent_name

    async def __anext__(self, shape: Shape = Shape.VALUE) -> Any:
        quiesce = self._quiesce  # None unless exactly-once: then checkpoints pause agents between events
        event = self.current_event
        if event is not None:
            self.current_event = None
            if self._holding:
                self._held.append(event)
            elif event.lease is not None:  # Event.ack, inlined on the hottest path
                event.lease.ack(event.record.offset)
            if quiesce is not None:
                quiesce.finished(self)
            if self._timed_since:
                self._timings.observe(time.perf_counter() - self._timed_since)  # type: ignore[union-attr]
                self._timed_since = 0.0
        while quiesce is not None and quiesce.closed:
            await quiesce.wait_open()
        # A mailbox never holds an event of a partition no longer dispatched: the conductor purges them on
        # revoke and loss, and `abandon` does not requeue them; so no per-event ownership check here.
        event = self._mailbox.get_nowait()
        if event is None:
            event = await (self._next_forwarding() if self._pumping else self._next_waiting())
            # A checkpoint may have closed the gate while this agent waited for an event (it was not inside
            # one, so the checkpoint did not wait for it): the event must not start inside the cut, or what
            # it sends would commit with the cut while its offset does not.
            while quiesce is not None and quiesce.closed:
                await quiesce.wait_open()
        if quiesce is not None:
            quiesce.started(self)
        self._countdown -= 1
        if not self._countdown:
            self._countdown = TIMED_EVERY
            self._timed_since = time.perf_counter()
        self.current_event = event
        if _source() is not self:  # (its first event in this task: engine.streams.current)
            current_source.set(self)
        if shape is _VALUE:
            return event.value
        return (event.key, event.value) if shape is _PAIR else event

    # -- a batch at a time (engine.fused) ------------------------------------------------------------

    async def take_batch(self) -> list[Event]:
        """Every event waiting in the mailbox (waiting for one if there is none), for an operator that
        processes them in one synchronous step (a fused pipeline, engine.fused): under exactly-once the batch
        counts as one event for the quiesce gate, and since nothing awaits inside it no checkpoint falls
        within it (unless the operator awaits: a fused group_by's sends). The operator acks each event it is
        done with, keeps `current_event` on the event a table write, a send or an error belongs to, and
        `batch_reached` past it (what `abandon` gives back to the mailbox is the current event and those
        after it), and ends the batch with `finish_batch`. StopAsyncIteration once the mailbox is closed and
        empty."""
        quiesce = self._quiesce
        while quiesce is not None and quiesce.closed:
            await quiesce.wait_open()
        events = self._mailbox.take_all_nowait()
        if not events:
            first = await (self._next_forwarding() if self._pumping else self._next_waiting())
            while quiesce is not None and quiesce.closed:  # (as in __anext__: not inside a cut)
                await quiesce.wait_open()
            events = [first, *self._mailbox.take_all_nowait()]
        if quiesce is not None:
            quiesce.started(self)
        if _source() is not self:
            current_source.set(self)
        self._timed_since = time.perf_counter() if self._timings is not None else 0.0
        self._batch, self.batch_reached = events, 0
        return events

    def finish_batch(self, size: int) -> None:
        """The batch taken by `take_batch` is done (each of its `size` events acked): the gate may close,
        and the processing time per event is the batch's mean."""
        self.current_event = None
        self._batch = []
        if self._quiesce is not None:
            self._quiesce.finished(self)
        timings = self._timings
        if self._timed_since and timings is not None:
            timings.observe((time.perf_counter() - self._timed_since) / size)
            self._timed_since = 0.0

    def stands_for(self, key: Any, time_ms: int, headers: Headers | None = None) -> None:
        """The current event stands for a join result of `key` at event time `time_ms` (a stream-stream
        join's pair at the later of its records' times, a record emitted alone when its wait ended, an event
        released by a join's grace: Kafka Streams' result timestamps), with `headers` (an event released by
        a join's grace has its own; None: the record's): until the next event, `current_event` has that key,
        that time (what windowed tables and `stream.current_event.timestamp` read), those headers and the
        record's offset and value; acked once, as the record it is underneath."""
        current = self.current_event
        if current is None:
            return
        record = current.record
        if record.timestamp != time_ms or headers is not None:
            record = Restamped(record, time_ms, headers)
        elif current.key is key or current.key == key:
            current.time_ms = time_ms  # (the record's own result: its time is the record's)
            return
        moved = Event(current.tp, record, key, current.value, current.lease)
        moved.time_ms = time_ms
        self.current_event = moved

    def _end_span(self, error: BaseException | None = None) -> None:
        span, spans = self._span, self._spans
        if span is not None and spans is not None:
            self._span = None
            spans.end(span, error)

    def _declared(self) -> None:
        """The first pull found an empty mailbox (nothing is dispatched before the worker subscribed): tell
        the worker this agent's pipeline is declared. Here, on the waiting path, not per event."""
        if not self._pulled:
            self._pulled = True
            self.context.pulling()

    async def _next_waiting(self) -> Event:
        self._declared()
        try:
            return await self._mailbox.get()
        except MailboxClosed:
            raise StopAsyncIteration from None

    def hold(self, holding: bool) -> None:
        self._holding = holding

    def release_held(self) -> None:
        """Ack everything held by `take`, and the current event."""
        for event in self._held:
            event.ack()
        self._held.clear()
        if self.current_event is not None:
            self.current_event.ack()
            self.current_event = None
            self._end_span()

    def abandon(self) -> None:
        """The agent died: stop forwarding, and requeue what was taken but never finished (an event the
        waiting get took from the mailbox as the forwarding failed included)."""
        got = self._get
        for task in (self._pump, got):
            if task is not None:
                task.cancel()
        self._pump = self._get = None
        if self.current_event is not None and self._quiesce is not None:
            self._quiesce.finished(self)
        self._end_span()
        taken = [*self._held, *([self.current_event] if self.current_event is not None else []),
                 *self._batch[self.batch_reached:]]
        if got is not None and got.done() and not got.cancelled() and got.exception() is None:
            taken.append(got.result())
        unfinished = [e for e in taken
                      if e.lease is None or e.lease.dispatching]  # a moved partition's: its new owner's
        self._held, self.current_event, self._batch = [], None, []
        if not self._mailbox.closed:
            self._mailbox.requeue(unfinished)

    def drop_current(self, error: BaseException | None = None) -> None:
        """The current event was dealt with elsewhere (forwarded; dead-lettered for `error` and acked, or
        dropped)."""
        if self.current_event is not None and self._quiesce is not None:
            self._quiesce.finished(self)
        self.current_event = None
        self._end_span(error)

    # -- through / group_by -------------------------------------------------------------------------

    @property
    def forwarding(self) -> asyncio.Task[Any] | None:
        """The task forwarding upstream events into this stream's topic now, if one runs (the agent's own
        task waits for it, or for this stream's next event: where a stuck forward waits is in this one)."""
        pump = self._pump
        return pump if pump is not None and not pump.done() else None

    def set_upstream(
        self, upstream: AsyncIterator[Any], root: Stream, topic: Topic, key: Callable[[Any], Any] | None
    ) -> None:
        self._upstream = upstream
        self._upstream_root = root
        self._target = topic
        self._key = key
        self._pumping = self._forward_one

    def forwarded_to(self, topic: Topic, forward: Callable[[], Coroutine[Any, Any, bool]]) -> Stream:
        """The stream of `topic` (this agent instance's events of it), which `forward()` fills from this
        stream a batch a call (a fused pipeline's group_by, engine.fused; it raises UpstreamError for an
        event it failed on), run while that stream waits for its own events, as `group_by`'s forwarding is."""
        context = self.context
        stream = open_stream(context.subscribe(topic), context, topic)
        stream._pumping = forward
        return stream

    async def _forward_one(self) -> bool:
        root = self._upstream_root
        assert self._upstream is not None
        try:
            value = await self._upstream.__anext__()
        except StopAsyncIteration:
            return False
        except Exception as exc:
            raise UpstreamError(root.current_event, exc) from exc
        event = root.current_event
        try:
            key = self._key(value) if self._key is not None else (event.key if event else None)
            if event is None:
                await self._target.send(key=key, value=value)
            else:
                # The record keeps its event time (the source's extractor applied, as Kafka Streams does)
                # and its headers: windows after a repartition are on event time, not on the clock.
                at = root.topic.event_time_ms(event) if root.topic is not None else event.record.timestamp
                await self._target.send(key=key, value=value, headers=event.headers, timestamp_ms=at)
        except Exception as exc:
            raise UpstreamError(event, exc) from exc
        if event is not None and not root._holding:
            # Forwarded: the send is flushed before any commit, so the source event is done.
            root.drop_current()
            event.ack()
        return True

    async def _next_forwarding(self) -> Event:
        self._declared()
        loop = asyncio.get_running_loop()
        while True:
            if self._get is None:
                self._get = loop.create_task(self._mailbox.get())
            if self._pump is None and self._pumping is not None:
                self._pump = loop.create_task(self._pumping())
            waiting = {t for t in (self._get, self._pump) if t is not None}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if self._pump in done:
                pump, self._pump = self._pump, None
                if not pump.result():
                    self._pumping = None  # source ended; drain our own mailbox until it closes
            if self._get in done:
                get, self._get = self._get, None
                try:
                    return get.result()
                except MailboxClosed:
                    raise StopAsyncIteration from None

    def items(self) -> DerivedStream:
        """(key, value) pairs: the root's own __anext__, told to return them (no generator between)."""
        return DerivedStream(self, _RootShaped(self, Shape.PAIR))

    def events(self) -> DerivedStream:
        """The Event objects, from the root's own __anext__."""
        return DerivedStream(self, _RootShaped(self, Shape.EVENT))

    def downstream(self, topic: Topic, upstream: AsyncIterator[Any], key: Callable[[Any], Any] | None
                   ) -> Stream:
        """The stream of `topic` that `upstream` (an operator of this stream's) forwards into, re-keyed by
        `key` if given: what `through` and `group_by` continue with."""
        stream = open_stream(self.context.subscribe(topic), self.context, topic)
        stream.set_upstream(upstream, self, topic, key)
        return stream


class TracedStream(Stream):
    """A root stream whose events each have a span (engine.tracing): begun when the event is handed out,
    ended when the agent pulls the next one or the event is dealt with elsewhere (forwarded, dead-lettered,
    dropped). What agents iterate when the worker traces: a subclass, so that a worker that does not trace
    pays nothing for it per event."""

    def __init__(self, mailbox: Mailbox[Event], context: StreamContext, topic: Topic | None,
                 spans: AgentSpans) -> None:
        super().__init__(mailbox, context, topic)
        self._spans = self._begins = spans

    async def __anext__(self, shape: Shape = Shape.VALUE) -> Any:
        if self._span is not None:
            self._end_span()
        value = await super().__anext__(shape)
        event = self.current_event
        if event is not None:  # (always: it was just handed out)
            self._span = self._begins.begin(event)
        return value


def open_stream(mailbox: Mailbox[Event], context: StreamContext, topic: Topic | None) -> Stream:
    """An agent's root stream over `mailbox`: traced if the worker traces."""
    spans = context.tracing
    return Stream(mailbox, context, topic) if spans is None else TracedStream(mailbox, context, topic, spans)


AgentFun = Callable[[Stream], Any]
