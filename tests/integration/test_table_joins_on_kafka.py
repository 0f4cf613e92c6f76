"""Table-table left joins (by key, and by foreign key between tables of 4 and 3 partitions) through `engine
worker`s on the real broker, a second worker joining mid-stream (partitions move): the result table's
changelog ends equal to the left join of both sides' final states, computed here from the input (deleted
rows retracted, changed foreign keys followed)."""

from __future__ import annotations

import random
import re

import orjson
import pytest

from tests.integration.helpers import (
    WorkerProcess,
    consume_until,
    create_topics,
    produce,
    read_all,
    unique,
)

pytestmark = pytest.mark.kafka


def updates(seed: int, count: int, by_foreign_key: bool = False) -> list[tuple[str, str, dict]]:
    """(side, key, value) in order; a value {"delete": true} deletes the row. By foreign key: orders are keyed
    by order id and name a customer."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        side = rng.choice("oc")
        if by_foreign_key and side == "o":
            key, value = f"order-{rng.randrange(60)}", {"customer": f"cust-{rng.randrange(15)}", "v": i}
        else:
            key, value = f"cust-{rng.randrange(40 if not by_foreign_key else 15)}", {"v": i}
        out.append((side, key, {"delete": True} if rng.random() < 0.2 else value))
    return out


def final_states(events: list[tuple[str, str, dict]]) -> tuple[dict, dict]:
    left: dict[str, dict] = {}
    right: dict[str, dict] = {}
    for side, key, value in events:
        state = left if side == "o" else right
        if value.get("delete"):
            state.pop(key, None)
        else:
            state[key] = value
    return left, right


def joined(records) -> dict[str, list]:
    state: dict[str, list] = {}
    for record in records:
        key = record.key.decode()
        if record.value is None:
            state.pop(key, None)
        else:
            state[key] = orjson.loads(record.value)
    return state


@pytest.mark.parametrize("by_foreign_key", [False, True])
async def test_a_left_join_of_two_tables_follows_both_sides_while_partitions_move(kafka, tmp_path,
                                                                                   by_foreign_key):
    app_id, orders, customers = unique("tjoin"), unique("orders"), unique("customers")
    if by_foreign_key:
        await create_topics(kafka.bootstrap, [orders], partitions=4)
        await create_topics(kafka.bootstrap, [customers], partitions=3)
    else:
        await create_topics(kafka.bootstrap, [orders, customers])
    module = f"tests.integration.{'fk_join_apps' if by_foreign_key else 'table_join_apps'}:app"
    env = {"ITEST_APP": app_id, "ITEST_ORDERS": orders, "ITEST_CUSTOMERS": customers}
    first_half, second_half = updates(1, 600, by_foreign_key), updates(2, 600, by_foreign_key)
    left, right = final_states(first_half + second_half)
    expected = {key: [row, right.get(row["customer"] if by_foreign_key else key)]
                for key, row in left.items()}
    result = f"{app_id}-enriched-changelog"

    async def feed(events: list[tuple[str, str, dict]]) -> None:
        for side in "oc":  # each side's updates in order (one topic each)
            await produce(kafka.bootstrap, orders if side == "o" else customers,
                          [(key, value) for s, key, value in events if s == side])

    workers = [WorkerProcess(module, kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")
               for name in ("a",)]
    try:
        await workers[0].wait_for_output("tables ready", 90)
        await feed(first_half)
        workers.append(WorkerProcess(module, kafka.url,
                                     {**env, "ENGINE_DATA_DIR": str(tmp_path / "b")}, tmp_path / "b.log"))
        await feed(second_half[:300])  # while the group rebalances for the second worker
        await workers[1].wait_for_output("tables ready", 90)
        assert re.search(r"tables ready; processing [1-9]\d* partitions", workers[1].output()), (
            "the second worker took partitions", workers[1].output()[-3000:])
        await feed(second_half[300:])  # with both: each processes its own partitions
        records = await consume_until(kafka.bootstrap, result, lambda rs: joined(rs) == expected,
                                      timeout=180)
        assert joined(records) == expected
        assert joined(await read_all(kafka.bootstrap, result)) == expected
    finally:
        for worker in workers:
            assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]
