"""Versioned tables: a model of Kafka Streams' versioned store, seeded updates (out of order, late,
deletions) and the apps the versioned tests run."""

from __future__ import annotations

import random
from typing import Any

import engine
from engine.tables.versions import Version

HISTORY = 10  # seconds


S = 1000


class Model:
    """Kafka Streams' versioned store, as its documentation states it (one partition)."""

    def __init__(self, history_ms: int) -> None:
        self.history_ms = history_ms
        self.writes: dict[str, dict[int, float | None]] = {}
        self.stream_time: int | None = None
        self.late = 0

    def put(self, key: str, at: int, value: float | None) -> None:
        if self.stream_time is not None and at < self.stream_time - self.history_ms:
            self.late += 1
            return
        self.writes.setdefault(key, {})[at] = value
        self.stream_time = at if self.stream_time is None else max(self.stream_time, at)

    def horizon(self) -> int:
        assert self.stream_time is not None
        return self.stream_time - self.history_ms

    def as_of(self, key: str, at: int) -> float | None:
        if at < self.horizon():  # only the latest version answers, if it began by then: it never expires
            latest = max(self.writes.get(key, {}), default=None)
            return None if latest is None or latest > at else self.writes[key][latest]
        times = [t for t in self.writes.get(key, {}) if t <= at]
        return self.writes[key][max(times)] if times else None

    def latest(self, key: str) -> float | None:
        times = self.writes.get(key, {})
        return times[max(times)] if times else None

    def versions(self, key: str) -> list[Version]:
        """Every non-deletion version still valid at the horizon or later, oldest first."""
        times = sorted(self.writes.get(key, {}))
        found = []
        for index, start in enumerate(times):
            end = times[index + 1] if index + 1 < len(times) else None
            value = self.writes[key][start]
            if value is not None and (end is None or end > self.horizon()):
                found.append(Version(value, start / S if start % S else start // S,
                                     None if end is None else (end / S if end % S else end // S)))
        return found

    def kept(self) -> set[tuple[str, int]]:
        """The (key, time) versions a store holds once expired: those valid at the horizon or later, and
        each key's latest unless it is a deletion."""
        kept = set()
        for key, writes in self.writes.items():
            times = sorted(writes)
            for index, start in enumerate(times):
                last = index + 1 == len(times)
                end = start if last and writes[start] is None else (None if last else times[index + 1])
                if end is None or end > self.horizon():
                    kept.add((key, start))
        return kept


def versioned_app(url: str, name: str = "versions", **settings: Any
                  ) -> tuple[engine.App, Any, Any, list[Any]]:
    app = engine.App(name, broker=url, topic_partitions=1, commit_interval=0.05, **settings)
    updates = app.topic("updates", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    prices = app.Table("prices", key_type=str, value_type=float).versioned(history=HISTORY)
    seen: list[Any] = []

    @app.agent(updates)
    async def keep(stream: Any) -> None:
        async for key, update in stream.items():
            if update["price"] is None:
                del prices[key]
            else:
                prices[key] = update["price"]
            seen.append(key)

    return app, updates, prices, seen


def random_updates(seed: int, count: int) -> list[tuple[str, float, float | None]]:
    """(key, time in seconds, price or None for a deletion): mostly in order, some a few seconds out of
    order, some older than the history, a deletion in ten."""
    rng = random.Random(seed)
    found = []
    for n in range(count):
        at = 1_000 + n * 0.5 - (rng.choice([0, 0, 0, 3, 7, 14]) + rng.randrange(0, 1000) / 1000)
        price = None if rng.random() < 0.1 else float(rng.randrange(1, 500))
        found.append((f"s{rng.randrange(4)}", round(at, 3), price))
    return found


def source_app(url: str, data_dir: Any) -> tuple[engine.App, Any, Any, list[Any]]:
    """Prices over a source topic (each record a version at its timestamp, a tombstone a deletion) and
    orders joined with them as of their time."""
    app = engine.App("versions-source", broker=url, topic_partitions=1, commit_interval=0.05,
                     store="rocksdb://", data_dir=data_dir)
    feed = app.topic("feed", key_type=str, value_type=float)
    prices = app.Table("prices", source_topic=feed).versioned(history=HISTORY)
    orders = app.topic("orders", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    joined: list[Any] = []

    @app.agent(orders)
    async def price(stream: Any) -> None:
        async for order, found in stream.left_join(prices):
            joined.append((order["id"], found))

    return app, feed, prices, joined
