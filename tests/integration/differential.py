"""Engine and Kafka Streams on one seeded input (tests/kafka/reference): the input, each system's final
results, and stopping the workers (the differential tests share them)."""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

from engine.tables.keys import split_window_key, window_bounds

if TYPE_CHECKING:
    from tests.integration.helpers import (
        WorkerProcess,
    )

PARTITIONS = 4


START_MS = 1_700_000_000_000


Result = tuple[str, int, int, int]  # key, window start ms, window end ms, count


def seeded_input(seed: int, gap_ms: int, grace_ms: int, keys: int = 24,
                 per_key: int = 60) -> list[tuple[str, int]]:
    """(key, timestamp ms) in the order they are produced: per key, times that leave gaps both shorter and
    longer than `gap_ms`; delivered out of order by up to half the grace, and one record in 20 held back
    by more than gap + grace (late, unless it lands in a session still open)."""
    rng = random.Random(seed)
    records: list[tuple[int, str, int]] = []  # (arrival, key, time)
    for n in range(keys):
        at = START_MS + rng.randrange(0, 10 * gap_ms)
        for _ in range(per_key):
            at += rng.choice([rng.randrange(1, gap_ms), rng.randrange(1, gap_ms),
                              rng.randrange(gap_ms + 1, 4 * gap_ms)])
            delay = rng.randrange(0, grace_ms // 2)
            if rng.random() < 0.05:
                delay = rng.randrange(gap_ms + grace_ms, 3 * (gap_ms + grace_ms))
            records.append((at + delay, f"k{n}", at))
    records.sort()
    return [(key, at) for _, key, at in records]


def reference_results(records: list) -> Counter[Result]:
    found: Counter[Result] = Counter()
    for record in records:
        key, start, end = record.key.decode().rsplit("@", 2)
        found[(key, int(start), int(end), int(record.value))] += 1
    return found


def engine_results(records: list, size_ms: int | None = None) -> Counter[Result]:
    """(`size_ms`: of fixed-size windows, whose keys do not carry their end.)"""
    found: Counter[Result] = Counter()
    for record in records:
        key, _ = split_window_key(record.key)
        start, end = window_bounds(record.key, size_ms)
        found[(key.decode(), start, end, int(record.value))] += 1
    return found


def stop_all(workers: list[WorkerProcess]) -> None:
    """Stop every worker (but the SIGKILLed one) before asserting that each stopped cleanly."""
    running = [w for w in workers if w.process.returncode != -9]
    codes = [w.terminate() for w in running]
    for worker, code in zip(running, codes, strict=True):
        assert code == 0, f"worker exited with {code}:\n{worker.output()[-3000:]}"


def join_input(seed: int, within_ms: int, grace_ms: int, keys: int = 24,
               per_key: int = 40) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(key, timestamp ms) of the left and the right stream, each in the order it is produced: per key,
    records of either stream at times that leave partners both within and beyond `within_ms` of each other;
    delivered out of order, and one record in 20 held back by more than the retention (late). Every
    timestamp is distinct, so that the order in which both systems take the two streams (by timestamp) has
    no ties."""
    rng = random.Random(seed)
    used: set[int] = set()
    streams: tuple[list[tuple[int, str, int]], list[tuple[int, str, int]]] = ([], [])
    for n in range(keys):
        at = START_MS + rng.randrange(0, 20 * within_ms)
        for _ in range(per_key):
            at += rng.randrange(1, 2 * within_ms)
            while at in used:
                at += 1
            used.add(at)
            delay = rng.randrange(0, grace_ms)
            if rng.random() < 0.05:
                delay = rng.randrange(2 * within_ms + grace_ms, 4 * within_ms + 2 * grace_ms)
            streams[rng.random() < 0.5].append((at + delay, f"k{n}", at))
    return tuple([(key, at) for _, key, at in sorted(stream)] for stream in streams)  # type: ignore[return-value]
