"""`@app.timer(..., on_leader=True)` with two workers of one app: every tick runs on the worker that owns task
0 and on no other; when that worker stops, the other is given task 0 and its ticks take over. A plain timer
ticks on both."""

from __future__ import annotations

from collections import Counter
from typing import Any

import engine
from engine import testing
from engine.scope import current_worker


async def test_a_leader_timer_ticks_on_one_worker_and_moves_when_it_leaves(tmp_path):
    app = engine.App("leader-timers")
    app.topic("words", key_type=str, value_type=str)
    leader_ticks: list[Any] = []
    every_ticks: list[Any] = []

    @app.agent(app.topics["words"])
    async def count(stream: Any) -> None:
        async for _ in stream:
            pass

    @app.timer(0.02, on_leader=True)
    async def report() -> None:
        leader_ticks.append(current_worker.get())

    @app.timer(0.02)
    async def everywhere() -> None:
        every_ticks.append(current_worker.get())

    url = testing.memory_url()
    workers = []
    for name in ("a", "b"):
        worker = engine.Worker(app, app.settings({"broker": url, "data_dir": str(tmp_path / name),
                                                  "commit_interval": 0.05, "web_enabled": False}))
        await worker.start()
        workers.append(worker)
    first, second = workers
    try:
        await testing.eventually(lambda: bool(first.tasks.active) and bool(second.tasks.active), 10)
        leader = first if 0 in first.tasks.active else second
        other = second if leader is first else first
        leader_ticks.clear()
        every_ticks.clear()
        await testing.eventually(lambda: len(leader_ticks) >= 10, 10)
        assert set(leader_ticks) == {leader}, "only the owner of task 0 ticks"
        assert set(every_ticks) == {first, second}, "a plain timer ticks everywhere"

        leader.request_stop()
        await leader.run_until_stopped()
        await testing.eventually(lambda: 0 in other.tasks.active and other.tasks.active[0].ready, 10)
        leader_ticks.clear()
        await testing.eventually(lambda: len(leader_ticks) >= 10, 10)
        assert Counter(leader_ticks) == Counter({other: len(leader_ticks)}), "the other took over"
    finally:
        for worker in workers:
            worker.request_stop()
            await worker.run_until_stopped()
