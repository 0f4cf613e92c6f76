"""Partitions moving while events flow, on a real broker: one worker joins at ~30% of the stream and the
other leaves (SIGTERM) at ~70%, with a plain count and a tumbling-window count of the same words. Checked
against ground truth computed here: every count, and every window's final value on `closed()`.

Under exactly_once (read_committed) every count and every closed window is exact and no window is closed
twice; under at-least-once nothing is below the truth and no window is missing. The same holds when a
worker freezes (SIGSTOP) past its session timeout and wakes up after its partitions moved.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    create_topics,
    read_all,
    unique,
    until_done,
    worker_status,
)
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import (
    paced_produce,
    wait_until_complete,
    words,
)

pytestmark = [pytest.mark.kafka, pytest.mark.both_protocols]


async def owns_every_partition(worker: WorkerProcess, partitions: int = 4) -> None:
    async def probe() -> tuple[bool, Any]:
        status = await worker_status(worker)
        active = status["active"] if status is not None else None
        return active == list(range(partitions)), active

    await until_done(probe, "the worker owning every partition", workers=[worker])


def worker(kafka, tmp_path, name: str, **env: str) -> WorkerProcess:
    env = {"ENGINE_DATA_DIR": str(tmp_path / name), **env}
    return WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env, tmp_path / f"{name}.log")


@pytest.mark.parametrize(("guarantee", "delay"), [
    ("exactly_once", "0"),
    ("at_least_once", "0"),
    ("exactly_once", "0.0005"),
])
async def test_a_worker_joins_and_another_leaves_mid_stream(kafka, tmp_path, guarantee, delay):
    app_id, topic = unique("moves"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(12_000 if float(delay) else 24_000)  # a slow agent works through a backlog meanwhile
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee, "ITEST_DELAY": delay}
    first = worker(kafka, tmp_path, "first", **env)
    second: WorkerProcess | None = None
    try:
        await first.wait_for_output("tables ready", 90)

        def join() -> None:
            nonlocal second
            second = worker(kafka, tmp_path, "second", **env)

        # The first leaves once the second took its share (on a loaded machine a worker's start can take
        # longer than the gap between join and leave, and the leave would then hand nothing over).
        cut = len(events) * 7 // 10
        await paced_produce(kafka.bootstrap, topic, events[:cut], rate=4000, at={0.3 / 0.7: join})
        assert second is not None
        await second.wait_for_output("tables ready", 90)
        first.process.terminate()  # SIGTERM: a clean leave, partitions handed over
        await paced_produce(kafka.bootstrap, topic, events[cut:], rate=4000)
        exact = guarantee == "exactly_once"
        counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, workers=[first, second])
        assert first.process.wait(30) == 0, first.output()[-3000:]
    finally:
        if first.process.poll() is None:
            first.kill()
        if second is not None:
            assert second.terminate() == 0, second.output()[-3000:]
    check(events, counts, closes, exact=exact)
    assert "revoked" in first.output()
    assert "assigned" in second.output()
    changelog = await read_all(kafka.bootstrap, f"{app_id}-counts-changelog")
    assert changelog, "the counts went through the changelog"


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_a_frozen_worker_writes_nothing_after_losing_its_partitions(kafka, tmp_path, guarantee):
    """SIGSTOP a worker past its session timeout while both hold state: the group gives its partitions to the
    other. On SIGCONT the zombie's stale buffers and open transaction must not reach readers."""
    app_id, topic = unique("zombie"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(10_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee, **SHORT_SESSION}
    first = worker(kafka, tmp_path, "first", **env)
    second = worker(kafka, tmp_path, "second", **env)
    try:
        await first.wait_for_output("tables ready", 90)
        await second.wait_for_output("tables ready", 90)

        assignments = second.output().count("assigned")

        def freeze() -> None:
            first.process.send_signal(signal.SIGSTOP)

        feeding = asyncio.ensure_future(
            paced_produce(kafka.bootstrap, topic, events, rate=800, at={0.2: freeze}))
        # The group gives up on the frozen one: the other worker is assigned everything (all four again
        # under the classic protocol, the frozen one's two more under the streams protocol).
        await second.wait_for_output("assigned", 60, count=assignments + 1)
        await owns_every_partition(second)
        await asyncio.sleep(4)  # ... and the other worker writes its partitions for a while
        first.process.send_signal(signal.SIGCONT)
        await feeding
        exact = guarantee == "exactly_once"
        counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, workers=[first, second])
    finally:
        first.process.send_signal(signal.SIGCONT)
        assert first.terminate() == 0, first.output()[-3000:]
        assert second.terminate() == 0, second.output()[-3000:]
    assert "lost" in first.output()
    check(events, counts, closes, exact=exact)
