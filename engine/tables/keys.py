"""The one key layout of tables' stores and changelogs, read by tables, recovery, exports and the CLI
(and by readers outside engine, such as Spark jobs reading a changelog).

A plain table's key is the key encoded by the table's key codec. A windowed table's key is:

    4 bytes   big-endian length of the encoded key
    n bytes   the key, encoded by the table's key codec
    8 bytes   big-endian window start in milliseconds, plus 2**63 (so that negative starts sort first)

so one key's windows are contiguous and ordered by start. A session table's key (engine.tables.sessions)
has one more field, since a session has no fixed size:

    8 bytes   big-endian session end (its last event's time) in milliseconds, plus 2**63

A key's sessions never overlap, so its start alone orders and tells them apart. Engine's own records (a
windowed partition's stream time and the newest window emitted closed) start with META_PREFIX, which no
windowed key starts with (its length prefix is never 0xffffffff); readers of table keys skip them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.codecs import SKIP
from engine.windows import WindowRange

if TYPE_CHECKING:
    from engine.codecs import Codec

META_PREFIX = b"\xff\xff\xff\xff"
OFFSET = 2**63
STREAM_TIME_KEY = META_PREFIX + b"stream-time"  # a windowed partition's stream time
CLOSED_KEY = META_PREFIX + b"closed-upto"  # the start of the newest window emitted closed


def window_key(key_bytes: bytes, start_ms: int) -> bytes:
    return len(key_bytes).to_bytes(4, "big") + key_bytes + (start_ms + OFFSET).to_bytes(8, "big")


def session_key(key_bytes: bytes, start_ms: int, end_ms: int) -> bytes:
    return window_key(key_bytes, start_ms) + (end_ms + OFFSET).to_bytes(8, "big")


def stored_key(key_bytes: bytes, windowed: tuple[Any, ...]) -> bytes:
    """The store key of a windowed table's key (key, start) or a session table's (key, start, end)."""
    if len(windowed) == 2:
        return window_key(key_bytes, windowed[1])
    return session_key(key_bytes, windowed[1], windowed[2])


def split_window_key(raw: bytes) -> tuple[bytes, int]:
    length = int.from_bytes(raw[:4], "big")
    return raw[4:4 + length], int.from_bytes(raw[4 + length:12 + length], "big") - OFFSET


def window_bounds(raw: bytes, size_ms: int | None) -> tuple[int, int]:
    """(start ms, end ms) of a windowed store key: the end is in a session key, else start + `size_ms`."""
    length = int.from_bytes(raw[:4], "big")
    start = int.from_bytes(raw[4 + length:12 + length], "big") - OFFSET
    if len(raw) > 12 + length:
        return start, int.from_bytes(raw[12 + length:20 + length], "big") - OFFSET
    assert size_ms is not None, "a window key without an end needs the window's size"
    return start, start + size_ms


def key_prefix(key_bytes: bytes) -> tuple[bytes, bytes]:
    """[start, end) of every stored window of one key."""
    head = len(key_bytes).to_bytes(4, "big") + key_bytes
    return head, head + b"\xff" * 9


class WindowKeyCodec:
    """Store keys of a windowed table: (key, window start in ms) <-> the layout above; a session table's
    (key, start ms, end ms)."""

    name = "windowed"

    def __init__(self, key_codec: Codec) -> None:
        self.inner = key_codec

    def encode(self, value: Any) -> bytes | None:
        encoded = self.inner.encode(value[0])
        assert encoded is not None
        return stored_key(encoded, value)

    def decode(self, data: bytes | None) -> Any:
        assert data is not None
        length = int.from_bytes(data[:4], "big")
        key = self.inner.decode(data[4:4 + length])
        start = int.from_bytes(data[4 + length:12 + length], "big") - OFFSET
        if len(data) > 12 + length:
            return key, start, int.from_bytes(data[12 + length:20 + length], "big") - OFFSET
        return key, start

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        return [self.decode(data) for data in datas]


class WindowedChangelogKeyCodec(WindowKeyCodec):
    """What readers of `table.changelog()` get as keys: (key, WindowRange). Engine's own records on the
    changelog (stream time, the newest window closed) decode to SKIP: agents never see them."""

    skips = True

    def __init__(self, key_codec: Codec, size_ms: int | None) -> None:
        super().__init__(key_codec)
        self.size_ms = size_ms  # None for sessions: their keys carry their end

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if data.startswith(META_PREFIX):
            return SKIP  # engine's own record (stream time), not a window
        key_bytes, _ = split_window_key(data)
        return self.inner.decode(key_bytes), WindowRange.from_ms(*window_bounds(data, self.size_ms))


class VersionedChangelogKeyCodec(WindowKeyCodec):
    """What readers of a versioned table's `changelog()` get as keys: (key, the version's time in seconds).
    Engine's own records decode to SKIP."""

    skips = True

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if data.startswith(META_PREFIX):
            return SKIP
        key_bytes, at = split_window_key(data)
        return self.inner.decode(key_bytes), at // 1000 if at % 1000 == 0 else at / 1000


def window_inner_key(raw: bytes) -> bytes:
    """The encoded key alone of a windowed store key."""
    return raw[4:4 + int.from_bytes(raw[:4], "big")]
