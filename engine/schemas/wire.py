"""Confluent's wire format: how a record framed for a schema registry is laid out.

    magic byte 0 | schema id, 4 bytes big-endian | (Protobuf only) message indexes | payload

The message indexes say which message of the registered .proto file the payload is: the path of indexes
from the file's top-level messages down through nested ones, written as a count then each index, every
number a zigzag varint (Kafka's ByteUtils.writeVarint); the common case, the file's first message ([0]), is
written as the single byte 0. Pure and dependency-free: the codecs (engine.schemas.codecs) frame and unframe
with it, and the tests hold it to Confluent's own serializers.
"""

from __future__ import annotations

MAGIC = 0
HEADER = 5  # magic byte and schema id


class WireError(ValueError):
    """Bytes that are not a record in Confluent's wire format (the reason says what is wrong)."""


def frame(schema_id: int, payload: bytes, indexes: bytes = b"") -> bytes:
    """A payload framed for `schema_id` (`indexes`: a Protobuf message's, from `message_indexes`)."""
    return b"".join((b"\x00", schema_id.to_bytes(4, "big"), indexes, payload))


def schema_id(data: bytes) -> int:
    """The schema id a framed record names; WireError if it is not framed."""
    if len(data) < HEADER:
        raise WireError(f"{len(data)} bytes: too short for Confluent's wire format (a magic byte and a "
                        "4-byte schema id)")
    if data[0] != MAGIC:
        raise WireError(f"magic byte {data[0]}, not {MAGIC}: not in Confluent's wire format")
    return int.from_bytes(data[1:HEADER], "big")


def message_indexes(path: list[int]) -> bytes:
    """The encoded message indexes of the message at `path` in its .proto file."""
    if path == [0]:
        return b"\x00"
    return b"".join(_varint(n) for n in (len(path), *path))


def read_message_indexes(data: bytes, at: int = HEADER) -> tuple[list[int], int]:
    """The message index path encoded at `at`, and where the payload after it starts."""
    count, at = _read_varint(data, at)
    if count == 0:
        return [0], at
    if count < 0 or count > len(data):
        raise WireError(f"a message index count of {count}: not a Protobuf record in Confluent's wire format")
    path = []
    for _ in range(count):
        index, at = _read_varint(data, at)
        path.append(index)
    return path, at


def _varint(n: int) -> bytes:
    zigzag = (n << 1) ^ (n >> 63)
    out = bytearray()
    while zigzag & ~0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise WireError("the record ends inside its message indexes")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
        if shift > 63:
            raise WireError("a message index longer than 10 bytes")
