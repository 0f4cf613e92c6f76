"""Exactly-once across SIGKILLs, on a real broker: a worker killed again and again right after its tables are
ready (while its first transactions are in flight), restarted each time, with a plain count, a tumbling
count and one output record per event. Read committed, every count, every window's final value and every
output is exact, against ground truth computed here."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.integration.helpers import WorkerProcess, create_topics, read_all, unique
from tests.integration.rebalance_run import paced_produce, wait_until_complete, words
from tests.integration.test_rebalances import check

pytestmark = pytest.mark.kafka

KILLS_AFTER_READY = [0.1, 0.3, 0.6, 1.0, 1.5]  # seconds after "tables ready"


async def test_exactly_once_stays_exact_across_sigkills_right_after_tables_ready(kafka, tmp_path):
    app_id, topic = unique("killed"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(12_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": "exactly_once", "ITEST_ECHO": "1",
           "ENGINE_DATA_DIR": str(tmp_path / "data")}
    producing = asyncio.ensure_future(paced_produce(kafka.bootstrap, topic, events, rate=400))
    runs: list[WorkerProcess] = []
    try:
        for round_, after in enumerate(KILLS_AFTER_READY):
            run = WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env,
                                tmp_path / f"run{round_}.log")
            runs.append(run)
            await run.wait_for_output("tables ready", 90)
            await asyncio.sleep(after)
            run.kill()
        last = WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env, tmp_path / "last.log")
        runs.append(last)
        await producing
        counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, timeout=180)
        echoed = await read_all(kafka.bootstrap, f"{app_id}-echo")
    finally:
        producing.cancel()
        if runs:
            runs[-1].terminate(timeout=60)
    check(events, counts, closes, exact=True)
    outputs = Counter((r.key.decode(), int(r.value)) for r in echoed)
    assert set(outputs) == {(key, v["i"]) for key, v in events}, "every event's output"
    assert {o: n for o, n in outputs.items() if n > 1} == {}, "each output once"
