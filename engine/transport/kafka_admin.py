"""The Kafka transport's admin: topics created and described, committed offsets read, records deleted,
groups described (both protocols) and their offsets reset.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import CoordinationType
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
)
from aiokafka.errors import (
    IncompatibleBrokerVersion,
    KafkaError,
    TopicAuthorizationFailedError,
)

from engine.assignor import (
    decode_assignment,
    decode_member,
)
from engine.errors import (
    TransportError,
)
from engine.events import TP
from engine.transport import aiokafka_private as private
from engine.transport.kafka_connect import not_authorized, start_client, stop_quietly, unavailable
from engine.transport.kafka_protocol import BROKER_DEFAULT, CreateTopicsRequest, TopicIdsRequest, topic_ids
from engine.transport.kafka_streams_describe import StreamsGroupDescribeRequest, described_groups
from engine.transport.kafka_streams_errors import GROUP_ID_NOT_FOUND
from engine.transport.kafka_streams_tasks import streams_group_description

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from engine.transport.base import TopicSpec
from engine.transport.base import GroupDescription, GroupMember

log = logging.getLogger(__name__)


TOPIC_ALREADY_EXISTS = 36


CREATE_TIMEOUT_MS = 30_000


ADMIN_RETRY = 20.0  # seconds a retriable admin failure (a broker restarting) is retried


COMMITTED_WAIT = 30.0  # seconds an admin waits for a group's coordinator to answer OffsetFetch


class KafkaAdmin:
    def __init__(self, servers: str, options: Mapping[str, Any]) -> None:
        self._servers = servers
        self._options = dict(options)
        self._client = AIOKafkaAdminClient(bootstrap_servers=servers, **options)
        private.refuse_auto_create(private.network_client(self._client))
        self._started = False

    async def _ensure_started(self) -> None:
        if not self._started:
            await start_client(self._client, self._servers, self._options, stop="close")
            self._started = True

    async def create_topics(self, specs: Collection[TopicSpec]) -> dict[str, int]:
        await self._ensure_started()
        existing = await self.describe_topics()
        new = [
            (s.name, s.partitions, BROKER_DEFAULT if s.replication is None else s.replication, dict(s.config))
            for s in specs if s.name not in existing
        ]
        if not new:
            return existing
        try:
            request = CreateTopicsRequest(new, CREATE_TIMEOUT_MS)
            response = await private.send_to_controller(self._client, request)
        except KafkaError as exc:
            raise TransportError(f"cannot create topics {sorted(t[0] for t in new)}: {exc}") from exc
        for topic, code, *rest in response.topic_errors:
            if code == TopicAuthorizationFailedError.errno:  # not visible to this user, nor creatable
                raise not_authorized(self._servers, self._options, TopicAuthorizationFailedError(topic),
                                      what=f"the topic {topic!r}")
            if code not in (0, TOPIC_ALREADY_EXISTS):
                message = rest[0] if rest else ""
                raise TransportError(f"cannot create topic {topic!r}: error {code} {message}")
        # Created is not yet visible: metadata reaches the brokers asynchronously, each on its own. Return
        # the first description that has every new topic: a later one may come from a broker that has not
        # heard of them yet (a worker once failed to start on a 3-broker cluster that way).
        names = {t[0] for t in new}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not names <= (described := await self.describe_topics()).keys():
            if loop.time() > deadline:
                raise TransportError(f"topics {sorted(names)} were created but are not visible after 30s")
            await asyncio.sleep(0.05)
        return described

    async def describe_topics(self) -> dict[str, int]:
        """Partitions per topic. The admin asks one broker; one that is restarting (not ready, its connection
        refused) is retried a while (ADMIN_RETRY seconds), as a worker starting during a broker's restart
        must not fail for it."""
        await self._ensure_started()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ADMIN_RETRY
        while True:
            try:
                described = await self._client.describe_topics()
                break
            except KafkaError as exc:
                if not exc.retriable or loop.time() > deadline:
                    raise await unavailable(self._servers, self._options, exc) from exc
                log.info("describing topics failed (%s); retrying", exc)
                await asyncio.sleep(0.2)
        return {t["topic"]: len(t["partitions"]) for t in described if not t.get("error_code")}

    async def describe_group(self, group_id: str) -> GroupDescription:
        """A streams group as StreamsGroupDescribe tells it (its members' tasks, endpoints and changelog
        positions), else a classic group as DescribeGroups tells it (the classic request sees a streams
        group as empty, its members not counted: a reset would go on under them)."""
        await self._ensure_started()
        streams = await self._describe_streams_group(group_id)
        if streams is not None:
            return streams
        try:
            responses = await self._client.describe_consumer_groups([group_id])
        except KafkaError as exc:
            raise TransportError(f"cannot describe group {group_id!r}: {exc}") from exc
        group = responses[0].groups[0]
        error, state, members = group[0], group[2], group[5]
        if error:
            raise TransportError(f"cannot describe group {group_id!r}: error {error}")
        described = []
        for member_id, _client_id, host, metadata, assignment in (m[:5] for m in members):
            joined = ConsumerProtocol.METADATA.decode(metadata) if metadata else None
            given = ConsumerProtocol.ASSIGNMENT.decode(assignment) if assignment else None
            active = frozenset(p for _, ps in (given.assignment if given is not None else []) for p in ps)
            member = decode_member(member_id, joined.user_data if joined is not None else None)
            described.append(GroupMember(
                member_id, host, decode_assignment(active, given.user_data if given is not None else None),
                member.positions))
        return GroupDescription(state, described)

    async def _describe_streams_group(self, group_id: str) -> GroupDescription | None:
        """None where the broker has no streams groups, or `group_id` is not one."""
        client = private.network_client(self._client)
        try:
            coordinator = await client.coordinator_lookup(CoordinationType.GROUP, group_id)
            response = await client.send(coordinator, StreamsGroupDescribeRequest([group_id]))
        except IncompatibleBrokerVersion:
            return None
        except KafkaError as exc:
            raise TransportError(f"cannot describe group {group_id!r}: {exc}") from exc
        (group,) = described_groups(response)
        if group.error_code == GROUP_ID_NOT_FOUND:
            return None
        if group.error_code:
            raise TransportError(f"cannot describe group {group_id!r}: error {group.error_code} "
                                 f"({group.error_message})")
        return streams_group_description(group)

    async def committed(self, group_id: str) -> dict[TP, int]:
        """Every offset the group committed, once its coordinator can answer (one loading the group's offsets
        after a broker restarted is asked again, up to COMMITTED_WAIT: not read as "nothing committed")."""
        await self._ensure_started()
        try:
            async with asyncio.timeout(COMMITTED_WAIT):
                coordinator = private.AdminCoordinator(self._client, group_id)
                offsets = await private.committed_offsets(coordinator, None)
        except KafkaError as exc:
            raise TransportError(f"cannot read the offsets of group {group_id!r}: {exc!r}") from exc
        except TimeoutError as exc:
            raise TransportError(f"cannot read the offsets of group {group_id!r}: its coordinator did not "
                                 f"answer within {COMMITTED_WAIT:.0f} s") from exc
        return {TP(topic, partition): offset for (topic, partition), offset in offsets.items()}

    async def topic_configs(self, names: Collection[str]) -> dict[str, dict[str, str]]:
        await self._ensure_started()
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        try:
            responses = await self._client.describe_configs(resources)
        except KafkaError as exc:
            raise TransportError(f"cannot read the configs of topics {sorted(names)}: {exc}") from exc
        configs: dict[str, dict[str, str]] = {}
        for response in responses:
            for code, _message, _type, name, entries in response.resources:
                if code == 0:
                    configs[name] = {entry[0]: entry[1] for entry in entries}
        return configs

    async def topic_ids(self, names: Collection[str]) -> dict[str, bytes]:
        await self._ensure_started()
        client = private.network_client(self._client)  # sends a request of our own
        try:
            response = await client.send(client.get_random_node(), TopicIdsRequest(sorted(names)))
        except KafkaError as exc:
            log.warning("cannot read topic ids (%s); changelog identities are not checked", exc)
            return {}
        return topic_ids(response)

    async def delete_topics(self, names: Collection[str]) -> None:
        await self._ensure_started()
        try:
            await self._client.delete_topics(sorted(names))
        except KafkaError as exc:
            raise TransportError(f"cannot delete topics {sorted(names)}: {exc}") from exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while set(names) & (await self.describe_topics()).keys():
            if loop.time() > deadline:
                raise TransportError(f"topics {sorted(names)} were deleted but are still listed after 30s")
            await asyncio.sleep(0.1)

    async def set_committed(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        """Through a consumer of the group outside any generation: the broker takes such a commit while the
        group has no members (aiokafka's admin has no AlterConsumerGroupOffsets)."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self._servers, group_id=group_id,
                                    enable_auto_commit=False, **self._options)
        private.refuse_auto_create(private.consumer_client(consumer))
        await start_client(consumer, self._servers, self._options)
        try:
            consumer.assign([TopicPartition(*tp) for tp in offsets])
            await consumer.commit({TopicPartition(*tp): offset for tp, offset in offsets.items()})
        except KafkaError as exc:
            raise TransportError(f"cannot commit offsets of group {group_id!r}: {exc}") from exc
        finally:
            await stop_quietly(consumer, "consumer")

    async def delete_records(self, before: Mapping[TP, int]) -> None:
        await self._ensure_started()
        try:
            await self._client.delete_records(
                {TopicPartition(*tp): RecordsToDelete(before_offset=offset) for tp, offset in before.items()})
        except KafkaError as exc:
            raise TransportError(f"cannot delete records of {len(before)} partitions: {exc}") from exc

    async def close(self) -> None:
        if self._started:
            await self._client.close()
            self._started = False
