"""The streams rebalance protocol (KIP-1071) as the real broker speaks it, through the messages of
engine.transport.kafka_streams_group: a member declares a topology shaped like an engine app's, the broker
creates its internal topics and assigns every task, a second member makes the first give up only some tasks,
and both StreamsGroupDescribe and Kafka's own kafka-streams-groups.sh see the two members and their tasks."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import InconsistentGroupProtocolError

from engine.transport import open_transport
from engine.transport.kafka_streams_describe import (
    StreamsGroupDescribeRequest,
    described_groups,
)
from engine.transport.kafka_streams_group import (
    Endpoint,
    HeartbeatAnswer,
    StatusCode,
    Topology,
)
from tests.contract.streams_group_helpers import (
    PARTITIONS,
    TIMEOUT,
    Member,
    app_topology,
    every_task,
    find_coordinator,
    flat,
)
from tests.kafka.broker import KafkaCluster, resolve_jars

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaCluster]:
    """A broker of this module's own: in the whole suite, on the broker every other test shares (hundreds of
    topics made and deleted meanwhile), a streams member's first heartbeat was once answered
    UNKNOWN_SERVER_ERROR; alone, never. Kept apart until engine's member is built on these messages."""
    with KafkaCluster(1) as cluster:
        yield cluster

STALE_MEMBER_EPOCH = 113  # Kafka's error codes (KIP-848)
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69


async def describe(client: AIOKafkaClient, coordinator: int, group: str) -> Any:
    response = await client.send(coordinator, StreamsGroupDescribeRequest([group]))
    (described,) = described_groups(response)
    assert described.error_code == 0, described.error_message
    return described


