"""A streams group's member commits a transaction's offsets as the member (engine.transport.kafka_txn_offsets)
and sets the group's own configs (engine.transport.kafka_group_configs), on the real broker: a transaction
committed with the member's epoch holds its outputs and its offsets; one the group refuses (an epoch it never
gave, an old epoch for a task that moved, a member it fenced) is aborted, and none of its outputs or offsets
is ever read, not even with the producer's next transaction."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.structs import TopicPartition

from engine.errors import ConfigError, MembershipLost
from engine.transport.aiokafka_private import network_client
from engine.transport.kafka_group_configs import group_configs, set_group_configs
from engine.transport.kafka_streams_describe import StreamsGroupDescribeRequest, described_groups
from engine.transport.kafka_txn_offsets import send_offsets_as_member
from tests.contract.streams_group_helpers import (
    PARTITIONS,
    TIMEOUT,
    Member,
    app_topology,
    every_task,
    find_coordinator,
    flat,
)
from tests.kafka.broker import KafkaCluster

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaCluster]:
    """A broker of this module's own, as tests/contract/test_streams_group.py has (the same reason)."""
    with KafkaCluster(1) as cluster:
        yield cluster


class App:
    """A streams group's clients: an admin, a network client for the members' own requests, a source topic
    of PARTITIONS partitions the group reads and a one-partition output topic its transactions write."""

    def __init__(self, kafka: KafkaCluster) -> None:
        tag = uuid.uuid4().hex[:8]
        self.kafka = kafka
        self.group, self.source, self.output = f"txn-{tag}", f"clicks-{tag}", f"out-{tag}"
        self.admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        self.client = AIOKafkaClient(bootstrap_servers=kafka.bootstrap)
        self.coordinator = -1

    async def start(self) -> None:
        await self.admin.start()
        await self.client.bootstrap()
        await self.admin.create_topics([NewTopic(self.source, PARTITIONS, 1), NewTopic(self.output, 1, 1)])
        self.coordinator = await find_coordinator(self.client, self.group)

    async def close(self) -> None:
        await self.client.close()
        await self.admin.close()

    async def member(self, port: int) -> Member:
        """A member that joined and owns every task it was given (acknowledged)."""
        topology = app_topology(self.group, self.source)
        member = Member(self.client, self.coordinator, self.group, topology, port)
        await member.beat_until(lambda a: bool(flat(member.assigned)))
        member.acknowledge()
        await member.beat_until(lambda a: member.reported == member.owned)
        return member

    async def producer(self, task: int) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(bootstrap_servers=self.kafka.bootstrap, enable_idempotence=True,
                                    transactional_id=f"{self.group}-task-{task}")
        await producer.start()
        return producer

    async def transaction(self, producer: AIOKafkaProducer, output: bytes, offsets: dict[int, int],
                          member: Member, epoch: int | None = None) -> None:
        """One transaction: `output` written, the source's offsets committed as `member` (at `epoch`)."""
        await producer.begin_transaction()
        await (await producer.send(self.output, output))  # acknowledged: in the transaction on the broker
        positions = {TopicPartition(self.source, p): at for p, at in offsets.items()}
        try:
            await send_offsets_as_member(producer, positions, self.group, member.member_id,
                                         member.epoch if epoch is None else epoch)
        except BaseException:
            await producer.abort_transaction()
            raise
        await producer.commit_transaction()

    async def committed(self, expected: dict[int, int]) -> dict[int, int]:
        """The group's committed offsets of the source, once they are `expected` (a committed transaction's
        offsets become the group's when the transaction coordinator has written its marker, after the
        commit returned); what they are after TIMEOUT seconds otherwise."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while True:
            offsets = await self.admin.list_consumer_group_offsets(self.group)
            found = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == self.source}
            if found == expected or loop.time() > deadline:
                return found
            await asyncio.sleep(0.1)

    async def outputs(self) -> list[bytes]:
        """Every committed record of the output topic, in order (read_committed, to its end)."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.kafka.bootstrap, isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(self.output, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            read: list[bytes] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TIMEOUT
            while await consumer.position(tp) < end:
                assert loop.time() < deadline, f"the output was not read to its end {end}"
                batches = await consumer.getmany(tp, timeout_ms=500)
                read += [record.value for record in batches.get(tp, []) if record.value is not None]
            return read
        finally:
            await consumer.stop()


@pytest.fixture
async def app(kafka: KafkaCluster) -> AsyncIterator[App]:
    app = App(kafka)
    await app.start()
    try:
        yield app
    finally:
        await app.close()


