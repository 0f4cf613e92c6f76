"""The streams rebalance protocol's requests (KIP-1071), built on aiokafka's protocol classes as
kafka_protocol.py builds its own. Part of the Kafka transport (with kafka.py, the only modules that import
aiokafka).

In a streams group the broker's group coordinator, not a member, computes the assignment: each member declares
the application's topology (subtopologies with their source, changelog and repartition topics) when it joins,
the coordinator creates the internal topics, and every heartbeat answers with the member's tasks, a task being
one partition number of one subtopology. A member acknowledges an assignment by reporting, on its next
heartbeat, the tasks it then owns; a task moving to another member is first revoked from its owner.

Messages (fields, order and types exactly as Kafka 4.4's JSON schemas, apache/kafka's
clients/src/main/resources/common/message/StreamsGroup{Heartbeat,Describe}{Request,Response}.json; every
version is flexible: compact strings and arrays, a tagged-field section ending each struct):
- StreamsGroupHeartbeat (API key 88) v1, the version that may answer the MISSING_CLIENT_TAGS status.
- StreamsGroupDescribe (API key 89) v1, for tests and tools: members, their assignments, the topology.
- OffsetCommit (API key 8) v9, OffsetCommitRequest.json: a member commits with its member id and member epoch,
  which the coordinator checks against the tasks it assigned (a streams group refuses versions below 9 from
  a member; aiokafka's stop at 3).
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
    TaggedFields,
)

from engine.transport.kafka_protocol import TEXT

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


class _NullableStruct:
    """A struct field that may be null: one signed byte before it, -1 for null, 1 for a struct."""

    def __init__(self, *fields: tuple[str, Any]) -> None:
        self.schema = Schema(*fields)

    def encode(self, value: Sequence[Any] | None) -> bytes:
        return b"\xff" if value is None else b"\x01" + bytes(self.schema.encode(value))

    def decode(self, data: BytesIO) -> tuple[Any, ...] | None:
        return None if Int8.decode(data) < 0 else self.schema.decode(data)

    def repr(self, value: Sequence[Any] | None) -> str:
        return "NULL" if value is None else self.schema.repr(value)


_TAGS = ("tags", TaggedFields)
_KEY_VALUE = CompactArray(("key", TEXT), ("value", TEXT), _TAGS)
_TOPIC_INFO = CompactArray(("name", TEXT), ("partitions", Int32), ("replication_factor", Int16),
                           ("topic_configs", _KEY_VALUE), _TAGS)
_TASK_IDS = CompactArray(("subtopology_id", TEXT), ("partitions", CompactArray(Int32)), _TAGS)
_TASK_OFFSETS = CompactArray(("subtopology_id", TEXT), ("partition", Int32), ("offset", Int64), _TAGS)
_ENDPOINT = (("host", TEXT), ("port", _UInt16), _TAGS)
_TOPIC_PARTITIONS = CompactArray(("topic", TEXT), ("partitions", CompactArray(Int32)), _TAGS)
_TOPOLOGY_NODE = (("name", TEXT), ("node_type", Int8), ("source_topics", CompactArray(TEXT)),
                  ("sink_topic", TEXT), ("stores", CompactArray(TEXT)), ("successors", CompactArray(TEXT)),
                  _TAGS)
_ASSIGNMENT = (("active_tasks", _TASK_IDS), ("standby_tasks", _TASK_IDS), ("warmup_tasks", _TASK_IDS), _TAGS)


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
        ("status", CompactArray(("status_code", Int8), ("status_detail", TEXT), _TAGS)),
        ("active_tasks", _TASK_IDS),
        ("standby_tasks", _TASK_IDS),
        ("warmup_tasks", _TASK_IDS),
        ("topology_description_required", Boolean),
        ("endpoint_information_epoch", Int32),
        ("partitions_by_user_endpoint", CompactArray(
            ("user_endpoint", Schema(*_ENDPOINT)), ("active_partitions", _TOPIC_PARTITIONS),
            ("standby_partitions", _TOPIC_PARTITIONS), _TAGS)),
        _TAGS,
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
        ("topology", _NullableStruct(
            ("epoch", Int32),
            ("subtopologies", CompactArray(
                ("subtopology_id", TEXT),
                ("source_topics", CompactArray(TEXT)),
                ("source_topic_regex", CompactArray(TEXT)),
                ("state_changelog_topics", _TOPIC_INFO),
                ("repartition_sink_topics", CompactArray(TEXT)),
                ("repartition_source_topics", _TOPIC_INFO),
                ("copartition_groups", CompactArray(
                    ("source_topics", CompactArray(Int16)),
                    ("source_topic_regex", CompactArray(Int16)),
                    ("repartition_source_topics", CompactArray(Int16)),
                    _TAGS)),
                _TAGS)),
            _TAGS)),
        ("active_tasks", _TASK_IDS),
        ("standby_tasks", _TASK_IDS),
        ("warmup_tasks", _TASK_IDS),
        ("process_id", TEXT),
        ("user_endpoint", _NullableStruct(*_ENDPOINT)),
        ("client_tags", _KEY_VALUE),
        ("task_offsets", _TASK_OFFSETS),
        ("task_end_offsets", _TASK_OFFSETS),
        ("shutdown_application", Boolean),
        _TAGS,
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


def _tasks(decoded: list[tuple[Any, ...]] | None) -> Tasks | None:
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
        active_tasks=_tasks(response.active_tasks),
        standby_tasks=_tasks(response.standby_tasks),
        warmup_tasks=_tasks(response.warmup_tasks),
        topology_description_required=response.topology_description_required,
        endpoint_information_epoch=response.endpoint_information_epoch,
        partitions_by_user_endpoint=None if endpoints is None else tuple(
            EndpointPartitions(Endpoint(host, port), _tasks(active) or {}, _tasks(standby) or {})
            for (host, port, _), active, standby, _ in endpoints),
    )


# --- StreamsGroupDescribe -----------------------------------------------------------------------------------

class StreamsGroupDescribeResponse_v1(Response):  # type: ignore[misc]  # (as above)
    API_KEY = 89
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("groups", CompactArray(
            ("error_code", Int16),
            ("error_message", TEXT),
            ("group_id", TEXT),
            ("group_state", TEXT),
            ("group_epoch", Int32),
            ("assignment_epoch", Int32),
            ("topology", _NullableStruct(
                ("epoch", Int32),
                ("subtopologies", CompactArray(
                    ("subtopology_id", TEXT),
                    ("source_topics", CompactArray(TEXT)),
                    ("repartition_sink_topics", CompactArray(TEXT)),
                    ("state_changelog_topics", _TOPIC_INFO),
                    ("repartition_source_topics", _TOPIC_INFO),
                    _TAGS)),
                _TAGS)),
            ("members", CompactArray(
                ("member_id", TEXT),
                ("member_epoch", Int32),
                ("instance_id", TEXT),
                ("rack_id", TEXT),
                ("client_id", TEXT),
                ("client_host", TEXT),
                ("topology_epoch", Int32),
                ("process_id", TEXT),
                ("user_endpoint", _NullableStruct(*_ENDPOINT)),
                ("client_tags", _KEY_VALUE),
                ("task_offsets", _TASK_OFFSETS),
                ("task_end_offsets", _TASK_OFFSETS),
                ("assignment", Schema(*_ASSIGNMENT)),
                ("target_assignment", Schema(*_ASSIGNMENT)),
                ("is_classic", Boolean),
                _TAGS)),
            ("authorized_operations", Int32),
            ("topology_description", _NullableStruct(
                ("subtopologies", CompactArray(
                    ("subtopology_id", TEXT), ("nodes", CompactArray(*_TOPOLOGY_NODE)), _TAGS)),
                ("global_stores", CompactArray(
                    ("source", Schema(*_TOPOLOGY_NODE)), ("processor", Schema(*_TOPOLOGY_NODE)), _TAGS)),
                _TAGS)),
            ("topology_description_status", Int8),
            ("assignor_name", TEXT),
            _TAGS)),
        _TAGS,
    )


class StreamsGroupDescribeRequest_v1(RequestStruct):  # type: ignore[misc]  # (as above)
    FLEXIBLE_VERSION = True
    API_KEY = 89
    API_VERSION = 1
    RESPONSE_TYPE = StreamsGroupDescribeResponse_v1
    SCHEMA = Schema(
        ("group_ids", CompactArray(TEXT)),
        ("include_authorized_operations", Boolean),
        ("include_topology_description", Boolean),
        _TAGS,
    )


class StreamsGroupDescribeRequest(Request[StreamsGroupDescribeRequest_v1]):  # type: ignore[misc]  # (as above)
    API_KEY = 89

    def __init__(self, group_ids: list[str]) -> None:
        self._group_ids = group_ids

    def build(
        self, request_struct_class: type[StreamsGroupDescribeRequest_v1],
    ) -> StreamsGroupDescribeRequest_v1:
        return request_struct_class(self._group_ids, False, False, {})


@dataclass(frozen=True, slots=True)
class Assignment:
    active: Tasks
    standby: Tasks
    warmup: Tasks


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    topology_epoch: int
    process_id: str
    user_endpoint: Endpoint | None
    client_tags: dict[str, str]
    task_offsets: tuple[TaskOffset, ...]
    task_end_offsets: tuple[TaskOffset, ...]
    assignment: Assignment
    target_assignment: Assignment
    is_classic: bool


@dataclass(frozen=True, slots=True)
class DescribedSubtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...]
    state_changelog_topics: tuple[TopicInfo, ...]
    repartition_source_topics: tuple[TopicInfo, ...]


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: int
    error_message: str | None
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    topology_epoch: int | None
    subtopologies: tuple[DescribedSubtopology, ...] | None  # None: not configured (e.g. topics missing)
    members: tuple[DescribedMember, ...]
    assignor_name: str | None


def _assignment(decoded: tuple[Any, ...]) -> Assignment:
    active, standby, warmup, _ = decoded
    return Assignment(_tasks(active) or {}, _tasks(standby) or {}, _tasks(warmup) or {})


def _described_topic_infos(decoded: list[tuple[Any, ...]]) -> tuple[TopicInfo, ...]:
    return tuple(TopicInfo(name, partitions, replication, {k: v for k, v, _ in configs or ()})
                 for name, partitions, replication, configs, _ in decoded)


def _described_offsets(decoded: list[tuple[Any, ...]] | None) -> tuple[TaskOffset, ...]:
    return tuple(TaskOffset(subtopology, partition, offset)
                 for subtopology, partition, offset, _ in decoded or ())


def _described_member(m: tuple[Any, ...]) -> DescribedMember:
    (member_id, epoch, instance_id, rack_id, client_id, client_host, topology_epoch, process_id, endpoint,
     client_tags, task_offsets, task_end_offsets, assignment, target, is_classic, _) = m
    return DescribedMember(
        member_id, epoch, instance_id, rack_id, client_id, client_host, topology_epoch, process_id,
        None if endpoint is None else Endpoint(endpoint[0], endpoint[1]),
        {k: v for k, v, _ in client_tags or ()}, _described_offsets(task_offsets),
        _described_offsets(task_end_offsets), _assignment(assignment), _assignment(target), is_classic,
    )


def described_groups(response: StreamsGroupDescribeResponse_v1) -> list[DescribedGroup]:
    found = []
    for (error, message, group_id, state, group_epoch, assignment_epoch, topology, members, _operations,
         _description, _description_status, assignor, _) in response.groups:
        subtopologies = None if topology is None or topology[1] is None else tuple(
            DescribedSubtopology(sid, tuple(sources), tuple(sinks), _described_topic_infos(changelogs),
                                 _described_topic_infos(repartitions))
            for sid, sources, sinks, changelogs, repartitions, _ in topology[1])
        found.append(DescribedGroup(
            error, message, group_id, state, group_epoch, assignment_epoch,
            None if topology is None else topology[0], subtopologies,
            tuple(_described_member(m) for m in members), assignor,
        ))
    return found


# --- OffsetCommit as a member -------------------------------------------------------------------------------

class OffsetCommitResponse_v9(Response):  # type: ignore[misc]  # (as above)
    API_KEY = 8
    API_VERSION = 9
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            ("name", TEXT),
            ("partitions", CompactArray(("partition_index", Int32), ("error_code", Int16), _TAGS)),
            _TAGS)),
        _TAGS,
    )


class OffsetCommitRequest_v9(RequestStruct):  # type: ignore[misc]  # (as above)
    FLEXIBLE_VERSION = True
    API_KEY = 8
    API_VERSION = 9
    RESPONSE_TYPE = OffsetCommitResponse_v9
    SCHEMA = Schema(
        ("group_id", TEXT),
        ("generation_id_or_member_epoch", Int32),
        ("member_id", TEXT),
        ("group_instance_id", TEXT),
        ("topics", CompactArray(
            ("name", TEXT),
            ("partitions", CompactArray(
                ("partition_index", Int32), ("committed_offset", Int64), ("committed_leader_epoch", Int32),
                ("committed_metadata", TEXT), _TAGS)),
            _TAGS)),
        _TAGS,
    )


class MemberOffsetCommitRequest(Request[OffsetCommitRequest_v9]):  # type: ignore[misc]  # (as above)
    API_KEY = 8

    def __init__(self, group_id: str, member_id: str, member_epoch: int,
                 offsets: Mapping[tuple[str, int], int], instance_id: str | None = None) -> None:
        self._group = (group_id, member_epoch, member_id, instance_id)
        self._offsets = offsets  # (topic, partition) -> the offset of the next record to read

    def build(self, request_struct_class: type[OffsetCommitRequest_v9]) -> OffsetCommitRequest_v9:
        topics: dict[str, list[tuple[Any, ...]]] = {}
        for (topic, partition), offset in sorted(self._offsets.items()):
            topics.setdefault(topic, []).append((partition, offset, -1, "", {}))
        return request_struct_class(*self._group, [(t, parts, {}) for t, parts in topics.items()], {})


def commit_errors(response: OffsetCommitResponse_v9) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the error code of its commit, 0 for committed."""
    return {(topic, partition): error for topic, partitions, _ in response.topics
            for partition, error, _ in partitions}
