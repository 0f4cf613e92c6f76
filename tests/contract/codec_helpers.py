"""Encoding and decoding a protocol message both ways, engine's codec and Kafka's own (the codec
contract tests share them)."""

from __future__ import annotations

from io import BytesIO
from typing import Any


def encoded(request: Any) -> bytes:
    """The body of the newest version of `request` engine builds (what follows the request header)."""
    struct = request.build(request._CLASSES[-1])
    return bytes(struct.encode())


def engine_decodes(response_class: Any, body: bytes) -> Any:
    data = BytesIO(body)
    decoded = response_class.decode(data)
    assert data.read() == b"", "bytes left after the response"
    return decoded


# Offsets committed as a member, {("b", 0): 5, ("a", 2): 2**33, ("a", 1): 0}, as Kafka's own classes decode
# them from OffsetCommit v9 and TxnOffsetCommit v4 (one schema): by topic and partition, in order.
OFFSETS = {("b", 0): 5, ("a", 2): 2**33, ("a", 1): 0}


OFFSETS_AS_KAFKA_READS_THEM = [
    {"name": "a", "partitions": [
        {"partitionIndex": 1, "committedOffset": 0, "committedLeaderEpoch": -1, "committedMetadata": ""},
        {"partitionIndex": 2, "committedOffset": 2**33, "committedLeaderEpoch": -1,
         "committedMetadata": ""}]},
    {"name": "b", "partitions": [
        {"partitionIndex": 0, "committedOffset": 5, "committedLeaderEpoch": -1, "committedMetadata": ""}]},
]
