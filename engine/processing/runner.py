"""Runs one agent: its supervised instances, their streams, sinks, replies and error policy.

Error policy, per agent (default from settings): an exception while an event is current is logged with
topic, partition and offset; under "dlq" the raw record goes to `<app>-<agent>-dlq` with the error in its
headers, is acked, and the agent function is started again on the rest of its mailbox (never a retry of
the same record, never a silent loss). Under "stop" the worker stops and the record stays uncommitted. A
crash with no current event goes to the supervisor, which restarts the instance within its restart limit.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents import ActorGroup, Fatal, Mailbox, RestartPolicy, Service
from engine.agent import CORRELATION_ID, REPLY_TO, Agent
from engine.codecs import dumps
from engine.errors import AgentReturned, PartitionMigrated, TopologyError
from engine.stacks import awaiting
from engine.stats import Histogram
from engine.streams.stream import Stream, UpstreamError, open_stream
from engine.topics import Topic

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from engine.events import TP, Event, EventLease, RawRecord
    from engine.settings import Settings
    from engine.streams.context import Lookup, RecordJoin, TimedLookup
    from engine.streams.quiesce import Quiesce
    from engine.tracing import AgentSpans, Tracing
    from engine.transport.base import Producer
    from engine.windows import Seconds

log = logging.getLogger(__name__)

LATEST_KEPT = 10  # dead letters an agent keeps in memory for the worker's page

Subscribe = Callable[[Topic, "AgentRunner"], None]
InternalTopic = Callable[[str, "Topic | None", "type | None", "type | None"], Topic]
# (agent name, its nth join, its topic, the other topic, within, grace, how) -> the join
JoinFactory = Callable[[str, int, Topic, Topic, "Seconds", "Seconds", str], "RecordJoin"]
# (agent, number, its stream's topic, the versioned table, grace, how): a join with a grace period
GraceJoinFactory = Callable[[str, int, Topic, "TimedLookup", "Seconds", str], "RecordJoin"]


def _no_joins(agent: str, *_: Any) -> RecordJoin:
    raise TopologyError(f"agent {agent!r}: this worker does not run joins that keep records")


def error_headers(tp: TP, record: RawRecord, error: BaseException, agent: str) -> list[tuple[str, bytes]]:
    """The original headers plus where the record came from (`tp`) and what went wrong."""
    return [
        *record.headers,
        ("engine-error", f"{type(error).__name__}: {error}"[:4000].encode()),
        ("engine-error-type", type(error).__name__.encode()),
        ("engine-agent", agent.encode()),
        ("engine-topic", tp.topic.encode()),
        ("engine-partition", str(tp.partition).encode()),
        ("engine-offset", str(record.offset).encode()),
    ]


@dataclass(frozen=True, slots=True)
class DeadLetterOrigin:
    """What `error_headers` wrote into a dead letter: the error, and the record's agent and place."""

    error: str
    error_type: str
    agent: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead letter as the worker's page shows it: when, what its headers say, and the start of its key
    and value as text (the record itself is in the dead-letter topic)."""

    at: float  # wall-clock time it was sent
    origin: DeadLetterOrigin
    key: str | None
    value: str | None


PREVIEW_BYTES = 200  # of a dead letter's key and value kept for the page


def _preview(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    text = raw[:PREVIEW_BYTES].decode(errors="replace")
    return text + "…" if len(raw) > PREVIEW_BYTES else text


def read_error_headers(headers: Iterable[tuple[str, bytes]]) -> DeadLetterOrigin:
    """`error_headers`, read back (the last of each name: engine's, after the record's own)."""
    found = {name: raw.decode(errors="replace") for name, raw in headers}
    return DeadLetterOrigin(found.get("engine-error", ""), found.get("engine-error-type", ""),
                            found.get("engine-agent", ""), found.get("engine-topic", ""),
                            int(found.get("engine-partition", -1)), int(found.get("engine-offset", -1)))


class _InstanceContext:
    """The StreamContext of one run of one instance: tracks the streams it opened."""

    def __init__(self, runner: AgentRunner, index: int) -> None:
        self.runner = runner
        self.index = index
        self.task = asyncio.current_task()  # the instance's (made inside it): where it waits, for a watchdog
        self.streams: list[Stream] = []
        self.joins = 0  # stream-stream joins made by this run: the nth is the agent's nth join
        self.grace_joins = 0  # and joins with a versioned table's grace

    def subscribe(self, topic: Topic) -> Mailbox[Event]:
        self.runner.subscribe(topic)
        return self.runner.mailbox(topic.name, self.index)

    def repartition_topic(self, name: str, like: Topic | None, key_type: type | None = None,
                          value_type: type | None = None) -> Topic:
        return self.runner.internal_topic(name, like, key_type, value_type)

    def opened(self, stream: Stream) -> None:
        self.streams.append(stream)

    def pulling(self) -> None:
        return None  # the topology declared the pipeline before the worker started

    def joined(self, topic: Topic | None, table: Lookup) -> None:
        return None  # checked by the topology at start-up

    def grace_join(self, topic: Topic, table: TimedLookup, grace: Seconds, how: str) -> RecordJoin:
        self.grace_joins += 1
        return self.runner.grace_join_factory(self.runner.agent.name, self.grace_joins - 1, topic, table,
                                              grace, how)

    def stream_join(self, topic: Topic, other: Topic, within: Seconds, grace: Seconds,
                    how: str) -> RecordJoin:
        self.runner.merge(other)
        self.joins += 1
        return self.runner.join_factory(self.runner.agent.name, self.joins - 1, topic, other, within, grace,
                                        how)

    @property
    def agent_name(self) -> str:
        return self.runner.agent.name

    @property
    def quiesce(self) -> Quiesce | None:
        return self.runner.quiesce

    @property
    def timings(self) -> Histogram:
        return self.runner.processing

    @property
    def tracing(self) -> AgentSpans | None:
        return self.runner.spans

    def failed_event(self) -> tuple[Stream | None, Event | None]:
        for stream in reversed(self.streams):
            if stream.current_event is not None:
                return stream, stream.current_event
        return None, None

    def abandon(self) -> None:
        for stream in self.streams:
            stream.abandon()


class AgentRunner(Service):
    def __init__(
        self,
        agent: Agent,
        *,
        settings: Settings,
        producer: Producer,
        subscribe: Subscribe,
        internal_topic: InternalTopic,
        dlq: Topic,
        reads: Sequence[Topic] = (),
        merged: Sequence[Topic] = (),
        join_factory: JoinFactory | None = None,
        grace_join_factory: GraceJoinFactory | None = None,
        quiesce: Quiesce | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        super().__init__(f"agent:{agent.name}")
        self.quiesce = quiesce
        self.spans: AgentSpans | None = tracing.agent(agent.name) if tracing is not None else None
        self.agent = agent
        self.settings = settings
        self.producer = producer
        self._subscribe = subscribe
        self._internal_topic = internal_topic
        self.policy = agent.on_error or settings.agent_error_policy
        self.dlq = dlq
        restart = RestartPolicy(max_restarts=settings.agent_max_restarts,
                                within=settings.agent_restart_window)
        self.group: ActorGroup[Event] = self.add_child(ActorGroup(
            agent.name, self._instance, concurrency=agent.concurrency,
            mailbox_size=settings.mailbox_size, policy=restart,
            shutdown_timeout=settings.shutdown_timeout, drop_pending_on_stop=True,
        ))
        # What /metrics reports of this agent (engine.monitors.readings).
        self.received = 0  # events handed to its instances (counted per batch by the conductor)
        self.dead_letters = 0
        self.latest_dead_letters: deque[DeadLetter] = deque(maxlen=LATEST_KEPT)  # for the worker's page
        self.processing = Histogram()  # seconds per event, of one event in TIMED_EVERY (engine.processing)
        self._extra: dict[str, list[Mailbox[Event]]] = {}
        self._merged: set[str] = set()
        self._contexts: dict[int, _InstanceContext] = {}  # the current run of each instance
        self._dropped_under: dict[tuple[str, int], EventLease | None] = {}  # the lease a drop was said for
        self.join_factory = join_factory or _no_joins
        self.grace_join_factory = grace_join_factory or _no_joins
        for topic in reads:  # what its pipeline reads besides its channel, as the topology declared it
            self.subscribe(topic)
        for topic in merged:  # what it reads into its own stream (stream-stream joins)
            self.merge(topic)

    # -- routing ------------------------------------------------------------------------------------

    def subscribe(self, topic: Topic) -> None:
        if topic.name not in self._extra and topic.name != self.agent.channel.name:
            size = self.settings.mailbox_size
            self._extra[topic.name] = [Mailbox(size) for _ in range(self.agent.concurrency)]
            self._subscribe(topic, self)

    def merge(self, topic: Topic) -> None:
        """Deliver `topic`'s events into the agent's own mailboxes, like its channel's: in the order the
        conductor hands them over (a task's timestamp order)."""
        if topic.name not in self._merged and topic.name != self.agent.channel.name:
            self._merged.add(topic.name)
            self._subscribe(topic, self)

    def internal_topic(self, name: str, like: Topic | None, key_type: type | None = None,
                       value_type: type | None = None) -> Topic:
        return self._internal_topic(name, like, key_type, value_type)

    def mailbox(self, topic: str, partition: int) -> Mailbox[Event]:
        """Events of one partition always go to the same instance: order per key is kept."""
        boxes = self._extra.get(topic)
        if boxes is None:
            return self.group.mailboxes[partition % self.agent.concurrency]
        return boxes[partition % self.agent.concurrency]

    def current_events(self) -> list[Event]:
        """The event each instance is inside now (none for an idle instance)."""
        return [event for context in self._contexts.values() for stream in context.streams
                if (event := stream.current_event) is not None]

    def waiting_at(self, event: Event) -> list[str] | None:
        """Where the instance inside `event` waits now: the coroutines it awaits through, outermost first,
        as traceback lines (None if no instance is inside it)."""
        for context in self._contexts.values():
            if context.task is not None and any(s.current_event is event for s in context.streams):
                lines = awaiting(context.task.get_coro())
                for stream in context.streams:  # (through/group_by: the forwarding runs in a task of its own)
                    forwarding = stream.forwarding
                    if forwarding is not None:
                        lines += ["and the forwarding into its stream's topic, in a task of its own:\n",
                                  *awaiting(forwarding.get_coro())]
                return lines
        return None

    @property
    def restarts(self) -> int:
        """How many times an instance crashed outside any event and was restarted."""
        return self.group.supervisor.restarts

    def all_mailboxes(self) -> list[Mailbox[Event]]:
        return [*self.group.mailboxes, *(m for boxes in self._extra.values() for m in boxes)]

    async def on_stop(self) -> None:
        for boxes in self._extra.values():
            for mailbox in boxes:
                mailbox.close(drop_pending=True)

    # -- one instance -------------------------------------------------------------------------------

    async def _instance(self, mailbox: Mailbox[Event]) -> None:
        index = self.group.mailboxes.index(mailbox)
        while True:
            context = self._contexts[index] = _InstanceContext(self, index)
            stream = open_stream(mailbox, context, self.agent.channel)
            try:
                await self._run(stream, context)
            except UpstreamError as exc:
                await self._failed(context, None, exc.event, exc.error)
                continue
            except Exception as exc:
                source, event = context.failed_event()
                if event is None:
                    context.abandon()
                    raise
                await self._failed(context, source, event, exc)
                continue
            context.abandon()
            if mailbox.closed:
                return
            raise AgentReturned(f"agent {self.agent.name!r} returned while its stream was still open")

    async def _run(self, stream: Stream, context: _InstanceContext) -> None:
        if not self.agent.is_generator:
            await self.agent.fun(stream)
            return
        async for result in self.agent.fun(stream):
            _, event = context.failed_event()
            await self._emit(result, event)

    async def _emit(self, result: Any, event: Event | None) -> None:
        key = event.key if event is not None else None  # a result keeps the key of the event it came from
        for sink in self.agent.sinks:
            if isinstance(sink, Topic):
                await sink.send(key=key, value=result)
            elif isinstance(sink, Agent):
                await sink.send(result, key=key)
            else:
                outcome = sink(result)
                if inspect.isawaitable(outcome):
                    await outcome
        if event is not None:
            reply_to = event.header(REPLY_TO)
            correlation = event.header(CORRELATION_ID)
            if reply_to is not None and correlation is not None:
                replies = self.agent.replies
                if replies is not None:
                    await replies.reply(reply_to.decode(), correlation, dumps(result))

    async def _failed(
        self, context: _InstanceContext, source: Stream | None, event: Event | None, error: Exception
    ) -> None:
        if event is None:
            context.abandon()
            raise error
        if isinstance(error, PartitionMigrated) or (event.lease is not None and event.lease.ended):
            # Not the record's fault: its partition moved. Dropped without an ack; the new owner has it.
            self._say_dropped(event, error)
            self._drop(context, source, event, None)
            context.abandon()
            return
        if isinstance(error, TopologyError):
            # Not the record's fault either: every record of the topic would fail the same way. The worker
            # stops, the record stays uncommitted, and the message says what to change.
            context.abandon()
            raise Fatal(f"agent {self.agent.name!r} cannot run: {error}") from error
        if isinstance(error, Fatal):  # given up where it happened (a fused group_by's send), not the record's
            context.abandon()
            raise error
        self._drop(context, source, event, error)
        await self.handle_error(event.tp, event.record, error)
        event.ack()
        context.abandon()

    def _say_dropped(self, event: Event, error: Exception) -> None:
        """Said once per partition and lease: when a partition moves (or its task's transaction is aborted),
        every event of it the agent still holds is dropped the same way, thousands in a broker restart."""
        tp = (event.topic, event.partition)
        if event.lease is not None and self._dropped_under.get(tp) is event.lease:
            return
        self._dropped_under[tp] = event.lease
        log.info("agent %s dropped %s[%d]@%d, and the events after it it holds of that partition: %s",
                 self.agent.name, event.topic, event.partition, event.offset,
                 error if isinstance(error, PartitionMigrated) else "its partition moved")

    @staticmethod
    def _drop(context: _InstanceContext, source: Stream | None, event: Event,
              error: BaseException | None) -> None:
        """`event` is dealt with here (`error`: dead-lettered for it); its stream moves on."""
        if source is not None and source.current_event is event:
            source.drop_current(error)
        else:
            for stream in context.streams:
                if stream.current_event is event:
                    stream.drop_current(error)

    async def handle_error(self, tp: TP, record: RawRecord, error: BaseException) -> None:
        """Apply the error policy to a record of `tp` this agent could not decode or process."""
        where = f"{tp.topic}[{tp.partition}]@{record.offset}"
        if self.policy == "stop":
            log.error("agent %s failed on %s: %s; stopping (on_error='stop')",
                      self.agent.name, where, error, exc_info=error)
            raise Fatal(
                f"agent {self.agent.name!r} failed on {where} ({type(error).__name__}: {error}); "
                "the worker stops because the agent's on_error policy is 'stop'"
            ) from error
        headers = error_headers(tp, record, error, self.agent.name)
        try:
            producer = self.producer.for_partition(tp.partition)  # the task's transaction, if any
            await producer.send(self.dlq.name, record.key, record.value, headers=headers)
        except PartitionMigrated as moved:  # the new owner, or this task rewound, meets the record again
            log.error("agent %s failed on %s: %s: %s; not sent to %s: %s", self.agent.name, where,
                      type(error).__name__, error, self.dlq.name, moved, exc_info=error)
            return
        self.dead_letters += 1
        self.latest_dead_letters.appendleft(DeadLetter(time.time(), read_error_headers(headers),
                                                       _preview(record.key), _preview(record.value)))
        log.error("agent %s failed on %s: %s: %s; record sent to %s",
                  self.agent.name, where, type(error).__name__, error, self.dlq.name,
                  exc_info=error)
