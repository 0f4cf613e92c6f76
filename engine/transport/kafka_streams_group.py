"""The streams rebalance protocol's requests (KIP-1071), built on aiokafka's protocol classes as
kafka_protocol.py builds its own. Part of the Kafka transport (with kafka.py, the only modules that import
aiokafka).

In a streams group the broker's group coordinator, not a member, computes the assignment: each member declares
the application's topology (subtopologies with their source, changelog and repartition topics) when it joins,
the coordinator creates the internal topics, and every heartbeat answers with the member's tasks, a task being
one partition number of one subtopology. A member acknowledges an assignment by reporting, on its next
heartbeat, the tasks it then owns; a task moving to another member is first revoked from its owner.

StreamsGroupHeartbeat (API key 88) v1, the version that may answer the MISSING_CLIENT_TAGS status: fields,
order and types exactly as Kafka 4.4's JSON schemas (apache/kafka's clients/src/main/resources/common/message/
StreamsGroupHeartbeat{Request,Response}.json); every version is flexible: compact strings and arrays, a
tagged-field section ending each struct. The schema pieces and records here are shared with the describe.
StreamsGroupDescribe is in kafka_streams_describe.py, a member's OffsetCommit in kafka_protocol.py.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
)

from engine.transport.kafka_protocol import TAGS, TEXT

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from io import BytesIO

JOIN_EPOCH = 0  # the member epoch of a member joining (or rejoining after it was fenced)
LEAVE_EPOCH = -1  # leave the group: its tasks go to the others at once
LEAVE_STATIC_EPOCH = -2  # a static member leaving to come back: its tasks wait for it (session timeout)

Tasks = dict[str, list[int]]  # subtopology id -> partition numbers


class StatusCode(enum.IntEnum):
    """The group statuses a heartbeat answer may carry (StreamsGroupHeartbeatResponse.json, Status)."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5
    MISSING_CLIENT_TAGS = 6


class _UInt16:
    _format = struct.Struct(">H")

    @classmethod
    def encode(cls, value: int) -> bytes:
        return cls._format.pack(value)

    @classmethod
    def decode(cls, data: BytesIO) -> int:
        return int(cls._format.unpack(data.read(2))[0])

    @classmethod
    def repr(cls, value: int) -> str:
        return str(value)


class NullableStruct:
    """A struct field that may be null: one signed byte before it, -1 for null, 1 for a struct."""

    def __init__(self, *fields: tuple[str, Any]) -> None:
        self.schema = Schema(*fields)

    def encode(self, value: Sequence[Any] | None) -> bytes:
        return b"\xff" if value is None else b"\x01" + bytes(self.schema.encode(value))

    def decode(self, data: BytesIO) -> tuple[Any, ...] | None:
        return None if Int8.decode(data) < 0 else self.schema.decode(data)

    def repr(self, value: Sequence[Any] | None) -> str:
        return "NULL" if value is None else self.schema.repr(value)


KEY_VALUES = CompactArray(("key", TEXT), ("value", TEXT), TAGS)
TOPIC_INFOS = CompactArray(("name", TEXT), ("partitions", Int32), ("replication_factor", Int16),
                           ("topic_configs", KEY_VALUES), TAGS)
TASK_IDS = CompactArray(("subtopology_id", TEXT), ("partitions", CompactArray(Int32)), TAGS)
TASK_OFFSETS = CompactArray(("subtopology_id", TEXT), ("partition", Int32), ("offset", Int64), TAGS)
ENDPOINT = (("host", TEXT), ("port", _UInt16), TAGS)
_TOPIC_PARTITIONS = CompactArray(("topic", TEXT), ("partitions", CompactArray(Int32)), TAGS)


