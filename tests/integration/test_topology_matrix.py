"""The topology matrix on a real broker, through `engine worker`: `through`, a join with a co-partitioned
table, a left join with a source table, a join with a GlobalTable, a generator agent's sink with keys, `ask`
and a timer, with a second worker joining while orders flow (partitions and tables moving). Every output is
checked against ground truth computed from the inputs. A second agent on the orders runs filter, map and
take. (group_by into a windowed table and `closed()` are
in test_topology.py.)"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from tests.integration.helpers import WorkerProcess, create_topics, produce, read_all, unique
from tests.integration.rebalance_run import paced_produce

pytestmark = pytest.mark.kafka

CUSTOMERS = {f"c{n:02d}": {"tier": ["gold", "silver", "bronze"][n % 3]} for n in range(30)}
REGIONS = {"r0": "north", "r1": "south", "r2": "east", "r3": "west"}
LIMITS = {c: 100 * n for n, c in enumerate(CUSTOMERS) if n % 2 == 0}  # odd customers have none


def orders(count: int) -> list[tuple[str, dict]]:
    """Keyed by customer; every fifth order is in region r4, which `regions` does not have."""
    names = list(CUSTOMERS)
    return [(names[(i * 7) % len(names)], {"id": i, "region": f"r{i % 5}"}) for i in range(count)]


def expected(made: list[tuple[str, dict]]) -> dict[int, tuple[str, dict]]:
    """What `enrich` yields for each order, computed from the inputs alone."""
    return {o["id"]: (c, {"id": o["id"], "tier": CUSTOMERS[c]["tier"], "limit": LIMITS.get(c),
                          "region": REGIONS[o["region"]]})
            for c, o in made if o["region"] in REGIONS}


async def test_joins_through_sinks_ask_and_timer_with_two_workers(kafka, tmp_path):
    app_id, prefix = unique("matrix"), unique("m") + "-"
    await create_topics(kafka.bootstrap, [f"{prefix}{t}" for t in ("customers", "regions", "orders")])
    await create_topics(kafka.bootstrap, [f"{prefix}limits"], config={"cleanup.policy": "compact"})
    await produce(kafka.bootstrap, f"{prefix}customers", CUSTOMERS.items())
    await produce(kafka.bootstrap, f"{prefix}regions",  # a str topic: utf-8 text, not JSON
                  [(code.encode(), name.encode()) for code, name in REGIONS.items()], raw=True)
    await produce(kafka.bootstrap, f"{prefix}limits", LIMITS.items())
    env = {"ITEST_APP": app_id, "ITEST_PREFIX": prefix}

    def worker(name: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.matrix_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")

    made = orders(3000)
    truth = expected(made)
    first = worker("first")
    joined: list[WorkerProcess] = []
    try:
        await first.wait_for_output("tables ready", 90)
        deadline = time.monotonic() + 90
        while True:  # the tables are written before any order is sent: a join then always finds them
            customers = await read_all(kafka.bootstrap, f"{app_id}-customers-changelog")
            regions = await read_all(kafka.bootstrap, f"{app_id}-regions-changelog")
            if len({r.key for r in customers}) == len(CUSTOMERS) and len({r.key for r in regions}) == 4:
                break
            assert time.monotonic() < deadline, first.output()[-3000:]
            await asyncio.sleep(0.5)
        await paced_produce(kafka.bootstrap, f"{prefix}orders", made, rate=500,
                            at={0.3: lambda: joined.append(worker("second"))})
        deadline = time.monotonic() + 120
        while True:
            out = await read_all(kafka.bootstrap, f"{prefix}enriched")
            asks = await read_all(kafka.bootstrap, f"{prefix}asked")
            batches = [orjson.loads(r.value) for r in await read_all(kafka.bootstrap, f"{prefix}batched")]
            if {orjson.loads(r.value)["id"] for r in out} >= set(truth) and len({r.key for r in asks}) == 2 \
                    and {n for batch in batches for n in batch} >= set(truth):
                break
            assert time.monotonic() < deadline, (
                f"{len(set(truth) - {orjson.loads(r.value)['id'] for r in out})} orders missing; "
                f"{first.output()[-2000:]}")
            await asyncio.sleep(1)
    finally:
        for process in [first, *joined]:
            process.stop()
    assert joined
    assert "assigned" in joined[0].output()
    # Every order of a known region, once or (at-least-once, across the rebalance) more, each time equal to
    # the ground truth, keyed by its customer; none of region r4 (the inner join skips them).
    got = [(r.key.decode(), orjson.loads(r.value)) for r in out]
    assert {value["id"] for _, value in got} == set(truth)
    assert [(key, value) for key, value in got if truth[value["id"]] != (key, value)] == []
    # filter, map and take: every order of a known region in some batch, no other, none over 50.
    assert {n for batch in batches for n in batch} == set(truth)
    assert max(len(batch) for batch in batches) <= 50
    # Every ask answered with its double, from both workers (a reply reaches the worker that asked).
    answers = [orjson.loads(r.value) for r in asks]
    assert answers
    assert [a for a in answers if a["answer"] != 2 * a["n"]] == []
