"""The in-process broker of memory:// (engine.transport.memory): topics of partitions of records, offsets,
and consumer groups whose rebalances place tasks with engine's assignor. Brokers are named (`memory://name`,
default `memory://`) so that apps in one process share one."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from engine.assignor import Assignment, Placement
from engine.clock import wall_time
from engine.events import TP, Headers
from engine.partitioner import KeyHashes

if TYPE_CHECKING:
    from collections.abc import Mapping


class GroupMemberClient(Protocol):
    """A consumer as the broker's group sees it."""

    member_id: str
    placement: Placement
    topics: set[str]

    def target(self, generation: int, tps: set[TP], share: Assignment | None) -> None:
        """The partitions (and the assignment) this member gets from the group's rebalance."""
        ...


@dataclass(slots=True, frozen=True)
class MemoryRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    sequence: int = 0  # the broker's count of appends before this one: the order records were written in


@dataclass
class Group:
    members: list[GroupMemberClient] = field(default_factory=list)
    generation: int = 0
    committed: dict[TP, int] = field(default_factory=dict)


class MemoryBroker:
    _registry: ClassVar[dict[str, MemoryBroker]] = {}

    def __init__(self, default_partitions: int = 4) -> None:
        self.default_partitions = default_partitions
        self.topics: dict[str, list[list[MemoryRecord]]] = {}
        self.configs: dict[str, Mapping[str, str]] = {}
        self.ids: dict[str, bytes] = {}  # topic ids: a deleted and recreated topic gets a new one
        self.groups: dict[str, Group] = {}
        self._waiters: set[asyncio.Future[None]] = set()
        self._sticky = itertools.count()
        self._hashes = KeyHashes()
        self.appended = 0  # records appended to any topic, ever

    @classmethod
    def named(cls, name: str) -> MemoryBroker:
        broker = cls._registry.get(name)
        if broker is None:
            broker = cls._registry[name] = cls()
        return broker

    @classmethod
    def forget(cls, broker: MemoryBroker) -> None:
        """Drop a named broker and its records (a test driver that closed)."""
        for name in [name for name, known in cls._registry.items() if known is broker]:
            del cls._registry[name]

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
        if name not in self.topics:
            self.topics[name] = [[] for _ in range(partitions)]
            self.configs[name] = dict(config or {})
            self.ids[name] = uuid.uuid4().bytes
            for group in self.groups.values():
                if any(name in m.topics for m in group.members):
                    self.rebalance(group)

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its records (tests: a changelog deleted and recreated)."""
        for mapping in (self.topics, self.configs, self.ids):
            mapping.pop(name, None)

    def append(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers, partition: int | None,
        timestamp_ms: int | None = None,
    ) -> MemoryRecord:
        if topic not in self.topics:
            self.create_topic(topic, self.default_partitions)
        partitions = self.topics[topic]
        if partition is None:
            partition = (
                self._hashes.partition(key, len(partitions)) if key is not None
                else next(self._sticky) % len(partitions)
            )
        log = partitions[partition]
        timestamp = int(wall_time() * 1000) if timestamp_ms is None else timestamp_ms
        record = MemoryRecord(topic, partition, len(log), timestamp, key, value, tuple(headers),
                              self.appended)
        self.appended += 1
        log.append(record)
        return record

    def notify(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def wait(self, timeout: float | None) -> None:
        """Until the next `notify`, or `timeout` seconds (None: no limit)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(waiter)

    def join(self, group_id: str, member: GroupMemberClient) -> None:
        group = self.groups.setdefault(group_id, Group())
        if member not in group.members:
            group.members.append(member)
        self.rebalance(group)

    def leave(self, group_id: str, member: GroupMemberClient) -> None:
        group = self.groups.get(group_id)
        if group and member in group.members:
            group.members.remove(member)
            self.rebalance(group)

    def rebalance(self, group: Group) -> None:
        """Assign with engine's assignor (engine.assignor, the same placement as on Kafka): partition
        p of every topic a member reads goes with task p."""
        group.generation += 1
        topics = sorted({t for m in group.members for t in m.topics if t in self.topics})
        tasks = max((len(self.topics[t]) for t in topics), default=0)
        members = [m.placement.member(m.member_id) for m in group.members]
        leader = group.members[0].placement if group.members else Placement()
        placed = leader.assign(members, tasks)
        for member in group.members:
            share = placed[member.member_id]
            targets = {TP(t, p) for t in member.topics if t in self.topics
                       for p in share.active if p < len(self.topics[t])}
            member.target(group.generation, targets, share)
        self.notify()
