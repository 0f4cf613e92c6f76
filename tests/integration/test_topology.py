"""Repartitioning on a real broker: group_by re-keys a stream through `<app>-<name>-repartition`, with two
workers sharing (and moving) the partitions, and the windows after it are on the orders' own event time,
out-of-order arrivals included. Checked against ground truth computed from the orders."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from tests.integration.helpers import (
    WorkerProcess,
    beginning_offsets,
    committed_offsets,
    create_topics,
    latest,
    read_all,
    unique,
    until_done,
)
from tests.integration.rebalance_run import CLOSE_AT, START, closed_windows, paced_produce

pytestmark = pytest.mark.kafka

CUSTOMERS = [f"c{n:02d}" for n in range(30)]


def orders(count: int) -> list[tuple[str, dict]]:
    """Keyed by order id; 1,000 per second of event time (the pace they are produced at, so that a source
    partition lagging behind the others during a rebalance stays within the 5 s grace: a repartition topic
    merges the source partitions, as in Kafka Streams); each pair of neighbours swapped (out of order)."""
    made = [{"id": i, "customer": CUSTOMERS[(i * 7) % len(CUSTOMERS)], "at": START + i / 1000,
             "amount": i % 13} for i in range(count)]
    for i in range(0, count - 1, 2):
        made[i], made[i + 1] = made[i + 1], made[i]
    return [(f"order-{o['id']}", o) for o in made]


def closing() -> list[tuple[str, dict]]:
    """One far-future order per customer, sent once the others are counted: every window closes. (Sent
    earlier, it could overtake orders of a lagging source partition in the repartition topic and make them
    late.)"""
    return [(f"order-close-{c}", {"id": -n - 1, "customer": c, "at": CLOSE_AT, "amount": 0})
            for n, c in enumerate(CUSTOMERS)]


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_group_by_re_keys_across_workers_and_windows_stay_on_event_time(kafka, tmp_path, guarantee):
    app_id, topic = unique("topology"), unique("orders")
    await create_topics(kafka.bootstrap, [topic])
    events = orders(8_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee,
           "ENGINE_REPARTITION_PURGE_INTERVAL": "1"}

    def worker(name: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.topology_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")

    first = worker("first")
    joined: list[WorkerProcess] = []
    truth_windows = Counter((o["customer"], int(o["at"])) for _, o in events if o["at"] < CLOSE_AT)
    truth_hops = Counter((o["customer"], start) for _, o in events if o["at"] < CLOSE_AT
                         for start in (int(o["at"]) - 1, int(o["at"])))  # [start, start + 2) holds at
    truth_spent: Counter[str] = Counter()
    for _, o in events:
        truth_spent[o["customer"]] += o["amount"]
    try:
        await first.wait_for_output("tables ready", 90)
        await paced_produce(kafka.bootstrap, topic, events, rate=1000,
                            at={0.4: lambda: joined.append(worker("second"))})
        workers = [first, *joined]

        async def counted() -> tuple[bool, int]:
            spent = latest(await read_all(kafka.bootstrap, f"{app_id}-spent-changelog",
                                          isolation_level="read_committed"))
            return all(spent.get(c, 0) >= n for c, n in truth_spent.items()), sum(spent.values())

        await until_done(counted, "orders counted", workers=workers)
        await paced_produce(kafka.bootstrap, topic, closing(), rate=1000)

        async def all_closed() -> tuple[bool, tuple[int, int]]:
            closes = closed_windows(await read_all(kafka.bootstrap, f"{app_id}-per-customer-closed",
                                                   isolation_level="read_committed"))
            hops = closed_windows(await read_all(kafka.bootstrap, f"{app_id}-per-customer-hop-closed"))
            done = set(truth_windows) <= {(k, s) for k, s, _ in closes} and set(truth_hops) <= {
                (k, s) for k, s, _ in hops}
            return done, (len(closes), len(hops))

        await until_done(all_closed, "every window closed", workers=workers)
        spent = latest(await read_all(kafka.bootstrap, f"{app_id}-spent-changelog",
                                      isolation_level="read_committed"))
        # Every window is closed now: orders of the first second are late, for every table of windows.
        late = [(f"order-late-{c}", {"id": -100 - n, "customer": c, "at": START + 0.5, "amount": 0})
                for n, c in enumerate(CUSTOMERS[:6])]
        await paced_produce(kafka.bootstrap, topic, late, rate=1000)
        late_ids: list[int] = []

        async def all_late() -> tuple[bool, int]:
            late_ids[:] = [orjson.loads(r.value)["id"] for r in await read_all(
                kafka.bootstrap, f"{app_id}-per-customer-hop-late")]
            return set(late_ids) >= {o["id"] for _, o in late}, len(late_ids)

        await until_done(all_late, "late orders on the late topic", workers=workers)
        repartition = f"{app_id}-by-customer-repartition"
        tps = [TopicPartition(repartition, p) for p in range(4)]

        async def purged() -> tuple[bool, Any]:
            """The repartition topic's read records deleted: its log starts where the group committed."""
            starts = await beginning_offsets(kafka.bootstrap, tps)
            committed = await committed_offsets(kafka.bootstrap, app_id, tps)
            return all(0 < starts[tp] == committed.get(tp) for tp in tps), starts

        await until_done(purged, "the repartition topic purged up to the committed offsets", workers=workers)
        closes = closed_windows(await read_all(kafka.bootstrap, f"{app_id}-per-customer-closed"))
        hops = closed_windows(await read_all(kafka.bootstrap, f"{app_id}-per-customer-hop-closed"))
    finally:
        for process in [first, *joined]:
            process.stop()
    assert joined
    assert "assigned" in joined[0].output()
    values = {(k, s): v for k, s, v in closes}
    hop_values = {(k, s): v for k, s, v in hops}
    assert sorted(set(late_ids)) == sorted(o["id"] for _, o in late)  # late: only those, none applied
    if guarantee == "exactly_once":
        assert spent == dict(truth_spent)
        assert Counter((k, s) for k, s, _ in closes) == Counter(dict.fromkeys(truth_windows, 1))
        assert {w: values[w] for w in truth_windows} == dict(truth_windows)
        assert Counter((k, s) for k, s, _ in hops) == Counter(dict.fromkeys(truth_hops, 1))
        assert hop_values == dict(truth_hops)
        assert len(late_ids) == len(late)
    else:
        assert [c for c, n in truth_spent.items() if spent[c] < n] == []
        assert [w for w, n in truth_windows.items() if values[w] < n] == []
        assert [w for w, n in truth_hops.items() if hop_values[w] < n] == []
