"""Two `engine worker` processes given one data dir: the second refuses to start, naming the first, and
never touches what the first holds; the first goes on, exact."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.integration.helpers import WorkerProcess, consume_until, create_topics, latest, produce, unique

pytestmark = pytest.mark.kafka


async def test_a_second_worker_given_the_same_data_dir_refuses_naming_the_first(kafka, tmp_path):
    app_id, topic = unique("datadir"), unique("words")
    changelog = f"{app_id}-counts-changelog"
    await create_topics(kafka.bootstrap, [topic])
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(tmp_path / "data")}
    first = [f"k{i % 30}" for i in range(1000)]
    second = [f"k{i % 40}" for i in range(1000)]
    one = WorkerProcess("tests.integration.table_apps:app", kafka.url, env, tmp_path / "one.log")
    try:
        await one.wait_for_output("tables ready", 90)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in first])
        two = WorkerProcess("tests.integration.table_apps:app", kafka.url, env, tmp_path / "two.log")
        code = await asyncio.to_thread(two.process.wait, 60)
        two.terminate()
        assert code != 0, two.output()[-3000:]
        refusals = [line for line in two.output().splitlines() if "in use by another worker process" in line]
        assert refusals == [f"engine: data dir {tmp_path / 'data' / app_id} is in use by another worker "
                            f"process (pid {one.process.pid}); give each worker on this machine its own "
                            "--data-dir (ENGINE_DATA_DIR)"], two.output()[-3000:]
        assert "assigned" not in two.output(), "it never joined the group"
        await produce(kafka.bootstrap, topic, [(w, 1) for w in second])
        truth = dict(Counter(first + second))
        records = await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == truth, timeout=90,
                                      workers=[one])
        assert latest(records) == truth
        assert one.process.poll() is None
    finally:
        one.stop()
