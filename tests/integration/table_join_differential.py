"""Table joins' differential input and results: seeded updates with tombstones, the joins of their final
states computed here, each system's final rows, and waiting until a group committed everything."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import orjson
from aiokafka import TopicPartition

from tests.integration.helpers import (
    WorkerProcess,
    committed_offsets,
    read_all,
    until_done,
)

if TYPE_CHECKING:
    from collections.abc import Iterable



Update = tuple[str, str, str | None]  # (table: "left", "right" or "orders", key, value or None: a tombstone)


def table_updates(seed: int, count: int = 1800) -> list[Update]:
    """The records of the three tables' topics, in the order they are produced: left and right keyed by
    customer ("c<n>"), orders by order ("o<n>") with a value naming a customer ("c<n>/<i>")."""
    rng = random.Random(seed)
    updates: list[Update] = []
    for i in range(count):
        table = rng.choice(("left", "right", "orders"))
        if table == "orders":
            key, value = f"o{rng.randrange(60)}", f"c{rng.randrange(30)}/{i}"
        else:
            key, value = f"c{rng.randrange(30)}", f"{table}-{i}"
        updates.append((table, key, None if rng.random() < 0.25 else value))
    return updates


def final_states(updates: list[Update]) -> dict[str, dict[str, str]]:
    states: dict[str, dict[str, str]] = {"left": {}, "right": {}, "orders": {}}
    for table, key, value in updates:
        if value is None:
            states[table].pop(key, None)
        else:
            states[table][key] = value
    return states


def expected_joins(updates: list[Update]) -> dict[str, str]:
    """Each join's rows, "<join>:<key>" -> "left|right" ("null" for a missing side), from the final states."""
    states = final_states(updates)
    left, right, orders = states["left"], states["right"], states["orders"]
    rows: dict[str, str] = {}
    for key in left.keys() | right.keys():
        pair = f"{left.get(key, 'null')}|{right.get(key, 'null')}"
        if key in left and key in right:
            rows[f"inner:{key}"] = pair
        if key in left:
            rows[f"left:{key}"] = pair
        rows[f"outer:{key}"] = pair
    for key, row in orders.items():
        other = right.get(row.split("/")[0])
        if other is not None:
            rows[f"fk-inner:{key}"] = f"{row}|{other}"
        rows[f"fk-left:{key}"] = f"{row}|{'null' if other is None else other}"
    return rows


def final_rows(records: list[Any], tag: str | None = None) -> dict[str, str]:
    """The last value of each key of a join's changes (in log order per partition); a tombstone removes the
    key. Kafka Streams' keys carry their join's tag; engine's values (of one join's changelog, `tag`) are
    JSON pairs."""
    rows: dict[str, str] = {}
    for record in records:
        key = record.key.decode() if tag is None else f"{tag}:{record.key.decode()}"
        if record.value is None:
            rows.pop(key, None)
        elif tag is None:
            rows[key] = record.value.decode()
        else:
            row, other = orjson.loads(record.value)
            rows[key] = f"{'null' if row is None else row}|{'null' if other is None else other}"
    return rows


async def settled(bootstrap: str, group: str, stages: list[list[str]],
                  workers: Iterable[WorkerProcess] = ()) -> None:
    """Wait until `group` committed every record of each stage's topics, stage after stage: the inputs, then
    the topics that processing them wrote (a foreign-key join's subscriptions, then its responses), so that
    once the last stage is committed nothing more comes. (Past each partition's last record, not to its
    end: engine writes internal topics in transactions, whose markers follow the records.)"""
    for stage in stages:
        for topic in stage:
            last: dict[TopicPartition, int] = {}
            for record in await read_all(bootstrap, topic):
                at = TopicPartition(topic, record.partition)
                last[at] = max(last.get(at, -1), record.offset)

            async def probe(last: dict[TopicPartition, int] = last) -> tuple[bool, int]:
                committed = await committed_offsets(bootstrap, group, list(last))
                behind = sum(1 for tp, offset in last.items() if committed.get(tp, 0) <= offset)
                return behind == 0, behind

            await until_done(probe, f"group {group} committing every record of {topic}", workers=workers)
