"""close_idle_after through `engine worker` on the real broker, a second worker joining while the input is
quiet (partitions move): every window of the input closes with its exact final count, though no later event
ever moves stream time past them."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from engine.tables.keys import split_window_key
from tests.integration.helpers import WorkerProcess, consume_until, create_topics, produce, unique

pytestmark = pytest.mark.kafka

START = 2_000_000


async def test_quiet_partitions_close_their_windows_by_the_wall_clock(kafka, tmp_path):
    app_id, topic = unique("idle"), unique("clicks")
    await create_topics(kafka.bootstrap, [topic])
    events = [{"user": f"u{i % 12}", "at": START + i * 0.25} for i in range(400)]  # 100 s of event time
    truth = Counter((e["user"], int(e["at"]) // 10 * 10) for e in events)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic}
    workers = [WorkerProcess("tests.integration.idle_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / "a")}, tmp_path / "a.log")]
    try:
        await workers[0].wait_for_output("tables ready", 90)
        await produce(kafka.bootstrap, topic, [(e["user"], e) for e in events])
        workers.append(WorkerProcess("tests.integration.idle_apps:app", kafka.url,
                                     {**env, "ENGINE_DATA_DIR": str(tmp_path / "b")}, tmp_path / "b.log"))

        def finals(records) -> Counter:
            found: Counter = Counter()
            for record in records:
                key, start_ms = split_window_key(record.key)
                found[(key.decode(), start_ms // 1000)] = int(record.value)
            return found

        records = await consume_until(kafka.bootstrap, f"{app_id}-clicks-closed",
                                      lambda rs: len(rs) >= len(truth), timeout=180)
        assert finals(records) == truth
        assert len(records) == len(truth), "each window closed once"
        await workers[1].wait_for_output("tables ready", 90)
        assert re.search(r"tables ready; processing [1-9]\d* partitions", workers[1].output()), (
            "the second worker took partitions", workers[1].output()[-3000:])
    finally:
        for worker in workers:
            assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]
