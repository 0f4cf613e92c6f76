"""A versioned table's versions as values and times: the value tag of a stored version (a value or a
deletion), each key's version times kept in order (`VersionTimes`), the `Version` queries answer, and the
times users and queries give (seconds, datetimes, ISO text) in ms."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.codecs import Codec


# A version's value is its codec's bytes after VALUE; a deletion is DELETION alone.
VALUE, DELETION = b"\x01", b"\x00"
# The end of the latest version, which has none (the largest time a window key holds).
OPEN_MS = 2**63 - 1


class _Deleted:
    """A deletion version's value in a partition's buffer (encoded as DELETION)."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETED_VERSION: Any = _Deleted()


class VersionValueCodec:
    """A versioned table's values: a version's value as `inner` encodes it after VALUE, or DELETION for a
    version that deletes the key (a store or changelog record must be bytes to be a version: a null record
    removes it)."""

    name = "versioned"

    def __init__(self, inner: Codec) -> None:
        self.inner = inner

    def encode(self, value: Any) -> bytes | None:
        if value is DELETED_VERSION:
            return DELETION
        return VALUE + (self.inner.encode(value) or b"")

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if data[:1] == DELETION:
            return DELETED_VERSION
        return self.inner.decode(data[1:])

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        return [self.decode(data) for data in datas]


class VersionChangeCodec(VersionValueCodec):
    """What readers of a versioned table's `changes()` get as values: a version's value, or None for a
    deletion (as for the tombstone that removes an expired version: either way the key has no value from
    that version's time on, unless a newer version says otherwise)."""

    def decode(self, data: bytes | None) -> Any:
        if data is None or data[:1] == DELETION:
            return None
        return self.inner.decode(data[1:])


class VersionTimes(dict[int, tuple[int, bool]]):
    """One key's version times in a partition's index -> (1 if a deletion else 0, whether the store has it),
    with the times also kept in order (`ordered`): a look-up or a write finds its neighbours by bisection,
    not by going through a history that may hold thousands of versions."""

    __slots__ = ("ordered",)

    def __init__(self) -> None:
        super().__init__()
        self.ordered: list[int] = []

    def __setitem__(self, at: int, entry: tuple[int, bool]) -> None:
        if at not in self:
            ordered = self.ordered
            if not ordered or at > ordered[-1]:
                ordered.append(at)  # (the usual case: a version newer than the others)
            else:
                insort(ordered, at)
        super().__setitem__(at, entry)

    def __delitem__(self, at: int) -> None:
        super().__delitem__(at)
        del self.ordered[bisect_left(self.ordered, at)]

    def pop(self, at: int, *default: Any) -> Any:
        if at in self:
            del self.ordered[bisect_left(self.ordered, at)]
        return super().pop(at, *default)

    def latest(self) -> int:
        return self.ordered[-1]

    def at_or_before(self, at: int) -> int | None:
        """The newest version time not after `at`, or None."""
        index = bisect_right(self.ordered, at)
        return self.ordered[index - 1] if index else None

    def before(self, at: int) -> int | None:
        """The newest version time before `at`, or None."""
        index = bisect_left(self.ordered, at)
        return self.ordered[index - 1] if index else None

    def after(self, at: int) -> int | None:
        """The oldest version time after `at`, or None."""
        index = bisect_right(self.ordered, at)
        return self.ordered[index] if index < len(self.ordered) else None


@dataclass(frozen=True)
class Version:
    """A key's value from `valid_from` until `valid_to` (seconds; None: it is still the latest)."""

    value: Any
    valid_from: float
    valid_to: float | None


def at_ms(at: float | int | datetime, what: str = "at") -> int:
    """A time given in seconds (int or float) or as a datetime, in ms."""
    if isinstance(at, datetime):
        return round(at.timestamp() * 1000)
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise ConfigError(f"{what} must be seconds (an int or a float) or a datetime, not {at!r}")
    return at * 1000 if isinstance(at, int) else round(at * 1000)


MAX_SECONDS = 1e15  # the largest time asked of a versioned table (its ms fit the store's 64-bit times)


def parse_time_ms(text: str, what: str) -> int:
    """A time given as text (a query's URL, the command line), in seconds or as an ISO datetime (without a
    zone: UTC, not this machine's local zone, which the asker's may not be), in ms; `what` names it in the
    error."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(f"{what}, in seconds or as an ISO datetime, not {text!r}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = moment.timestamp()
    if not math.isfinite(seconds) or abs(seconds) > MAX_SECONDS:
        raise ConfigError(f"{what} within ±{MAX_SECONDS:g} s of the epoch, not {text!r}")
    return round(seconds * 1000)


def seconds_of(ms: int) -> float:
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def stored_times(values: Mapping[int, Any]) -> VersionTimes:
    """The version times of a key's `values` read from a store (VersionedTable._stored_versions)."""
    times = VersionTimes()
    for at in sorted(values):
        times[at] = (int(values[at] is DELETED_VERSION), True)
    return times
