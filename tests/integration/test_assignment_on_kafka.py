"""engine's assignor on a real broker, through `engine worker`: three workers with standby_replicas=1 keep
exactly one standby per partition, never on its owner; when one is killed, its partitions go to the workers
that held their standbys, which replay only the tail; counts stay exact (the kill comes after a
checkpoint)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from tests.integration.helpers import (
    ROOT,
    SHORT_SESSION,
    WorkerProcess,
    committed_to_end,
    consume_until,
    create_topics,
    latest,
    produce,
    standbys_caught_up,
    unique,
)

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.kafka, pytest.mark.both_protocols]

PARTITIONS = 6
ASSIGNMENT = re.compile(r"assignment: active \[([\d, ]*)\], standby \[([\d, ]*)\], warming up \[([\d, ]*)\]")


def numbers(text: str) -> set[int]:
    return {int(n) for n in text.split(",") if n.strip()}


def last_assignment(worker: WorkerProcess) -> tuple[set[int], set[int], set[int]] | None:
    found = ASSIGNMENT.findall(worker.output())
    if not found:
        return None
    active, standby, warming = found[-1]
    return numbers(active), numbers(standby), numbers(warming)


def replayed(log: str) -> int:
    return sum(int(n) for n in re.findall(r"recovered \S+: replayed (\d+) records", log))


def placed(workers: dict[str, WorkerProcess], standbys_each: int
           ) -> dict[str, tuple[set[int], set[int], set[int]]] | None:
    """Each worker's last assignment, if together they are a settled placement: every partition active
    once, `standbys_each` standbys each, never on its owner, no warm-up pending."""
    found = {name: last_assignment(w) for name, w in workers.items()}
    if any(a is None for a in found.values()):
        return None
    settled = {name: a for name, a in found.items() if a is not None}
    actives = sorted(p for a, _, _ in settled.values() for p in a)
    standbys = Counter(p for _, s, _ in settled.values() for p in s)
    # (Every worker has some: under the streams protocol a joining worker first hears an empty assignment
    # while its share is still being given up by the others.)
    if actives != list(range(PARTITIONS)) or any(w or not a for a, _, w in settled.values()):
        return None
    if standbys != Counter({p: standbys_each for p in range(PARTITIONS) if standbys_each}) or any(
            a & s for a, s, _ in settled.values()):
        return None
    return settled


async def settled(workers: dict[str, WorkerProcess], standbys_each: int
                  ) -> dict[str, tuple[set[int], set[int], set[int]]]:
    """Wait (at most 120 s) until the workers' assignments are a settled placement; return it."""
    deadline = time.monotonic() + 120
    while (placement := placed(workers, standbys_each)) is None:
        assert time.monotonic() < deadline, {n: last_assignment(w) for n, w in workers.items()}
        await asyncio.sleep(0.5)
    return placement


async def counting_group(kafka, tmp_path, prefix: str, **env: str
                         ) -> tuple[str, str, Callable[[str], WorkerProcess], dict[str, WorkerProcess]]:
    """A new app id and source topic, a factory of `engine worker`s of the counting app
    (tests/integration/table_apps.py), each with its own data dir and log under tmp_path, and three of
    them started: (app id, topic, factory, workers a, b, c)."""
    app_id, topic = unique(prefix), unique("words")
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)

    def worker(name: str) -> WorkerProcess:
        settings = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(tmp_path / name),
                    "ENGINE_TOPIC_PARTITIONS": str(PARTITIONS), **env}
        log = tmp_path / f"{name}.log"
        return WorkerProcess("tests.integration.table_apps:app", kafka.url, settings, log)

    return app_id, topic, worker, {name: worker(name) for name in "abc"}


