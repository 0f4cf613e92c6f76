"""An `on_leader` timer on the real broker, through two `engine worker`s: while both run, every tick comes
from one of them (the owner of task 0); once that one stops, the ticks come from the other, and the two
never tick side by side."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.integration.helpers import SHORT_SESSION, WorkerProcess, create_topics, read_all, unique

pytestmark = pytest.mark.kafka


async def test_a_leader_timer_ticks_on_one_worker_and_moves_when_the_leader_stops(kafka, tmp_path):
    app_id, topic = unique("leader"), unique("words")
    await create_topics(kafka.bootstrap, [topic, f"{app_id}-ticks"])
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, **SHORT_SESSION}
    workers = [WorkerProcess("tests.integration.leader_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")
               for name in ("a", "b")]
    pids = {w.process.pid for w in workers}

    async def ticks() -> list[int]:
        records = sorted(await read_all(kafka.bootstrap, f"{app_id}-ticks"),
                         key=lambda r: (r.timestamp, r.partition, r.offset))
        return [orjson.loads(r.value) for r in records]

    async def wait_for_ticks(count: int) -> None:
        for _ in range(200):
            if len(await ticks()) >= count:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"fewer than {count} ticks: {await ticks()}")

    try:
        for worker in workers:
            await worker.wait_for_output("assigned", 90)  # no tables here: no "tables ready"
        await wait_for_ticks(20)
        leader = (await ticks())[-1]
        assert leader in pids
        survivor = next(w for w in workers if w.process.pid != leader)
        stopping = next(w for w in workers if w.process.pid == leader)
        assert stopping.terminate(timeout=60) == 0, stopping.output()[-3000:]
        await wait_for_ticks(len(await ticks()) + 20)
        # Runs of ticks from one worker: the first leader's, perhaps the second's after it joined (task 0
        # may move then), and the survivor's; never the two side by side (a, b, a, b, ...).
        seen = await ticks()
        runs = [pid for n, pid in enumerate(seen) if n == 0 or pid != seen[n - 1]]
        assert len(runs) <= 3, runs
        assert runs[-1] == survivor.process.pid, "the other worker took over"
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]
