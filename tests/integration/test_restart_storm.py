"""A restart storm: the broker restarted 5 times within about a minute under load, on a single node (shut down
cleanly and started again) and on the 3-node cluster (killed, one node at a time, rolling), while two apps
run, each on two workers: one at-least-once, one exactly-once. Every worker comes through: still running,
the group settled over both again, and every count, window and output against ground truth computed from
the input (exactly-once: each once; at-least-once: none lost). And each worker's log stays short: aiokafka
repeats one connection error per request it retries (thousands of lines per restart), which the log summary
counts instead of printing; the test prints how many lines each worker logged during the storm, and bounds
them.

The faults it found and what is still open: docs/rebalances-and-faults.md, "The broker restarting" (issue
38). The single node is shut down cleanly at each restart: killed, a single node is elected back by an
unclean election, and one killed storm's log dumps showed a committed transaction without its markers. Shut
down cleanly it lost a committed transaction's markers too (its leader epoch moved twice as it stopped):
the exactly-once workers then rebuild the stores that reflect it (a WARNING each), and stay exact.
Crashes are the 3-node cluster's test, where replicas keep what was acknowledged. Marked `storm` (`-m storm`
runs them, apart from the other tests); part of tests/run.sh."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
import pytest

from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    create_topics,
    placed_over,
    read_all,
    unique,
)
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import Events, paced_produce, wait_until_complete, words
from tests.kafka.broker import KafkaCluster

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# A storm takes about 3 minutes beside two busy processes, and longer beside the suite's heaviest tests
# (in the other test process): bounded by its own waits (each stage's progress), not by the suite's 300 s.
pytestmark = [pytest.mark.kafka, pytest.mark.storm, pytest.mark.timeout(600)]

RESTARTS = 5
UP_BETWEEN = 2.0  # seconds each node stays up between two restarts: events flow, the group rejoins
PARTITIONS = 4
EVENTS = 9_000  # per app, at RATE: they flow for the whole storm
RATE = 180
# The most lines a worker may log while the broker restarts 5 times (measured: see benchmarks/README.md,
# "Restart storms"); without the summary aiokafka alone logs thousands per restart.
MOST_WARNINGS = 150  # ERROR and WARNING lines
MOST_LINES = 600  # every line, INFO and tracebacks included


@pytest.fixture(scope="module")
def own_broker() -> Iterator[KafkaCluster]:
    """A single broker of this module's own, since the test restarts it."""
    with KafkaCluster(1) as cluster:
        yield cluster


@dataclass
class App:
    """One app of the storm: its guarantee, input and workers."""

    guarantee: str
    app_id: str
    topic: str
    workers: list[WorkerProcess]
    events: Events


def start_app(url: str, tmp_path: Path, guarantee: str) -> App:
    app_id, topic = unique(f"storm-{guarantee[:3]}"), unique("words")
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee, "ITEST_ECHO": "1",
           **SHORT_SESSION}
    workers = [WorkerProcess("tests.integration.rebalance_apps:app", url, env,
                             tmp_path / f"{guarantee}-{n}.log") for n in (1, 2)]
    return App(guarantee, app_id, topic, workers, words(EVENTS))


async def storm(cluster: KafkaCluster, nodes: list[int], crash: bool) -> float:
    """Restart the nodes RESTARTS times (killed, or shut down cleanly), in turn, each once the one before
    is up again (and UP_BETWEEN seconds after); returns how long the storm took."""
    started = time.monotonic()
    for n in range(RESTARTS):
        await asyncio.to_thread(cluster.restart, nodes[n % len(nodes)], crash=crash)
        await asyncio.sleep(UP_BETWEEN)
    return time.monotonic() - started


def log_lines(worker: WorkerProcess) -> list[str]:
    return worker.output().splitlines()