# --- the topology a member declares -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopicInfo:
    """An internal topic: 0 partitions for "as many as the subtopology's source topics" (always 0 for a
    changelog), replication factor 0 for the broker's default."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Source topics that must have as many partitions: indexes into the subtopology's source topics, source
    regexes and repartition source topics."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class TaskOffset:
    subtopology_id: str
    partition: int
    offset: int


@dataclass(slots=True)
class Heartbeat:
    """One StreamsGroupHeartbeat. `None` means "unchanged since my last heartbeat" for every field that allows
    it; the topology goes only with `member_epoch == JOIN_EPOCH`."""

    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    active_tasks: Mapping[str, Iterable[int]] | None = None
    standby_tasks: Mapping[str, Iterable[int]] | None = None
    warmup_tasks: Mapping[str, Iterable[int]] | None = None
    process_id: str | None = None
    user_endpoint: Endpoint | None = None
    client_tags: Mapping[str, str] | None = None
    task_offsets: Sequence[TaskOffset] | None = None
    task_end_offsets: Sequence[TaskOffset] | None = None
    shutdown_application: bool = False


def _key_values(pairs: Mapping[str, str] | None) -> list[tuple[str, str, dict[int, bytes]]] | None:
    return None if pairs is None else [(key, value, {}) for key, value in sorted(pairs.items())]


def _topic_infos(topics: Iterable[TopicInfo]) -> list[tuple[Any, ...]]:
    return [(t.name, t.partitions, t.replication_factor, _key_values(t.configs), {}) for t in topics]


def _task_ids(tasks: Mapping[str, Iterable[int]] | None) -> list[tuple[Any, ...]] | None:
    if tasks is None:
        return None
    return [(subtopology, sorted(partitions), {}) for subtopology, partitions in sorted(tasks.items())]


def _task_offsets(offsets: Sequence[TaskOffset] | None) -> list[tuple[Any, ...]] | None:
    return None if offsets is None else [(o.subtopology_id, o.partition, o.offset, {}) for o in offsets]


def _subtopology(s: Subtopology) -> tuple[Any, ...]:
    groups: list[tuple[Any, ...]] = [
        (list(g.source_topics), list(g.source_topic_regex), list(g.repartition_source_topics), {})
        for g in s.copartition_groups]
    return (s.subtopology_id, list(s.source_topics), list(s.source_topic_regex),
            _topic_infos(s.state_changelog_topics), list(s.repartition_sink_topics),
            _topic_infos(s.repartition_source_topics), groups, {})


# --- StreamsGroupHeartbeat ----------------------------------------------------------------------------------

class StreamsGroupHeartbeatResponse_v1(Response):  # type: ignore[misc]  # aiokafka's classes are untyped
    API_KEY = 88
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("error_message", TEXT),
        ("member_id", TEXT),
        ("member_epoch", Int32),
        ("heartbeat_interval_ms", Int32),
        ("task_offset_interval_ms", Int32),
        ("acceptable_recovery_lag", Int64),
        ("status", CompactArray(("status_code", Int8), ("status_detail", TEXT), TAGS)),
        ("active_tasks", TASK_IDS),
        ("standby_tasks", TASK_IDS),
        ("warmup_tasks", TASK_IDS),
        ("topology_description_required", Boolean),
        ("endpoint_information_epoch", Int32),
        ("partitions_by_user_endpoint", CompactArray(
            ("user_endpoint", Schema(*ENDPOINT)), ("active_partitions", _TOPIC_PARTITIONS),
            ("standby_partitions", _TOPIC_PARTITIONS), TAGS)),
        TAGS,
    )


class StreamsGroupHeartbeatRequest_v1(RequestStruct):  # type: ignore[misc]  # (as above)
    FLEXIBLE_VERSION = True
    API_KEY = 88
    API_VERSION = 1
    RESPONSE_TYPE = StreamsGroupHeartbeatResponse_v1
    SCHEMA = Schema(
        ("group_id", TEXT),
        ("member_id", TEXT),
        ("member_epoch", Int32),
        ("endpoint_information_epoch", Int32),
        ("instance_id", TEXT),
        ("rack_id", TEXT),
        ("rebalance_timeout_ms", Int32),
        ("topology", NullableStruct(
            ("epoch", Int32),
            ("subtopologies", CompactArray(
                ("subtopology_id", TEXT),
                ("source_topics", CompactArray(TEXT)),
                ("source_topic_regex", CompactArray(TEXT)),
                ("state_changelog_topics", TOPIC_INFOS),
                ("repartition_sink_topics", CompactArray(TEXT)),
                ("repartition_source_topics", TOPIC_INFOS),
                ("copartition_groups", CompactArray(
                    ("source_topics", CompactArray(Int16)),
                    ("source_topic_regex", CompactArray(Int16)),
                    ("repartition_source_topics", CompactArray(Int16)),
                    TAGS)),
                TAGS)),
            TAGS)),
        ("active_tasks", TASK_IDS),
        ("standby_tasks", TASK_IDS),
        ("warmup_tasks", TASK_IDS),
        ("process_id", TEXT),
        ("user_endpoint", NullableStruct(*ENDPOINT)),
        ("client_tags", KEY_VALUES),
        ("task_offsets", TASK_OFFSETS),
        ("task_end_offsets", TASK_OFFSETS),
        ("shutdown_application", Boolean),
        TAGS,
    )


class StreamsGroupHeartbeatRequest(Request[StreamsGroupHeartbeatRequest_v1]):  # type: ignore[misc]  # (as above)
    API_KEY = 88

    def __init__(self, heartbeat: Heartbeat) -> None:
        self._heartbeat = heartbeat

    def build(
        self, request_struct_class: type[StreamsGroupHeartbeatRequest_v1],
    ) -> StreamsGroupHeartbeatRequest_v1:
        h = self._heartbeat
        topology: tuple[Any, ...] | None = None if h.topology is None else (
            h.topology.epoch, [_subtopology(s) for s in h.topology.subtopologies], {})
        endpoint: tuple[Any, ...] | None = (
            None if h.user_endpoint is None else (h.user_endpoint.host, h.user_endpoint.port, {}))
        return request_struct_class(
            h.group_id, h.member_id, h.member_epoch, h.endpoint_information_epoch, h.instance_id, h.rack_id,
            h.rebalance_timeout_ms, topology, _task_ids(h.active_tasks), _task_ids(h.standby_tasks),
            _task_ids(h.warmup_tasks), h.process_id, endpoint, _key_values(h.client_tags),
            _task_offsets(h.task_offsets), _task_offsets(h.task_end_offsets), h.shutdown_application, {},
        )


@dataclass(frozen=True, slots=True)
class Status:
    code: int  # a StatusCode, or one this module does not know yet
    detail: str


@dataclass(frozen=True, slots=True)
class EndpointPartitions:
    """Where one member's partitions are, for interactive queries: topic -> partition numbers."""

    endpoint: Endpoint
    active: dict[str, list[int]]
    standby: dict[str, list[int]]  # standby and warm-up tasks


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """A StreamsGroupHeartbeat response. Task fields are `None` when unchanged since the last answer."""

    error_code: int
    error_message: str | None
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    task_offset_interval_ms: int
    acceptable_recovery_lag: int  # -1: the broker does not say
    statuses: tuple[Status, ...]
    active_tasks: Tasks | None
    standby_tasks: Tasks | None
    warmup_tasks: Tasks | None
    topology_description_required: bool
    endpoint_information_epoch: int
    partitions_by_user_endpoint: tuple[EndpointPartitions, ...] | None


