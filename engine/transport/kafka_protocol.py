"""Three Kafka requests aiokafka 0.14 cannot make, built on its own protocol classes. Part of the Kafka
transport (with kafka.py, the only modules that import aiokafka).

- Topic ids (Metadata v12; aiokafka's Metadata stops at v5, ids came with v10). A topic id is the identity of
  a topic: deleting and recreating a topic keeps its name and gives it a new id. Stores remember the id of
  the changelog they reflect, so a store is never kept against a changelog that was deleted and recreated
  (once the new log grows past the store's offset, offsets alone cannot tell).
- CreateTopics v4 (aiokafka's stops at v3), which accepts -1 for "the broker's default" replication factor
  (KIP-464): internal topics get the cluster's own default, as Kafka Streams does, instead of 1.
- OffsetCommit v9 (aiokafka's stops at v3) with a member id and member epoch: a member of a streams group
  (kafka_streams_group.py) commits so, the coordinator checking the epoch against the tasks it assigned; it
  refuses a member's commit below v9.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.admin import CreateTopicsRequest_v3, CreateTopicsResponse_v3
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from io import BytesIO

NO_ID = b"\x00" * 16


class _Uuid(AbstractType[bytes]):  # type: ignore[misc]  # aiokafka's protocol classes are untyped
    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        return data.read(16)


TEXT = CompactString("utf-8")
TAGS = ("tags", TaggedFields)  # every flexible version's tagged fields, at the end of each struct


class MetadataResponse_v12(Response):  # type: ignore[misc]  # (as above); aiokafka's version naming
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("brokers", CompactArray(("node_id", Int32), ("host", TEXT), ("port", Int32), ("rack", TEXT),
                                 TAGS)),
        ("cluster_id", TEXT),
        ("controller_id", Int32),
        ("topics", CompactArray(
            ("error_code", Int16), ("name", TEXT), ("topic_id", _Uuid), ("is_internal", Boolean),
            ("partitions", CompactArray(
                ("error_code", Int16), ("partition_index", Int32), ("leader_id", Int32),
                ("leader_epoch", Int32),
                ("replica_nodes", CompactArray(Int32)), ("isr_nodes", CompactArray(Int32)),
                ("offline_replicas", CompactArray(Int32)), TAGS)),
            ("topic_authorized_operations", Int32), TAGS)),
        TAGS,
    )


class MetadataRequest_v12(RequestStruct):  # type: ignore[misc]  # (as above)
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = MetadataResponse_v12
    SCHEMA = Schema(
        ("topics", CompactArray(("topic_id", _Uuid), ("name", TEXT), TAGS)),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        TAGS,
    )


class TopicIdsRequest(Request[MetadataRequest_v12]):  # type: ignore[misc]  # (as above)
    API_KEY = 3

    def __init__(self, topics: list[str]) -> None:
        self._topics = topics

    def build(self, request_struct_class: type[MetadataRequest_v12]) -> MetadataRequest_v12:
        return request_struct_class([(NO_ID, name, {}) for name in self._topics], False, False, {})


def topic_ids(response: Any) -> dict[str, bytes]:
    """name -> id of each topic the response describes without error."""
    described = response.topics
    return {name: topic_id for error, name, topic_id, *_ in described if not error and topic_id != NO_ID}


BROKER_DEFAULT = -1  # replication factor (and partition count): whatever the broker is configured with


class CreateTopicsResponse_v4(CreateTopicsResponse_v3):  # type: ignore[misc]  # (as above)
    API_VERSION = 4


class CreateTopicsRequest_v4(CreateTopicsRequest_v3):  # type: ignore[misc]  # (as above): v3's layout, -1 allowed
    API_VERSION = 4
    RESPONSE_TYPE = CreateTopicsResponse_v4


class CreateTopicsRequest(Request[CreateTopicsRequest_v4]):  # type: ignore[misc]  # (as above)
    API_KEY = 19

    def __init__(self, topics: list[tuple[str, int, int, dict[str, str]]], timeout_ms: int) -> None:
        self._topics = topics  # (name, partitions, replication factor or BROKER_DEFAULT, config)
        self._timeout_ms = timeout_ms

    def build(self, request_struct_class: type[CreateTopicsRequest_v4]) -> CreateTopicsRequest_v4:
        topics: list[tuple[Any, ...]] = [
            (name, partitions, replication, [], list(config.items()))
            for name, partitions, replication, config in self._topics
        ]
        return request_struct_class(topics, self._timeout_ms, False)


# What a member's OffsetCommit (v9) and TxnOffsetCommit (v4, kafka_txn_offsets.py) carry alike: the offsets
# by topic, and the answer's error per partition.
COMMITTED_OFFSETS = CompactArray(
    ("name", TEXT),
    ("partitions", CompactArray(
        ("partition_index", Int32), ("committed_offset", Int64), ("committed_leader_epoch", Int32),
        ("committed_metadata", TEXT), TAGS)),
    TAGS)
COMMIT_ERRORS = CompactArray(
    ("name", TEXT),
    ("partitions", CompactArray(("partition_index", Int32), ("error_code", Int16), TAGS)),
    TAGS)


def committed_offsets(offsets: Mapping[tuple[str, int], int]) -> list[tuple[Any, ...]]:
    """`offsets` ((topic, partition) -> the offset of the next record to read) as COMMITTED_OFFSETS."""
    topics: dict[str, list[tuple[Any, ...]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, []).append((partition, offset, -1, "", {}))
    return [(topic, partitions, {}) for topic, partitions in topics.items()]


class OffsetCommitResponse_v9(Response):  # type: ignore[misc]  # (as above)
    API_KEY = 8
    API_VERSION = 9
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", COMMIT_ERRORS),
        TAGS,
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
        ("topics", COMMITTED_OFFSETS),
        TAGS,
    )


class MemberOffsetCommitRequest(Request[OffsetCommitRequest_v9]):  # type: ignore[misc]  # (as above)
    API_KEY = 8

    def __init__(self, group_id: str, member_id: str, member_epoch: int,
                 offsets: Mapping[tuple[str, int], int], instance_id: str | None = None) -> None:
        self._group = (group_id, member_epoch, member_id, instance_id)
        self._offsets = offsets  # (topic, partition) -> the offset of the next record to read

    def build(self, request_struct_class: type[OffsetCommitRequest_v9]) -> OffsetCommitRequest_v9:
        return request_struct_class(*self._group, committed_offsets(self._offsets), {})


def commit_errors(response: Any) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the error code of its commit, 0 for committed (of an answer whose topics are
    COMMIT_ERRORS: OffsetCommit v9's, TxnOffsetCommit v4's)."""
    return {(topic, partition): error for topic, partitions, _ in response.topics
            for partition, error, _ in partitions}