async def test_a_member_commits_its_transactions_offsets_with_its_epoch_and_never_with_another(app):
    first = await app.member(port=8001)
    assert flat(first.owned) == every_task()
    producer = await app.producer(task=0)
    try:
        await app.transaction(producer, b"as the member", {0: 7, 1: 3}, first)
        assert await app.committed({0: 7, 1: 3}) == {0: 7, 1: 3}

        # An epoch the group never gave this member: refused (ILLEGAL_GENERATION, the v4 answer to a stale
        # epoch), the transaction aborted; the producer's next transaction commits, without it.
        with pytest.raises(MembershipLost, match="ILLEGAL_GENERATION"):
            await app.transaction(producer, b"epoch ahead", {0: 100, 2: 100}, first, epoch=first.epoch + 1)
        await app.transaction(producer, b"as the member again", {0: 8}, first)
        assert await app.committed({0: 8, 1: 3}) == {0: 8, 1: 3}
        assert await app.outputs() == [b"as the member", b"as the member again"]

        # A second member joins: the first gives some tasks up and its epoch moves on. With its old epoch
        # it may still commit a task it kept (assigned before that epoch), never one that moved.
        old_epoch = first.epoch
        second = Member(app.client, app.coordinator, app.group, first.topology, port=8002)
        await second.beat()
        await first.beat_until(lambda a: flat(first.assigned) != every_task())
        first.acknowledge()
        await first.beat_until(lambda a: first.reported == first.owned and first.epoch > old_epoch)
        await second.beat_until(lambda a: bool(flat(second.assigned)))
        kept = sorted(p for s, p in flat(first.owned) if s == "0")
        moved = sorted(p for s, p in every_task() - flat(first.owned) if s == "0")
        assert kept, f"the first member kept no source task (moved {moved})"
        assert moved, f"the first member moved no source task (kept {kept})"
        await app.transaction(producer, b"kept, old epoch", {kept[0]: 20}, first, epoch=old_epoch)
        expected = {0: 8, 1: 3, kept[0]: 20}
        assert await app.committed(expected) == expected
        with pytest.raises(MembershipLost, match="ILLEGAL_GENERATION"):
            await app.transaction(producer, b"moved, old epoch", {moved[0]: 30}, first, epoch=old_epoch)
        await app.transaction(producer, b"kept, new epoch", {kept[0]: 21}, first)
        expected = {0: 8, 1: 3, kept[0]: 21}
        assert await app.committed(expected) == expected
        assert await app.outputs() == [b"as the member", b"as the member again", b"kept, old epoch",
                                       b"kept, new epoch"]
        for member in (first, second):
            await member.beat(leave=True)
    finally:
        await producer.stop()


async def test_a_member_the_group_fenced_cannot_commit_its_transaction(app):
    """The group's own session timeout (a group config) as short as the broker allows: a member that stops
    beating is fenced, and its transaction's offsets are refused (UNKNOWN_MEMBER_ID)."""
    await set_group_configs(network_client(app.admin), app.group, {"streams.session.timeout.ms": "1000",
                                                    "streams.heartbeat.interval.ms": "100"})
    member = await app.member(port=8001)
    producer = await app.producer(task=0)
    try:
        await app.transaction(producer, b"before", {0: 5}, member)
        assert await app.committed({0: 5}) == {0: 5}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while await members(app):  # no heartbeat from here on: the coordinator removes the member
            assert loop.time() < deadline, "the member was never fenced"
            await asyncio.sleep(0.2)
        with pytest.raises(MembershipLost, match="UNKNOWN_MEMBER_ID"):
            await app.transaction(producer, b"after", {0: 50}, member)
        # An admin's commit (no member: the group is empty now) is taken, the refused one never shows
        await app.transaction(producer, b"as the admin", {1: 6}, Member(
            app.client, app.coordinator, app.group, member.topology, 0, member_id="", epoch=-1))
        assert await app.committed({0: 5, 1: 6}) == {0: 5, 1: 6}
        assert await app.outputs() == [b"before", b"as the admin"]
    finally:
        await producer.stop()


async def members(app: App) -> list[str]:
    response = await app.client.send(app.coordinator, StreamsGroupDescribeRequest([app.group]))
    (group,) = described_groups(response)
    assert group.error_code == 0, group.error_message
    return [m.member_id for m in group.members]


async def standby_config_reads(app: App, value: str) -> None:
    """Wait until the group's standby config reads `value`: a change reaches the broker through its
    controller, and a new broker's first one was seen read back a moment later."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    name = "streams.num.standby.replicas"
    while (await group_configs(network_client(app.admin), app.group, [name])) != {name: value}:
        assert loop.time() < deadline, f"the group's {name} never read {value}"
        await asyncio.sleep(0.1)


async def test_a_groups_standby_replicas_are_set_described_back_and_refused_past_the_brokers_maximum(app):
    await set_group_configs(network_client(app.admin), app.group, {"streams.num.standby.replicas": "1"})
    await standby_config_reads(app, "1")
    # The broker's group.streams.max.standby.replicas is 2 by default.
    with pytest.raises(ConfigError, match=r"streams\.num\.standby\.replicas=3 of group .* error 40"):
        await set_group_configs(network_client(app.admin), app.group, {"streams.num.standby.replicas": "3"})
    with pytest.raises(ConfigError, match=r"streams\.no\.such\.config"):
        await set_group_configs(network_client(app.admin), app.group, {"streams.no.such.config": "1"})
    assert (await group_configs(network_client(app.admin), app.group))["streams.num.standby.replicas"] == "1"

    # The group's coordinator assigns by it: with two members (two processes), each holds a standby of
    # every task the other runs.
    first = await app.member(port=8001)
    second = Member(app.client, app.coordinator, app.group, first.topology, port=8002)
    await second.beat()
    standbys: dict[str, set[tuple[str, int]]] = {}

    async def settle(member: Member) -> None:
        answer = await member.beat()
        if answer.standby_tasks is not None:
            standbys[member.member_id] = flat(answer.standby_tasks)
        if member.assigned != member.owned:
            member.acknowledge()

    def settled() -> bool:
        actives = [flat(m.owned) for m in (first, second)]
        return (all(actives) and actives[0] | actives[1] == every_task()
                and all(m.reported == m.owned for m in (first, second))
                and [standbys.get(m.member_id) for m in (first, second)] == [actives[1], actives[0]])

    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not settled():
        assert loop.time() < deadline, f"no standbys of the other's tasks: {standbys}"
        await settle(first)
        await settle(second)
        await asyncio.sleep(0.1)
    for member in (first, second):
        await member.beat(leave=True)
    await set_group_configs(network_client(app.admin), app.group, {"streams.num.standby.replicas": None})
    await standby_config_reads(app, "0")  # (the broker's default again)
