"""memory://: the clients of an in-process broker with partitions, offsets and consumer groups
(engine.transport.memory_broker).

For fast unit tests and the zero-setup demo, never as a stand-in for Kafka in integration tests. Keys are
partitioned like Kafka's default partitioner, topics are auto-created like a default broker, and a group
spreads partitions over its members (range assignment) with eager revoke/assign on every membership change.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING

from engine.assignor import Assignment, Placement
from engine.errors import TransportError
from engine.transport.base import GroupDescription, GroupMember
from engine.transport.memory_broker import Group, MemoryBroker

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence
    from contextlib import AbstractContextManager

    from engine.events import TP, Headers, RawRecord
    from engine.transport.base import GroupTopology, KeyedRecord, PartitionsCallback, TopicSpec


class MemoryConsumer:
    def __init__(
        self,
        broker: MemoryBroker,
        group_id: str | None,
        on_assigned: PartitionsCallback | None,
        on_revoked: PartitionsCallback | None,
        auto_offset_reset: str = "earliest",
        placement: Placement | None = None,
    ) -> None:
        self.broker = broker
        self.member_id = uuid.uuid4().hex
        self.placement = placement or Placement()
        self._from_end = auto_offset_reset == "latest"
        self.group_id = group_id
        self.topics: set[str] = set()
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._assigned: set[TP] = set()
        self._positions: dict[TP, int] = {}
        self._generation = 0
        self._target: tuple[int, set[TP], Assignment | None] = (0, set(), None)
        self._paused: set[TP] = set()
        self._held: set[TP] = set()  # held back (hold_back): not returned, not dropped
        self._polls = 0
        self._running = False

    async def start(self) -> None:
        self._running = True
        if self.group_id is not None and self.topics:
            self.broker.join(self.group_id, self)

    async def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        if self._assigned and self._on_revoked is not None:
            await self._on_revoked(set(self._assigned))
        self._assigned.clear()
        if self.group_id is not None:
            self.broker.leave(self.group_id, self)

    def subscribe(self, topics: Collection[str]) -> None:
        if self.group_id is None:
            raise ValueError("subscribe needs a group_id; use assign outside a group")
        self.topics = set(topics)
        if self._running:
            self.broker.join(self.group_id, self)

    @property
    def group_protocol(self) -> str | None:
        return None if self.group_id is None else "classic"

    def group_generation(self) -> int | None:
        return None if self.group_id is None or not self._generation else self._generation

    def request_rebalance(self) -> None:
        group = self.broker.groups.get(self.group_id) if self.group_id is not None else None
        if group is not None:
            self.broker.rebalance(group)

    def assignment(self) -> set[TP]:
        return set(self._assigned)

    def assign(self, tps: Collection[TP]) -> None:
        if self.group_id is not None:
            raise ValueError("assign is for consumers outside a group")
        for tp in tps:
            if tp.topic not in self.broker.topics:
                self.broker.create_topic(tp.topic, self.broker.default_partitions)
        self._positions = {tp: self._positions.get(tp, 0) for tp in tps}
        self._assigned = set(tps)
        self.broker.notify()  # a fetch waiting for data should look again (at the new partitions)

    def seek(self, tp: TP, offset: int) -> None:
        self._positions[tp] = offset
        self.broker.notify()

    async def position(self, tp: TP) -> int:
        return self._positions[tp]

    async def lag(self, tp: TP) -> int | None:
        position = self._positions.get(tp)
        partitions = self.broker.topics.get(tp.topic)
        if position is None or not partitions:
            return None
        return max(len(partitions[tp.partition]) - position, 0)

    def fetched_at(self, tp: TP) -> float | None:
        return None  # (no fetches: getmany reads the broker's lists, which cannot stall)

    async def offsets(self, tps: Collection[TP]) -> dict[TP, tuple[int, int]]:
        out = {}
        for tp in tps:
            partitions = self.broker.topics.get(tp.topic)
            out[tp] = (0, len(partitions[tp.partition]) if partitions else 0)
        return out

    async def offsets_at(self, tps: Collection[TP], timestamp_ms: int) -> dict[TP, int]:
        out = {}
        for tp in tps:
            records = self.broker.topics.get(tp.topic, [[]] * (tp.partition + 1))[tp.partition]
            out[tp] = next((r.offset for r in records if r.timestamp >= timestamp_ms), len(records))
        return out

    async def committed(self, tps: Collection[TP]) -> dict[TP, int | None]:
        group = self.broker.groups.get(self.group_id or "")
        return {tp: (group.committed.get(tp) if group else None) for tp in tps}

    def pause(self, tps: Collection[TP]) -> None:
        self._paused.update(tps)

    def resume(self, tps: Collection[TP]) -> None:
        self._paused.difference_update(tps)
        self.broker.notify()  # a fetch waiting for data should look again

    def hold_back(self, tps: Collection[TP]) -> None:
        self._held.update(tps)  # (nothing is fetched ahead here: holding back is pausing)

    def let_through(self, tps: Collection[TP]) -> None:
        self._held.difference_update(tps)
        self.broker.notify()

    def target(self, generation: int, tps: set[TP], share: Assignment | None) -> None:
        """What the group's rebalance gives this member (taken at its next fetch)."""
        self._target = (generation, tps, share)

    async def _sync_group(self) -> None:
        generation, target, share = self._target
        if self.group_id is None or generation == self._generation:
            return
        self._generation = generation
        if share is not None:
            self.placement.assignment_received(share)
        if self._assigned and self._on_revoked is not None:
            await self._on_revoked(set(self._assigned))
        group = self.broker.groups[self.group_id]
        self._assigned = set(target)
        self._paused.clear()
        self._held.clear()
        ends = {tp: len(self.broker.topics[tp.topic][tp.partition]) if self._from_end else 0 for tp in target}
        self._positions = {tp: group.committed.get(tp, ends[tp]) for tp in target}
        if self._on_assigned is not None:
            await self._on_assigned(set(target))

    def _poll(self, max_records: int) -> dict[TP, list[RawRecord]]:
        """Up to `max_records`, from each partition in turn: the partition served first moves on at each
        poll (as a broker rotates a fetch's partitions), so none starves while others have a backlog."""
        out: dict[TP, list[RawRecord]] = {}
        budget = max_records
        order = sorted(self._assigned)
        self._polls += 1
        turn = self._polls % len(order) if order else 0
        for tp in order[turn:] + order[:turn]:
            if budget <= 0:
                break
            if tp in self._paused or tp in self._held:
                continue
            log = self.broker.topics[tp.topic][tp.partition]
            position = self._positions[tp]
            if position < len(log):
                chunk = log[position:position + budget]
                out[tp] = list(chunk)
                self._positions[tp] = position + len(chunk)
                budget -= len(chunk)
        return out

    async def getmany(self, timeout: float | None, max_records: int) -> Mapping[TP, list[RawRecord]]:
        await self._sync_group()
        out = self._poll(max_records)
        if not out and (timeout is None or timeout > 0):
            await self.broker.wait(timeout)
            await self._sync_group()
            out = self._poll(max_records)
        return out

    def waiting_on_worker(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # (no poll interval here)

    def wakeup(self) -> None:
        self.broker.notify()

    async def confirm_membership(self) -> None:
        return None  # in-process: a member leaves only by stopping

    async def commit(self, offsets: Mapping[TP, int]) -> None:
        if self.group_id is None:
            raise ValueError("commit needs a group_id")
        committed = self.broker.groups[self.group_id].committed
        for tp, offset in offsets.items():
            if tp in self._assigned:
                committed[tp] = offset


class MemoryProducer:
    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[object]:
        record = self.broker.append(topic, key, value, headers or (), partition, timestamp_ms)
        self.broker.notify()
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(record)
        return future

    async def send_batch(self, topic: str, partition: int,
                         records: Sequence[tuple[bytes | None, bytes | None]],
                         timestamps: Sequence[int] | None = None) -> asyncio.Future[int]:
        offset = -1
        for index, (key, value) in enumerate(records):
            at = None if timestamps is None else timestamps[index]
            offset = self.broker.append(topic, key, value, (), partition, at).offset
        self.broker.notify()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(offset)
        return future

    async def send_many(self, topic: str, records: Sequence[KeyedRecord]) -> None:
        for key, value, headers, timestamp_ms in records:
            self.broker.append(topic, key, value, headers, None, timestamp_ms)
        self.broker.notify()

    async def flush(self) -> None:
        return None

    def for_partition(self, number: int) -> MemoryProducer:
        return self

    @property
    def transactional(self) -> bool:
        return False  # in-process: a crash loses the broker too, so there is nothing to make atomic

    async def commit_transaction(self, offsets: Mapping[TP, int], group_id: str) -> None:
        raise NotImplementedError("memory:// producers are not transactional")


class MemoryAdmin:
    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    async def create_topics(self, specs: Collection[TopicSpec]) -> dict[str, int]:
        for spec in specs:
            self.broker.create_topic(spec.name, spec.partitions, spec.config)
        return await self.describe_topics()

    async def describe_topics(self) -> dict[str, int]:
        return {name: len(parts) for name, parts in self.broker.topics.items()}

    async def describe_group(self, group_id: str) -> GroupDescription:
        group = self.broker.groups.get(group_id)
        if group is None or not group.members:
            return GroupDescription("Empty" if group is not None else "Dead", [])
        nothing = Assignment(frozenset(), frozenset(), {})
        members = [GroupMember(m.member_id, "memory", m.placement.current or nothing,
                               dict(m.placement.positions())) for m in group.members]
        return GroupDescription("Stable", members)

    async def committed(self, group_id: str) -> dict[TP, int]:
        group = self.broker.groups.get(group_id)
        return dict(group.committed) if group is not None else {}

    async def topic_configs(self, names: Collection[str]) -> dict[str, dict[str, str]]:
        return {name: dict(self.broker.configs[name]) for name in names if name in self.broker.configs}

    async def topic_ids(self, names: Collection[str]) -> dict[str, bytes]:
        return {name: self.broker.ids[name] for name in names if name in self.broker.ids}

    async def delete_topics(self, names: Collection[str]) -> None:
        for name in names:
            self.broker.delete_topic(name)
            for group in self.broker.groups.values():
                for tp in [tp for tp in group.committed if tp.topic == name]:
                    del group.committed[tp]

    async def set_committed(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        self.broker.groups.setdefault(group_id, Group()).committed.update(offsets)

    async def delete_records(self, before: Mapping[TP, int]) -> None:
        """Nothing: the in-memory broker lives as long as its process and keeps every record (its offsets
        are list positions)."""

    async def close(self) -> None:
        return None


class MemoryTransport:
    def __init__(self, url: str) -> None:
        self.url = url
        self.broker = MemoryBroker.named(url.split("://", 1)[1])

    def consumer(
        self,
        *,
        group_id: str | None,
        on_assigned: PartitionsCallback | None = None,
        on_revoked: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
        max_poll_records: int = 1000,
        auto_offset_reset: str = "earliest",
        placement: Placement | None = None,
        instance_id: str | None = None,  # a memory group has no sessions: every member is dynamic
        group_protocol: str = "classic",
        group_topology: Callable[[], GroupTopology] | None = None,
    ) -> MemoryConsumer:
        if group_protocol == "streams" and group_id is not None:
            raise TransportError("memory:// groups speak only the classic protocol: group_protocol=streams "
                                 "needs a Kafka broker (4.1 or later); use auto or classic")
        return MemoryConsumer(self.broker, group_id, on_assigned, on_revoked, auto_offset_reset, placement)

    def producer(self, transactional_id: str | None = None) -> MemoryProducer:
        return MemoryProducer(self.broker)

    def admin(self) -> MemoryAdmin:
        return MemoryAdmin(self.broker)
