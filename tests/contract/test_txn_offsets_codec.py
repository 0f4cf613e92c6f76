"""engine.transport.kafka_txn_offsets' TxnOffsetCommit v4 against Kafka's own message classes
(tests/kafka/codec.py, no broker): the member's fields and every offset read by Kafka from engine's bytes,
and every partition's error read by engine from Kafka's."""

from __future__ import annotations

from engine.errors import DeliveryFailed, MembershipLost
from engine.transport.kafka_protocol import commit_errors
from engine.transport.kafka_txn_offsets import (
    Member,
    MemberTxnOffsetCommitRequest,
    Producer,
    TxnOffsetCommitResponse_v4,
    refusal,
)
from tests.contract.codec_helpers import OFFSETS, OFFSETS_AS_KAFKA_READS_THEM, encoded, engine_decodes
from tests.kafka.codec import kafka_decodes, kafka_encodes


def test_a_transactions_offsets_committed_as_a_member_read_in_kafka_as_they_were_meant():
    request = MemberTxnOffsetCommitRequest(
        Producer("app-task-3", 2**40, 7), Member("app", "m-1", 12, "worker-a"), OFFSETS)
    assert kafka_decodes("TxnOffsetCommitRequest", 4, encoded(request)) == {
        "transactionalId": "app-task-3", "groupId": "app", "producerId": 2**40, "producerEpoch": 7,
        "generationIdOrMemberEpoch": 12, "memberId": "m-1", "groupInstanceId": "worker-a",
        "topics": OFFSETS_AS_KAFKA_READS_THEM}
    dynamic = MemberTxnOffsetCommitRequest(Producer("t", 1, 0), Member("app", "m-2", 3), {("a", 0): 1})
    assert kafka_decodes("TxnOffsetCommitRequest", 4, encoded(dynamic))["groupInstanceId"] is None


def test_a_commit_answer_written_by_kafka_reads_in_engine_and_says_what_became_of_the_transaction():
    body = kafka_encodes("TxnOffsetCommitResponse", 4, {"throttleTimeMs": 3, "topics": [
        {"name": "a", "partitions": [{"partitionIndex": 1, "errorCode": 0},
                                     {"partitionIndex": 2, "errorCode": 22}]},
        {"name": "b", "partitions": [{"partitionIndex": 0, "errorCode": 120}]}]})
    errors = commit_errors(engine_decodes(TxnOffsetCommitResponse_v4, body))
    assert errors == {("a", 1): 0, ("a", 2): 22, ("b", 0): 120}

    member = Member("app", "m-1", 12)
    refused = refusal(member, errors)
    assert isinstance(refused, MembershipLost)
    for said in ("ILLEGAL_GENERATION", "('a', 2)", "member m-1 at epoch 12"):
        assert said in str(refused)
    for code in (25, 69, 82, 110, 113):
        assert isinstance(refusal(member, {("a", 0): code}), MembershipLost), code
    assert isinstance(refusal(member, {("b", 0): 120}), DeliveryFailed)
    # Committed, or for aiokafka to retry (COORDINATOR_LOAD_IN_PROGRESS) or to fail (INVALID_PRODUCER_EPOCH)
    assert refusal(member, {("a", 0): 0, ("a", 1): 14, ("a", 2): 47}) is None