async def test_the_broker_assigns_the_tasks_of_a_declared_topology_and_moves_only_some_to_a_new_member(kafka):
    app, source = f"streams-{uuid.uuid4().hex[:8]}", f"clicks-{uuid.uuid4().hex[:8]}"
    topology = app_topology(app, source)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    client = AIOKafkaClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    await client.bootstrap()
    try:
        await admin.create_topics([NewTopic(source, PARTITIONS, 1)])
        coordinator = await find_coordinator(client, app)
        first = Member(client, coordinator, app, topology, port=8001)

        # Joining, then beating until every task is assigned: the broker first creates the internal topics
        # (the group reports MISSING_INTERNAL_TOPICS meanwhile).
        seen: set[int] = set()

        def all_assigned(answer: HeartbeatAnswer) -> bool:
            seen.update(status.code for status in answer.statuses)
            return flat(first.assigned) == every_task()

        await first.beat_until(all_assigned)
        assert StatusCode.MISSING_SOURCE_TOPICS not in seen
        first.acknowledge()
        await first.beat_until(lambda a: first.reported == first.owned and not a.statuses)
        assert first.epoch > 0

        # A member commits with its member id and epoch; an epoch ahead of the broker's is refused.
        assert await first.commit({(source, 0): 7}) == {(source, 0): 0}
        ahead = await first.commit({(source, 1): 7}, epoch=first.epoch + 1)
        assert ahead == {(source, 1): STALE_MEMBER_EPOCH}
        committed = await admin.list_consumer_group_offsets(app)
        assert {(tp.topic, tp.partition): meta.offset for tp, meta in committed.items()} == {(source, 0): 7}

        # The internal topics the topology declared exist, partitioned as the source topic.
        internal = {f"{app}-counts-changelog", f"{app}-per-user-changelog", f"{app}-by-user-repartition"}
        described_topics = await admin.describe_topics(sorted(internal))
        assert {t["topic"]: (t["error_code"], len(t["partitions"])) for t in described_topics} == {
            name: (0, PARTITIONS) for name in internal}
        # ... with the configs the topology declared and nothing of the broker's own (cleanup.policy=delete
        # is the broker's default).
        engine_admin = open_transport(kafka.url).admin()
        try:
            configs = await engine_admin.topic_configs(internal)
        finally:
            await engine_admin.close()
        assert configs[f"{app}-counts-changelog"]["cleanup.policy"] == "compact"
        assert configs[f"{app}-per-user-changelog"]["cleanup.policy"] == "delete"
        assert configs[f"{app}-by-user-repartition"]["retention.ms"] == "-1"

        # The endpoint of every member and the source partitions (repartition topics too) of its tasks.
        (endpoint,) = first.endpoints
        assert endpoint.endpoint == Endpoint("127.0.0.1", 8001)
        assert endpoint.active == {source: list(range(PARTITIONS)),
                                   f"{app}-by-user-repartition": list(range(PARTITIONS))}

        # A second member joins: the first is asked to give up some of its tasks and keeps the rest; the
        # second gets a task only once its owner acknowledged giving it up.
        second = Member(client, coordinator, app, topology, port=8002)
        await second.beat()
        await first.beat_until(lambda a: first.assigned is not None and flat(first.assigned) != every_task())
        kept = flat(first.assigned)
        assert kept, "the first member should keep some tasks"
        assert kept < every_task(), f"the first member should give up some tasks, not keep {kept}"
        await second.beat()
        assert not flat(second.assigned), "a task went to the second member before the first gave it up"
        first.acknowledge()
        await first.beat()
        await second.beat_until(lambda a: flat(second.assigned) == every_task() - kept)
        second.acknowledge()
        await second.beat_until(lambda a: second.reported == second.owned)
        await first.beat()
        assert flat(first.assigned) == kept, "the first member's tasks moved again"

        group = await describe(client, coordinator, app)
        assert group.state == "Stable"
        members = {m.member_id: m for m in group.members}
        assert set(members) == {first.member_id, second.member_id}
        for member in (first, second):
            assert flat(members[member.member_id].assignment.active) == flat(member.owned)
            assert flat(members[member.member_id].target_assignment.active) == flat(member.owned)
        assert {s.subtopology_id: (s.source_topics, tuple(t.name for t in s.repartition_source_topics))
                for s in group.subtopologies or ()} == {
            "0": ((source,), ()), "1": ((), (f"{app}-by-user-repartition",))}

        # Kafka's own tool (kafka-streams-groups.sh) lists both members with their tasks, one line each:
        # GROUP TARGET-ASSIGNMENT-EPOCH TOPOLOGY-EPOCH MEMBER ... ASSIGNMENTS ("ACTIVE: 0:[0,1]; 1:[0,1]; ..")
        jars = resolve_jars()
        tool = await asyncio.create_subprocess_exec(
            "java", "-cp", f"{jars}/*", "org.apache.kafka.tools.streams.StreamsGroupCommand",
            "--bootstrap-server", kafka.bootstrap, "--describe", "--group", app, "--members", "--verbose",
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        shown = (await asyncio.wait_for(tool.communicate(), TIMEOUT))[0].decode()
        assert tool.returncode == 0, shown
        lines = {line.split()[3]: line for line in shown.splitlines()[1:] if line.strip()}
        assert set(lines) == {first.member_id, second.member_id}, shown
        for member in (first, second):
            tasks = "; ".join(f"{sid}:[{','.join(map(str, sorted(parts)))}]"
                              for sid, parts in sorted(member.owned.items()) if parts)
            assert f" ACTIVE: {tasks}; TARGET-ACTIVE: {tasks}; " in lines[member.member_id], shown

        for member in (first, second):
            await member.beat(leave=True)
    finally:
        await client.close()
        await admin.close()


async def test_a_group_speaks_one_protocol_at_a_time_and_keeps_the_topology_it_started_with(kafka):
    """What engine's group_protocol = auto must know: a live classic group refuses streams members (and a live
    streams group classic ones), an empty one is taken over; a member may not change a live group's topology,
    and one with an older topology epoch joins but gets no task."""
    group, source = f"shared-{uuid.uuid4().hex[:8]}", f"clicks-{uuid.uuid4().hex[:8]}"
    topology = app_topology(group, source)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    client = AIOKafkaClient(bootstrap_servers=kafka.bootstrap)
    classic = AIOKafkaConsumer(source, bootstrap_servers=kafka.bootstrap, group_id=group)
    await admin.start()
    await client.bootstrap()
    try:
        await admin.create_topics([NewTopic(source, PARTITIONS, 1)])
        await classic.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while not classic.assignment():
            assert loop.time() < deadline, "the classic consumer got no partition"
            await asyncio.sleep(0.1)
        coordinator = await find_coordinator(client, group)
        member = Member(client, coordinator, group, topology, port=8001)
        refused = await member.attempt()
        assert (refused.error_code, refused.error_message) == (
            GROUP_ID_NOT_FOUND, f"Group {group} is not a streams group.")

        await classic.stop()  # the classic group is empty now: the streams member converts it
        await member.beat_until(lambda a: flat(member.assigned) == every_task())
        member.acknowledge()
        await member.beat_until(lambda a: member.reported == member.owned)

        late_classic = AIOKafkaConsumer(source, bootstrap_servers=kafka.bootstrap, group_id=group)
        with pytest.raises(InconsistentGroupProtocolError):
            await late_classic.start()  # (joins the group before it returns)
        await late_classic.stop()

        one_subtopology = topology.subtopologies[:1]
        for changed in (Topology(topology.epoch + 1, one_subtopology),
                        Topology(topology.epoch, one_subtopology)):
            answer = await Member(client, coordinator, group, changed, port=8002).attempt()
            assert (answer.error_code, answer.error_message) == (
                INVALID_REQUEST, "Topology updates are not supported yet."), changed
        behind = Member(client, coordinator, group, Topology(topology.epoch - 1, one_subtopology), port=8003)
        answer = await behind.beat()
        assert StatusCode.STALE_TOPOLOGY in {status.code for status in answer.statuses}
        assert not flat(behind.assigned), "a member with a stale topology got tasks"
        await behind.beat(leave=True)
        await member.beat(leave=True)
    finally:
        await classic.stop()
        await client.close()
        await admin.close()
