"""Faults as inputs, on a real broker: the broker restarting under an exactly-once worker, an agent stuck on
one event, corrupt stores and a recreated changelog. Each checked against ground truth."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tests.integration.helpers import WorkerProcess, create_topics, unique
from tests.integration.rebalance_run import paced_produce, wait_until_complete, words
from tests.integration.test_rebalances import check
from tests.kafka.broker import KafkaCluster

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def own_broker() -> Iterator[KafkaCluster]:
    """A broker of this module's own, since tests here restart it."""
    with KafkaCluster(1) as cluster:
        yield cluster


def worker(url: str, tmp_path, name: str, **env: str) -> WorkerProcess:
    env = {"ENGINE_DATA_DIR": str(tmp_path / name), **env}
    return WorkerProcess("tests.integration.rebalance_apps:app", url, env, tmp_path / f"{name}.log")


async def test_an_exactly_once_worker_rides_out_a_broker_restart(own_broker, tmp_path):
    app_id, topic = unique("restart"), unique("words")
    await create_topics(own_broker.bootstrap, [topic])
    events = words(12_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": "exactly_once"}
    one = worker(own_broker.url, tmp_path, "one", **env)
    restarting: list[asyncio.Future[None]] = []
    try:
        await one.wait_for_output("tables ready", 90)

        def restart() -> None:
            restarting.append(asyncio.ensure_future(asyncio.to_thread(own_broker.restart, 1)))

        await paced_produce(own_broker.bootstrap, topic, events, rate=800, at={0.4: restart})
        await asyncio.gather(*restarting)
        counts, closes = await wait_until_complete(own_broker.bootstrap, app_id, events, timeout=180)
        assert one.process.poll() is None, "the worker must survive the broker's restart"
    finally:
        assert one.terminate(timeout=60) == 0, one.output()[-3000:]
    check(events, counts, closes, exact=True)
