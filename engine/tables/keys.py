"""The one key layout of tables' stores and changelogs, read by tables, recovery, exports and the CLI
(and by readers outside engine, such as Spark jobs reading a changelog).

A plain table's key is the key encoded by the table's key codec. A windowed table's key is:

    4 bytes   big-endian length of the encoded key
    n bytes   the key, encoded by the table's key codec
    8 bytes   big-endian window start in milliseconds, plus 2**63 (so that negative starts sort first)

so one key's windows are contiguous and ordered by start. Engine's own records (a windowed partition's
stream time and the newest window emitted closed) start with META_PREFIX, which no windowed key starts with
(its length prefix is never 0xffffffff); readers of table keys skip them.
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


def split_window_key(raw: bytes) -> tuple[bytes, int]:
    length = int.from_bytes(raw[:4], "big")
    return raw[4:4 + length], int.from_bytes(raw[4 + length:12 + length], "big") - OFFSET


def key_prefix(key_bytes: bytes) -> tuple[bytes, bytes]:
    """[start, end) of every stored window of one key."""
    head = len(key_bytes).to_bytes(4, "big") + key_bytes
    return head, head + b"\xff" * 9


class WindowKeyCodec:
    """Store keys of a windowed table: (key, window start in ms) <-> the layout above."""

    name = "windowed"

    def __init__(self, key_codec: Codec) -> None:
        self.inner = key_codec

    def encode(self, value: Any) -> bytes | None:
        key, start_ms = value
        encoded = self.inner.encode(key)
        assert encoded is not None
        return window_key(encoded, start_ms)

    def decode(self, data: bytes | None) -> Any:
        assert data is not None
        key_bytes, start_ms = split_window_key(data)
        return self.inner.decode(key_bytes), start_ms

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        return [self.decode(data) for data in datas]


class WindowedChangelogKeyCodec(WindowKeyCodec):
    """What readers of `table.changelog()` get as keys: (key, WindowRange). Engine's own records on the
    changelog (stream time, the newest window closed) decode to SKIP: agents never see them."""

    skips = True

    def __init__(self, key_codec: Codec, size_ms: int) -> None:
        super().__init__(key_codec)
        self.size_ms = size_ms

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if data.startswith(META_PREFIX):
            return SKIP  # engine's own record (stream time), not a window
        key, start_ms = super().decode(data)
        return key, WindowRange.from_ms(start_ms, start_ms + self.size_ms)


def window_start(raw: bytes) -> int:
    """The window start (ms) of a windowed store key."""
    return int.from_bytes(raw[-8:], "big") - OFFSET


def window_inner_key(raw: bytes) -> bytes:
    """The encoded key alone of a windowed store key."""
    return raw[4:-8]
