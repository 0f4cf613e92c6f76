"""StreamsGroupDescribe (API key 89) v1 of the streams rebalance protocol (KIP-1071), for tests and tools: a
group's members, their current and target assignments, its topology. Built like kafka_streams_group.py (whose
schema pieces and records it shares), fields exactly as Kafka 4.4's
StreamsGroupDescribe{Request,Response}.json. Part of the Kafka transport (with kafka.py, the only modules that
import aiokafka).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Boolean, CompactArray, Int8, Int16, Int32, Schema

from engine.transport.kafka_protocol import TAGS, TEXT
from engine.transport.kafka_streams_group import (
    ENDPOINT,
    KEY_VALUES,
    TASK_IDS,
    TASK_OFFSETS,
    TOPIC_INFOS,
    Endpoint,
    NullableStruct,
    TaskOffset,
    Tasks,
    TopicInfo,
    tasks_of,
)

_TOPOLOGY_NODE = (("name", TEXT), ("node_type", Int8), ("source_topics", CompactArray(TEXT)),
                  ("sink_topic", TEXT), ("stores", CompactArray(TEXT)), ("successors", CompactArray(TEXT)),
                  TAGS)
_ASSIGNMENT = (("active_tasks", TASK_IDS), ("standby_tasks", TASK_IDS), ("warmup_tasks", TASK_IDS), TAGS)


class StreamsGroupDescribeResponse_v1(Response):  # type: ignore[misc]  # aiokafka's classes are untyped
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
            ("topology", NullableStruct(
                ("epoch", Int32),
                ("subtopologies", CompactArray(
                    ("subtopology_id", TEXT),
                    ("source_topics", CompactArray(TEXT)),
                    ("repartition_sink_topics", CompactArray(TEXT)),
                    ("state_changelog_topics", TOPIC_INFOS),
                    ("repartition_source_topics", TOPIC_INFOS),
                    TAGS)),
                TAGS)),
            ("members", CompactArray(
                ("member_id", TEXT),
                ("member_epoch", Int32),
                ("instance_id", TEXT),
                ("rack_id", TEXT),
                ("client_id", TEXT),
                ("client_host", TEXT),
                ("topology_epoch", Int32),
                ("process_id", TEXT),
                ("user_endpoint", NullableStruct(*ENDPOINT)),
                ("client_tags", KEY_VALUES),
                ("task_offsets", TASK_OFFSETS),
                ("task_end_offsets", TASK_OFFSETS),
                ("assignment", Schema(*_ASSIGNMENT)),
                ("target_assignment", Schema(*_ASSIGNMENT)),
                ("is_classic", Boolean),
                TAGS)),
            ("authorized_operations", Int32),
            ("topology_description", NullableStruct(
                ("subtopologies", CompactArray(
                    ("subtopology_id", TEXT), ("nodes", CompactArray(*_TOPOLOGY_NODE)), TAGS)),
                ("global_stores", CompactArray(
                    ("source", Schema(*_TOPOLOGY_NODE)), ("processor", Schema(*_TOPOLOGY_NODE)), TAGS)),
                TAGS)),
            ("topology_description_status", Int8),
            ("assignor_name", TEXT),
            TAGS)),
        TAGS,
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
        TAGS,
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
    return Assignment(tasks_of(active) or {}, tasks_of(standby) or {}, tasks_of(warmup) or {})


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