async def ride_out_a_storm(cluster: KafkaCluster, nodes: list[int], tmp_path: Path, *, crash: bool) -> None:
    for node in cluster.nodes:  # an earlier test may have left one down
        if not node.running:
            await asyncio.to_thread(cluster.restart, node.node_id)
    replication = len(cluster.nodes)
    apps = [start_app(cluster.url, tmp_path, guarantee) for guarantee in ("at_least_once", "exactly_once")]
    await create_topics(cluster.bootstrap, [app.topic for app in apps], partitions=PARTITIONS,
                        replication=replication)
    workers = [w for app in apps for w in app.workers]
    try:
        for app in apps:
            await placed_over(app.workers, PARTITIONS)
        before = {w.log_path.name: len(log_lines(w)) for w in workers}
        storming: list[asyncio.Future[float]] = []

        def start_storm() -> None:  # once the producers run (their start needs a broker)
            storming.append(asyncio.ensure_future(storm(cluster, nodes, crash)))

        marks = [{0.05: start_storm}, {}]
        await asyncio.gather(*(paced_produce(cluster.bootstrap, app.topic, app.events, rate=RATE, at=at)
                               for app, at in zip(apps, marks, strict=True)))
        took = await storming[0]
        results = [await wait_until_complete(cluster.bootstrap, app.app_id, app.events, timeout=180,
                                             workers=app.workers) for app in apps]
        echoed = [await read_all(cluster.bootstrap, f"{app.app_id}-echo", timeout=60) for app in apps]
        written = [await read_all(cluster.bootstrap, app.topic, timeout=60) for app in apps]
        for app in apps:
            await placed_over(app.workers, PARTITIONS)
        assert [w.log_path.name for w in workers if w.process.poll() is not None] == []
        during = {w.log_path.name: log_lines(w)[before[w.log_path.name]:] for w in workers}
    finally:
        for w in workers:
            w.terminate(timeout=60)
    how = "crashes and restarts" if crash else "restarts"
    print(f"\n{RESTARTS} {how} of nodes {nodes} in {took:.0f}s; lines each worker logged from the storm "
          "to the group settled again (ERROR, WARNING, all):")
    for name, lines in during.items():
        print(f"  {name}: {levelled(lines, 'ERROR')}, {levelled(lines, 'WARNING')}, {len(lines)}")
    for app, records in zip(apps, written, strict=True):  # the input as the test meant it, once each
        sent = Counter(orjson.loads(r.value)["i"] for r in records if orjson.loads(r.value)["i"] >= 0)
        assert {i: n for i, n in sent.items() if n > 1} == {}, f"{app.guarantee}: input records written twice"
        assert len(sent) == EVENTS
    for app, (counts, closes), records in zip(apps, results, echoed, strict=True):
        exact = app.guarantee == "exactly_once"
        outputs = Counter((r.key.decode(), int(r.value)) for r in records)
        assert set(outputs) == {(key, v["i"]) for key, v in app.events}, f"{app.guarantee}: every output"
        if exact:
            assert {o: n for o, n in outputs.items() if n > 1} == {}, "each output once"
        check(app.events, counts, closes, exact=exact)
    for name, lines in during.items():
        warnings = levelled(lines, "ERROR") + levelled(lines, "WARNING")
        assert warnings <= MOST_WARNINGS, f"{name} logged {warnings} ERROR and WARNING lines"
        assert len(lines) <= MOST_LINES, f"{name} logged {len(lines)} lines"


def levelled(lines: list[str], level: str) -> int:
    """How many of the lines are log lines at `level` (the worker's format: `[time] LEVEL logger: ...`)."""
    return sum(1 for line in lines if f"] {level} " in line)


async def test_two_apps_ride_out_five_restarts_of_a_single_broker(own_broker, tmp_path):
    await ride_out_a_storm(own_broker, [1], tmp_path, crash=False)


@pytest.mark.cluster
async def test_two_apps_ride_out_five_rolling_crashes_of_a_3_node_cluster(kafka_cluster, tmp_path):
    await ride_out_a_storm(kafka_cluster, [1, 2, 3], tmp_path, crash=True)
