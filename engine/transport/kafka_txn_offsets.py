"""A transaction's source offsets committed as a member of a streams group (KIP-447's fence, by member epoch).
Part of the Kafka transport (with kafka.py, the only modules that import aiokafka).

Under exactly-once a task's transaction holds its outputs and the offsets of the records they came from, so
that both commit or neither. aiokafka's `send_offsets_to_transaction` sends those offsets with TxnOffsetCommit
v0-2, which names no member: the group coordinator takes them from anyone holding the transactional id. A
worker the group has fenced (frozen past its session, its tasks given to another member) could then still
commit. TxnOffsetCommit v3+ carries the member's id, epoch and instance id, and the coordinator checks them as
it checks a member's OffsetCommit: a member it no longer knows, or an epoch its tasks were not assigned at, is
refused, and the transaction can only be aborted.

`send_offsets_as_member` is `send_offsets_to_transaction` with that request: aiokafka's own transaction steps
(AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group coordinator, with their
retries and error handling), only the request and the reading of the refusals are engine's
(aiokafka_private.commit_txn_offsets_as). Version 4: the newest a transaction of aiokafka's can use (v5 is for
transactions of version 2, KIP-890, which aiokafka's EndTxn v0-1 does not run; v6 names topics by id).
Fields as Kafka 4.4's TxnOffsetCommit{Request,Response}.json; v3+ are flexible (compact strings and arrays, a
tagged-field section ending each struct).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Int16, Int32, Int64, Schema

from engine.errors import DeliveryFailed, EngineError, MembershipLost
from engine.transport import aiokafka_private as private
from engine.transport.kafka_protocol import (
    COMMIT_ERRORS,
    COMMITTED_OFFSETS,
    TAGS,
    TEXT,
    commit_errors,
    committed_offsets,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

# The refusals that say the group no longer counts the sender as the member that owns these partitions, by
# Kafka's error code. Before v6 the coordinator answers a stale epoch, and a group that is not a streams
# group, with ILLEGAL_GENERATION; the rest are Kafka's client's list (its TxnOffsetCommitHandler makes each a
# CommitFailedException, an abortable error).
NOT_THE_MEMBER = {
    22: "ILLEGAL_GENERATION",
    25: "UNKNOWN_MEMBER_ID",
    69: "GROUP_ID_NOT_FOUND",
    82: "FENCED_INSTANCE_ID",
    110: "FENCED_MEMBER_EPOCH",
    113: "STALE_MEMBER_EPOCH",
}
TRANSACTION_ABORTABLE = 120  # (v4+) the broker failed the transaction: abort it, the transactional id stays


class TxnOffsetCommitResponse_v4(Response):  # type: ignore[misc]  # aiokafka's protocol classes are untyped
    API_KEY = 28
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", COMMIT_ERRORS),
        TAGS,
    )


class TxnOffsetCommitRequest_v4(RequestStruct):  # type: ignore[misc]  # (as above)
    FLEXIBLE_VERSION = True
    API_KEY = 28
    API_VERSION = 4
    RESPONSE_TYPE = TxnOffsetCommitResponse_v4
    SCHEMA = Schema(
        ("transactional_id", TEXT),
        ("group_id", TEXT),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id_or_member_epoch", Int32),
        ("member_id", TEXT),
        ("group_instance_id", TEXT),
        ("topics", COMMITTED_OFFSETS),
        TAGS,
    )


@dataclass(frozen=True, slots=True)
class Producer:
    """A transactional producer as the transaction coordinator knows it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class Member:
    """A member of a streams group as its coordinator knows it."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None


class MemberTxnOffsetCommitRequest(Request[TxnOffsetCommitRequest_v4]):  # type: ignore[misc]  # (as above)
    API_KEY = 28

    def __init__(self, producer: Producer, member: Member, offsets: Mapping[tuple[str, int], int]) -> None:
        self._producer = producer
        self._member = member
        self._offsets = offsets  # (topic, partition) -> the offset of the next record to read

    def build(self, request_struct_class: type[TxnOffsetCommitRequest_v4]) -> TxnOffsetCommitRequest_v4:
        producer, member = self._producer, self._member
        return request_struct_class(
            producer.transactional_id, member.group_id, producer.producer_id, producer.producer_epoch,
            member.member_epoch, member.member_id, member.instance_id,
            committed_offsets(self._offsets), {})


def refusal(member: Member, errors: Mapping[tuple[str, int], int]) -> EngineError | None:
    """What a commit's answer makes of the transaction, if it can only be aborted now: MembershipLost when
    the group refused the member, DeliveryFailed when the broker failed the transaction; None for anything
    else (aiokafka's own handling: committed, retried, or the producer fenced)."""
    refused = {tp: code for tp, code in errors.items() if code in NOT_THE_MEMBER}
    if refused:
        names = ", ".join(sorted({NOT_THE_MEMBER[code] for code in refused.values()}))
        return MembershipLost(
            f"group {member.group_id!r} refused the transaction's offsets of {sorted(refused)} from member "
            f"{member.member_id} at epoch {member.member_epoch} ({names}): this worker is no longer the "
            "member that owns them; the transaction must be aborted")
    aborted = sorted(tp for tp, code in errors.items() if code == TRANSACTION_ABORTABLE)
    if aborted:
        return DeliveryFailed(f"the broker failed the transaction committing the offsets of {aborted} "
                              "(TRANSACTION_ABORTABLE); it must be aborted")
    return None


@dataclass(frozen=True, slots=True)
class _AsMember:
    """The transactional offset commit of one member (aiokafka_private.TxnOffsetCommitter)."""

    member: Member

    def request(self, transactional_id: str, producer_id: int, producer_epoch: int,
                offsets: Mapping[tuple[str, int], int]) -> Any:
        producer = Producer(transactional_id, producer_id, producer_epoch)
        return MemberTxnOffsetCommitRequest(producer, self.member, offsets)

    def answer(self, response: Any) -> tuple[dict[tuple[str, int], int], Exception | None]:
        errors = commit_errors(response)
        return errors, refusal(self.member, errors)


async def send_offsets_as_member(producer: AIOKafkaProducer, offsets: Mapping[TopicPartition, int],
                                 group_id: str, member_id: str, member_epoch: int,
                                 instance_id: str | None = None) -> None:
    """Add `offsets` (the next record to read, per partition) to the producer's open transaction as the
    member `member_id` at `member_epoch` of the streams group `group_id`; instead of aiokafka's
    `send_offsets_to_transaction`, which names no member.

    Raises MembershipLost when the group refuses the member (it fenced it, or the epoch is not one its tasks
    were assigned at), DeliveryFailed when the broker failed the transaction (TRANSACTION_ABORTABLE): the
    transaction can then only be aborted (`abort_transaction`, which reaches the broker: every record it
    holds is discarded), and nothing of it is committed. Any other failure is aiokafka's, as its
    `send_offsets_to_transaction` raises it (ProducerFenced when a newer producer took the transactional id).
    """
    private.commit_txn_offsets_as(producer, _AsMember(Member(group_id, member_id, member_epoch, instance_id)))
    await producer.send_offsets_to_transaction(dict(offsets), group_id)
