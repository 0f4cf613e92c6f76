"""The conductor: one consumer for the worker; fetches, decodes, routes to agents, and checkpoints.

Offsets (the at-least-once rule): every dispatched record is tracked per partition and acked by each agent
that received it; only the contiguous prefix of finished records may be committed. A checkpoint snapshots
those offsets, flushes the producer (so every record sent while processing them is acknowledged), and only
then commits: nothing is committed that was not processed, and nothing processed is lost if we crash before
the commit (it is processed again).

Exactly-once (`processing_guarantee="exactly_once"`, Kafka): the producer is transactional and the same step
becomes: pause agents between events (engine.quiesce), snapshot offsets and table buffers, send the buffers
(and closed windows), commit the transaction with the source offsets in it, then write the stores. Every
output, changelog record and offset of a checkpoint becomes visible together or not at all; readers use
read_committed, so a worker killed mid-checkpoint leaves nothing behind, and its successor replays exactly
the events whose effects were lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from agents import Fatal, Service, ServiceState
from engine.errors import DecodeError, TransportError
from engine.events import TP, Event, RawRecord
from engine.offsets import OffsetTracker
from engine.quiesce import Quiesce
from engine.topics import decode_error

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Coroutine

    from engine.runner import AgentRunner
    from engine.settings import Settings
    from engine.tables.manager import TableManager
    from engine.topics import Topic
    from engine.transport.base import Admin, Producer, Transport

log = logging.getLogger(__name__)


class Conductor(Service):
    def __init__(
        self,
        transport: Transport,
        settings: Settings,
        producer: Producer,
        admin_factory: Callable[[], Admin],
        *,
        tables: TableManager | None = None,
    ) -> None:
        super().__init__("conductor")
        self.tables = tables
        self._recovery: asyncio.Task[None] | None = None
        self.settings = settings
        self.producer = producer
        self._admin_factory = admin_factory
        self.consumer = transport.consumer(
            group_id=settings.app_id,
            on_assigned=self._on_assigned,
            on_revoked=self._on_revoked,
            max_poll_records=settings.max_poll_records,
        )
        self.routes: dict[str, list[tuple[Topic, AgentRunner]]] = {}
        self.trackers: dict[TP, OffsetTracker] = {}
        self.failure: BaseException | None = None
        self.failed = asyncio.Event()
        self._fetcher: asyncio.Task[None] | None = None
        self._started = False
        self.exactly_once = settings.processing_guarantee == "exactly_once"
        self.quiesce = Quiesce() if self.exactly_once else None
        self._warned_quiesce = False

    # -- wiring -------------------------------------------------------------------------------------

    def add_route(self, topic: Topic, runner: AgentRunner) -> None:
        self.routes.setdefault(topic.name, []).append((topic, runner))
        if self._started:
            self.spawn(self._subscribe_new(topic), f"subscribe:{topic.name}")

    async def _subscribe_new(self, topic: Topic) -> None:
        admin = self._admin_factory()
        try:
            await admin.create_topics(
                [topic.spec(self.settings.topic_partitions, self.settings.topic_replication)]
            )
        finally:
            await admin.close()
        self.consumer.subscribe(sorted(self.routes))

    # -- lifecycle ----------------------------------------------------------------------------------

    async def on_start(self) -> None:
        if self.routes:
            self.consumer.subscribe(sorted(self.routes))
        await self.consumer.start()
        self._started = True
        if self.routes:
            self._fetcher = self.spawn(self._guard(self._fetch_loop()), "fetch")
        self.spawn(self._guard(self._commit_loop()), "commit")

    def stop_fetching(self) -> None:
        if self._fetcher is not None:
            self._fetcher.cancel()

    async def on_stop(self) -> None:
        self.stop_fetching()
        if self.failure is None:
            try:
                await self.checkpoint()
            except Exception as exc:
                log.error("final checkpoint failed: %s", exc)
        await self.consumer.stop()

    async def _guard(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not isinstance(exc, Fatal):
                log.error("conductor failed: %s", exc, exc_info=exc)
            self.failure = exc
            self.failed.set()

    # -- the hot path -------------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        consumer = self.consumer
        routes = self.routes
        trackers = self.trackers
        max_records = self.settings.max_poll_records
        quiesce = self.quiesce
        while True:
            batches = await consumer.getmany(0.5, max_records)
            if quiesce is not None and quiesce.closed:
                await quiesce.wait_open()  # a checkpoint is waiting for agents to be idle
            for tp, records in batches.items():
                tracker = trackers.get(tp)
                if tracker is None:
                    tracker = trackers[TP(tp[0], tp[1])] = OffsetTracker()
                topic_routes = routes.get(tp[0])
                if not topic_routes:
                    continue
                if len(topic_routes) == 1:
                    topic, runner = topic_routes[0]
                    await self._dispatch_one(topic, runner, tp[1], records, tracker)
                else:
                    await self._dispatch_many(topic_routes, tp[1], records, tracker)

    async def _dispatch_one(self, topic: Topic, runner: AgentRunner, partition: int,
                            records: list[RawRecord], tracker: OffsetTracker) -> None:
        decode_key = None if topic.key_codec.name == "raw" else topic.key_codec.decode
        decode_value = topic.value_codec.decode
        events: list[Event] = []
        append = events.append
        track = tracker.track
        for record in records:
            try:
                key = record.key if decode_key is None else decode_key(record.key)
                value = decode_value(record.value)
            except DecodeError as exc:
                track(record.offset)
                await runner.handle_error(record, decode_error(record, exc))
                tracker.ack(record.offset)
                continue
            track(record.offset)
            append(Event(record, key, value, tracker))
        if events:
            await runner.mailbox(topic.name, partition).put_many(events)

    async def _dispatch_many(self, topic_routes: list[tuple[Topic, AgentRunner]], partition: int,
                             records: list[RawRecord], tracker: OffsetTracker) -> None:
        """Several agents read this topic: each gets the record decoded by its own Topic's codecs."""
        for record in records:
            decoded: dict[int, tuple[Any, Any] | DecodeError] = {}
            for topic, _ in topic_routes:
                if id(topic) not in decoded:
                    try:
                        decoded[id(topic)] = topic.decode(record)
                    except DecodeError as exc:
                        decoded[id(topic)] = exc
            receivers = sum(1 for t, _ in topic_routes if not isinstance(decoded[id(t)], DecodeError))
            tracker.track(record.offset, shares=max(receivers, 1))
            for topic, runner in topic_routes:
                outcome = decoded[id(topic)]
                if isinstance(outcome, DecodeError):
                    await runner.handle_error(record, outcome)
                else:
                    event = Event(record, outcome[0], outcome[1], tracker)
                    await runner.mailbox(topic.name, partition).put(event)
            if receivers == 0:
                tracker.ack(record.offset)

    # -- checkpoints and rebalances -----------------------------------------------------------------

    async def _commit_loop(self) -> None:
        interval = self.settings.commit_interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            await self.checkpoint()

    async def checkpoint(self, only: Collection[TP] | None = None) -> None:
        """Flush everything sent so far, then commit what is fully processed."""
        quiesce = self.quiesce
        if quiesce is None:
            await self._checkpoint(only)
            return
        # Exactly-once: one transaction holds everything sent since the last one, so its offsets must cover
        # every partition, not only `only`; and agents must be between events when the cut is taken.
        if not await quiesce.pause(self.settings.commit_interval.total_seconds() * 2 + 1) \
                and not self._warned_quiesce:
            self._warned_quiesce = True
            log.warning("agents did not reach a pause between events in time (an agent awaiting another "
                        "agent, or holding events with take()?); this checkpoint is at-least-once")
        try:
            await self._checkpoint(None)
        finally:
            quiesce.resume()

    async def _checkpoint(self, only: Collection[TP] | None) -> None:
        offsets = {}
        for tp, tracker in list(self.trackers.items()):
            if only is not None and tp not in only:
                continue
            offset = tracker.committable()
            if offset is not None:
                offsets[tp] = offset
        tables = self.tables
        pending = tables.prepare() if tables is not None else []
        transactional = self.producer.transactional
        if not offsets and not pending and not transactional:
            return  # (a transaction is committed anyway: timers and other sends may be in it)
        try:
            if tables is not None:
                await tables.send(pending)
            if transactional:
                await self.producer.commit_transaction(offsets, self.settings.app_id)
            else:
                await self.producer.flush()  # DeliveryFailed propagates: never commit past a lost send
        except BaseException:
            if tables is not None:
                tables.abort(pending)
            raise
        if tables is not None:
            tables.complete(pending)
        if not offsets:
            return
        if not transactional:
            try:
                await self.consumer.commit(offsets)
            except TransportError as exc:
                log.warning("commit of %d partitions failed (%s); will retry", len(offsets), exc)
                return
        for tp, offset in offsets.items():
            self.trackers[tp].mark_committed(offset)

    async def _on_assigned(self, assigned: set[TP]) -> None:
        log.info("assigned %d partitions: %s", len(assigned), _fmt(assigned))
        for tp in assigned:
            self.trackers[tp] = OffsetTracker()
        if self.tables is not None and assigned:
            # Tables of these partitions must be recovered before their events are processed.
            self.consumer.pause(assigned)
            self._recovery = self.spawn(self._guard(self._recover(assigned)), "recover")

    async def _recover(self, assigned: set[TP]) -> None:
        assert self.tables is not None
        await self.tables.assign({tp.partition for tp in assigned})
        still = assigned & self.consumer.assignment()
        self.consumer.resume(still)
        log.info("tables ready; processing %d partitions", len(still))

    async def _on_revoked(self, revoked: set[TP]) -> None:
        """Drop queued events of revoked partitions, let in-flight ones finish, commit, forget."""
        log.info("revoked %d partitions: %s", len(revoked), _fmt(revoked))
        purged: dict[TP, int] = dict.fromkeys(revoked, 0)

        def drop(event: Event) -> bool:
            tp = TP(event.record.topic, event.record.partition)
            if tp in purged:
                purged[tp] += 1
                return True
            return False

        runners = {id(r): r for rs in self.routes.values() for _, r in rs}.values()
        for runner in runners:
            for mailbox in runner.all_mailboxes():
                mailbox.purge(drop)
        # While stopping, agents have already finished or abandoned their in-flight events: don't wait.
        wait = self.settings.shutdown_timeout.total_seconds() if self.state is ServiceState.RUNNING else 0
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(  # noqa: ASYNC110  # acks come from many places; polling is simplest
            tp in self.trackers and self.trackers[tp].in_flight > purged[tp] for tp in revoked
        ):
            await asyncio.sleep(0.01)
        if self.failure is None:
            try:
                await self.checkpoint(only=revoked)
            except Exception as exc:
                log.warning("commit on revoke failed: %s", exc)
        for tp in revoked:
            self.trackers.pop(tp, None)
        if self.tables is not None:
            if self._recovery is not None and not self._recovery.done():
                self._recovery.cancel()  # a rebalance during recovery: it resumes from the stores later
            self.tables.revoke({tp.partition for tp in revoked})


def _fmt(tps: Collection[TP]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{t}{sorted(p)}" for t, p in sorted(by_topic.items()))
