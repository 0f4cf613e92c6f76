"""Key → partition, the same way Kafka's Java client and aiokafka's default partitioner do it.

The memory transport uses this so that a key lands in the same partition on memory:// as on Kafka, and
tables can check that a key belongs to the partition of the event that writes it. Engine's Kafka producer
picks the partition of a keyed record itself (as Kafka Streams' own partitioner does) through `KeyHashes`,
instead of aiokafka's default partitioner, which runs this pure-Python murmur2 and rebuilds the topic's
partition sets for every record (its cost per event: benchmarks/README.md).
"""

from __future__ import annotations


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like Java's."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    tail = length4 * 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# Per-key caches (key hashes here, tables' key locations and window sets) start afresh past this many keys:
# a bound, not an LRU, since keys repeat.
CACHED_KEYS = 100_000


class KeyHashes:
    """murmur2 of the keys seen lately: the same keys come back all the time, and a dict lookup costs a
    fraction of a pure-Python murmur2."""

    __slots__ = ("_hashes",)

    def __init__(self) -> None:
        self._hashes: dict[bytes, int] = {}

    def partition(self, key: bytes, partitions: int) -> int:
        """partition_for(key, partitions), cached."""
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= CACHED_KEYS:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return hashed % partitions
