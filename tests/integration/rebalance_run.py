"""Ground truth and plumbing for the rebalance and fault tests (the app is rebalance_apps.py).

The stream: words over 100 keys, 100 per second of event time in order, so 10-second windows hold about
10 events per key; then one far-future word per key moves every partition's stream time past every window,
so all of them close. Truth is counted here, from the events, never from what engine produced.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sized
from typing import TYPE_CHECKING, Any

import orjson
from aiokafka import AIOKafkaProducer

from engine.tables.keys import split_window_key
from tests.integration.helpers import latest, read_all, worker_status

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from tests.integration.helpers import WorkerProcess

Events = list[tuple[str, dict[str, Any]]]

KEYS = [f"w{n:03d}" for n in range(100)]
START = 2_000_000  # seconds of event time
CLOSE_AT = START + 1_000_000
WINDOW = 10
LONGEST = 600  # seconds wait_until_complete waits for outputs that keep moving
COMMITTED = "read_committed"  # what exactly-once outputs are read with; the same as uncommitted without


def words(count: int) -> Events:
    """`count` words in event-time order, then one closing word per key."""
    events = [(KEYS[(i * 37) % len(KEYS)], {"at": START + i / 100, "i": i}) for i in range(count)]
    return events + [(key, {"at": CLOSE_AT, "i": -1}) for key in KEYS]


def truth_of(events: Events) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
    """(count per key, count per (key, window start in seconds)) of the windows that close."""
    counts = Counter(key for key, _ in events)
    windows = Counter((key, int(v["at"]) // WINDOW * WINDOW) for key, v in events if v["at"] < CLOSE_AT)
    return dict(counts), dict(windows)


async def paced_produce(bootstrap: str, topic: str, events: Iterable[tuple[str, dict[str, Any]]], *,
                        rate: float, at: Mapping[float, Callable[[], None]] | None = None,
                        stamp: str | None = None) -> None:
    """Produce at about `rate` events/s; call `at[f]` once a fraction f of the events was sent (`at` takes a
    list of events; without it, `events` may be endless, and the task producing them is cancelled to stop);
    `stamp`: a field of each value set to the wall-clock time it is sent (a latency's start)."""
    marks = sorted((at or {}).items())
    total = len(events) if isinstance(events, Sized) else 0
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        started = time.monotonic()
        every = max(1, min(50, int(rate // 100)))  # events between two looks at the clock: ~10 ms or less
        for index, (key, value) in enumerate(events):
            while marks and index >= marks[0][0] * total:
                marks.pop(0)[1]()
            if stamp is not None:
                value[stamp] = time.time()
            await producer.send(topic, orjson.dumps(value), key=key.encode())
            if index % every == 0:
                ahead = started + index / rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
        await producer.flush()
    finally:
        await producer.stop()


def closed_windows(records: list[Any]) -> list[tuple[str, int, int]]:
    """(key, window start in seconds, value) of each record of a `closed()` topic."""
    out = []
    for record in records:
        key, start_ms = split_window_key(record.key)
        out.append((key.decode(), start_ms // 1000, int(record.value)))
    return out


async def outputs(bootstrap: str, app_id: str) -> tuple[dict[str, int], list[tuple[str, int, int]]]:
    """The counts (the changelog folded) and the closed windows, as read_committed readers see them."""
    changelog = await read_all(bootstrap, f"{app_id}-counts-changelog", isolation_level=COMMITTED)
    closed = await read_all(bootstrap, f"{app_id}-per-window-closed", isolation_level=COMMITTED)
    return latest(changelog), closed_windows(closed)


async def wait_until_complete(bootstrap: str, app_id: str, events: Events, *, timeout: float = 120,
                              workers: Sequence[WorkerProcess | None] = ()
                              ) -> tuple[dict[str, int], list[tuple[str, int, int]]]:
    """Read the counts' changelog and the closed windows (read_committed) until every count reached the
    truth and every window closed; then once more after a few checkpoints, so that a late duplicate shows.
    Fails once the outputs did not move for `timeout` seconds (a stall; a slow machine only takes longer,
    up to LONGEST), showing the end of each of `workers`' logs."""
    truth_counts, truth_windows = truth_of(events)
    started = last_change = time.monotonic()
    counts: dict[str, int] = {}
    closes: list[tuple[str, int, int]] = []
    progress: tuple[int, int] = (0, 0)
    while time.monotonic() - last_change < timeout and time.monotonic() - started < LONGEST:
        counts, closes = await outputs(bootstrap, app_id)
        done_counts = all(counts.get(k, 0) >= n for k, n in truth_counts.items())
        done_windows = set(truth_windows) <= {(k, s) for k, s, _ in closes}
        if done_counts and done_windows:
            await asyncio.sleep(3)
            counts, closes = await outputs(bootstrap, app_id)
            return counts, closes
        if (sum(counts.values()), len(closes)) != progress:
            progress, last_change = (sum(counts.values()), len(closes)), time.monotonic()
        await asyncio.sleep(1)
    missing = len(set(truth_windows) - {(k, s) for k, s, _ in closes})
    below = sum(1 for k, n in truth_counts.items() if counts.get(k, 0) < n)
    logs = "".join([f"\n--- {w.log_path.name}:\n{w.output()[-4000:]}\n--- its /status: "
                    f"{await worker_status(w)}" for w in workers if w is not None])
    raise AssertionError(f"not complete after {time.monotonic() - started:.0f}s, the last "
                         f"{time.monotonic() - last_change:.0f}s without progress: {below} counts below the "
                         f"truth ({sum(counts.values())} of {len(events)} counted), {missing} of "
                         f"{len(truth_windows)} windows not closed{logs}")
