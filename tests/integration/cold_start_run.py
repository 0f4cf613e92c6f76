"""A cold start of a group with big state (the scenario of test_cold_start.py and benchmarks/cold_start.py).

A first run of the counting app (table_apps.py: `counts[word] += n`) over `keys` distinct keys, a tenth of
them twice, builds the table and its changelog as engine writes them; it stops. Then three workers start at
once, each with an empty data dir, so each restores its partitions from the changelog while the group
rebalances around it (the first to join gets every partition and starts restoring; each later join moves
some away). Measured: seconds from spawning the three to the group settled (every worker running, every
partition active somewhere, none recovering), the assignments each heard, whose restore a rebalance
interrupted and who restored as a warm-up replica first. Checked: no worker exited, and the table read
through the workers' web servers (`GET /tables/counts`, pages of 10,000) equals the truth counted here from
the input.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from tests.integration.helpers import (
    WorkerProcess,
    committed_to_end,
    create_topics,
    placed_over,
    produce,
    unique,
    web_address,
)

if TYPE_CHECKING:
    from pathlib import Path

PARTITIONS = 6
WORKERS = 3
PAGE = 10_000


@dataclass
class ColdStart:
    keys: int
    first_run: float  # seconds the first run took to process the input (produced to committed)
    ready: float  # seconds from spawning the three workers to the group settled over them
    assignments: dict[str, int]  # assignments each worker heard before the group settled
    rebalanced_while_restoring: list[str]  # the workers whose restore a rebalance interrupted
    replayed: dict[str, int]  # changelog records each worker replayed as an active task's restore
    warmed_up: list[str]  # the workers that restored partitions as warm-up replicas first (KIP-441)


def truth_of(keys: int) -> Counter[str]:
    return Counter({f"k{i:07d}": i % 5 + 1 + (1 if i % 10 == 0 else 0) for i in range(keys)})


def inputs(keys: int) -> list[tuple[str, int]]:
    """Every key once with i % 5 + 1, then every tenth key again with 1."""
    return [(f"k{i:07d}", i % 5 + 1) for i in range(keys)] + [(f"k{i:07d}", 1) for i in range(0, keys, 10)]


def worker(url: str, app_id: str, topic: str, log: Path) -> WorkerProcess:
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic}  # the data dir: its own, new, beside its log
    return WorkerProcess("tests.integration.table_apps:app", url, env, log)


async def cold_start(bootstrap: str, url: str, tmp_path: Path, keys: int) -> ColdStart:
    app_id, topic = unique("cold"), unique("words")
    await create_topics(bootstrap, [topic], partitions=PARTITIONS)
    first = worker(url, app_id, topic, tmp_path / "first.log")
    try:
        await first.wait_for_output("tables ready", 90)
        started = time.monotonic()
        await produce(bootstrap, topic, inputs(keys))
        await committed_to_end(bootstrap, app_id, topic, PARTITIONS, workers=[first])
        first_run = time.monotonic() - started
    finally:
        first.stop()
    spawned = time.monotonic()
    workers = [worker(url, app_id, topic, tmp_path / f"cold-{n}.log") for n in range(1, WORKERS + 1)]
    try:
        await placed_over(workers, PARTITIONS)
        ready = time.monotonic() - spawned
        assert [w.log_path.name for w in workers if w.process.poll() is not None] == []
        table = await read_table(workers[0])
    finally:
        for w in workers:
            w.stop()
    truth = truth_of(keys)
    assert len(table) == len(truth), f"{len(table)} keys read, {len(truth)} in the input"
    assert {k: v for k, v in table.items() if truth.get(k) != v} == {}, "each value as counted"
    return ColdStart(keys, first_run, ready,
                     {w.log_path.name: w.output().count("tasks.manager: assignment: ") for w in workers},
                     [w.log_path.name for w in workers if restore_interrupted(w)],
                     {w.log_path.name: replayed(w) for w in workers},
                     [w.log_path.name for w in workers if "warm-up replicas of partitions" in w.output()])


async def read_table(asked: WorkerProcess) -> dict[str, Any]:
    """The whole counts table, page by page, from one worker (it asks the others for their partitions)."""
    found: dict[str, Any] = {}
    start: str | None = ""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        while start is not None:
            params = {"limit": str(PAGE), **({"from": start} if start else {})}
            async with session.get(f"http://{web_address(asked)}/tables/counts", params=params) as response:
                body = await response.json()
                if response.status == 503:  # a partition moving: the group settled, so not for long
                    await asyncio.sleep(0.5)
                    continue
                assert response.status == 200, body
            found.update((entry["key"], entry["value"]) for entry in body["entries"])
            start = body["next"]
    return found


def restore_interrupted(worker: WorkerProcess) -> bool:
    """Whether the worker's partitions were revoked while it was restoring them (between an assignment and
    its "tables ready")."""
    restoring = False
    for line in worker.output().splitlines():
        if "engine.tasks.manager: assigned " in line:
            restoring = True
        elif "tables ready" in line:
            restoring = False
        elif "engine.tasks.manager: revoked " in line and restoring:
            return True
    return False


def replayed(worker: WorkerProcess) -> int:
    """Changelog records the worker replayed (its "recovered ...: replayed N records" lines)."""
    return sum(int(line.rsplit("replayed ", 1)[1].split()[0]) for line in worker.output().splitlines()
               if ": replayed " in line and "recovered " in line)