def tasks_of(decoded: list[tuple[Any, ...]] | None) -> Tasks | None:
    return None if decoded is None else {subtopology: list(parts) for subtopology, parts, _ in decoded}


def heartbeat_answer(response: StreamsGroupHeartbeatResponse_v1) -> HeartbeatAnswer:
    endpoints = response.partitions_by_user_endpoint
    return HeartbeatAnswer(
        error_code=response.error_code,
        error_message=response.error_message,
        member_id=response.member_id,
        member_epoch=response.member_epoch,
        heartbeat_interval_ms=response.heartbeat_interval_ms,
        task_offset_interval_ms=response.task_offset_interval_ms,
        acceptable_recovery_lag=response.acceptable_recovery_lag,
        statuses=tuple(Status(code, detail) for code, detail, _ in response.status or ()),
        active_tasks=tasks_of(response.active_tasks),
        standby_tasks=tasks_of(response.standby_tasks),
        warmup_tasks=tasks_of(response.warmup_tasks),
        topology_description_required=response.topology_description_required,
        endpoint_information_epoch=response.endpoint_information_epoch,
        partitions_by_user_endpoint=None if endpoints is None else tuple(
            EndpointPartitions(Endpoint(host, port), tasks_of(active) or {}, tasks_of(standby) or {})
            for (host, port, _), active, standby, _ in endpoints),
    )