async def test_one_standby_per_partition_and_failover_to_it(kafka, tmp_path):
    app_id, topic, _, workers = await counting_group(kafka, tmp_path, "assign", ENGINE_STANDBY_REPLICAS="1",
                                                        **SHORT_SESSION)
    changelog = f"{app_id}-counts-changelog"
    first = [f"w{i % 60}" for i in range(3000)]
    second = [f"w{i % 60}" for i in range(1500)]
    try:
        before = await settled(workers, 1)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in first])
        await consume_until(kafka.bootstrap, changelog, lambda rs: sum(latest(rs).values()) == len(first))
        await committed_to_end(kafka.bootstrap, app_id, topic, PARTITIONS, workers.values())
        for worker in workers.values():
            await standbys_caught_up(worker, kafka.bootstrap, changelog)
        # engine status shows the same placement, asked of the broker.
        command = [sys.executable, "-m", "cli.main", "status", "-A", "tests.integration.table_apps:app",
                   "--broker", kafka.url]
        shown = await asyncio.to_thread(subprocess.run, command, cwd=ROOT, capture_output=True, text=True,
                                        env={**os.environ, "ITEST_APP": app_id, "ITEST_TOPIC": topic})
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0] == f"group {app_id}: Stable, 3 members", shown.stdout
        members = [line.split() for line in lines[2:5]]
        assert sorted(tuple(sorted(numbers(m[3]))) for m in members) == sorted(
            tuple(sorted(a[0])) for a in before.values())
        # Store positions as each worker holds them now (asked of its web address), never "-".
        assert all(":" in m[-1] for m in members), shown.stdout
        assert "did not answer" not in shown.stdout
        rows = [line.split() for line in lines[6:6 + PARTITIONS]]
        assert [int(r[0]) for r in rows] == list(range(PARTITIONS))
        assert all(r[-1] == "0" for r in rows), shown.stdout  # everything produced was processed
        killed, survivors = workers["a"], {n: w for n, w in workers.items() if n != "a"}
        replayed_before = {n: replayed(w.output()) for n, w in survivors.items()}
        killed.kill()
        await produce(kafka.bootstrap, topic, [(w, 1) for w in second])
        truth = Counter(first + second)
        records = await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == dict(truth),
                                      timeout=120)
        assert latest(records) == dict(truth)
        after = {n: last_assignment(w) for n, w in survivors.items()}
    finally:
        if workers["a"].process.poll() is None:
            workers["a"].kill()
        for w in list(workers.values())[1:]:
            w.stop()
    moved = before["a"][0]
    for partition in moved:
        holder = next(name for name, (_, standby, _) in before.items() if partition in standby)
        assignment = after[holder]
        assert assignment is not None
        assert partition in assignment[0], f"partition {partition} went elsewhere than its standby"
    tail = sum(replayed(w.output()) - replayed_before[n] for n, w in survivors.items())
    assert tail < 60, f"the standbys replayed {tail} records on failover, not just the tail"


async def test_a_rolling_restart_of_static_members_moves_no_partition(kafka, tmp_path):
    """group_instance_id="auto": each worker, stopped and started again within the session timeout, gets its
    own partitions back; nobody else's assignment changes and no store is rebuilt. The session is 20 s,
    not the default 10: a stop and a start (Python's imports, the group's join) took more than 10 s on a
    machine busy with the rest of the suite, and the group rightly gave the member's partitions away."""
    app_id, topic, worker, workers = await counting_group(kafka, tmp_path, "rolling",
                                                          ENGINE_GROUP_INSTANCE_ID="auto",
                                                          ENGINE_SESSION_TIMEOUT="20")
    changelog = f"{app_id}-counts-changelog"
    words = [f"w{i % 60}" for i in range(3000)]
    try:
        before = await settled(workers, 0)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in words[:1500]])
        await consume_until(kafka.bootstrap, changelog, lambda rs: sum(latest(rs).values()) == 1500)
        assignments = {n: len(ASSIGNMENT.findall(w.output())) for n, w in workers.items()}
        for name in "abc":
            workers[name].stop()
            workers[name] = worker(name)
            await workers[name].wait_for_output("tables ready", 60)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in words[1500:]])
        records = await consume_until(kafka.bootstrap, changelog,
                                      lambda rs: latest(rs) == dict(Counter(words)), timeout=120)
        assert latest(records) == dict(Counter(words))
    finally:
        for w in workers.values():
            if w.process.poll() is None:
                w.stop()
    for name, w in workers.items():
        log = w.output()
        # The restarted worker's own log (appended to the first one's): the assignment it got back.
        assert last_assignment(w) == before[name], (name, last_assignment(w), before[name])
        assert len(ASSIGNMENT.findall(log)) == assignments[name] + 1, f"{name} saw another rebalance"
        assert replayed(log.split("worker " + app_id + " starting")[-1]) < 100, "a store was rebuilt"
