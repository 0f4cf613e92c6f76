"""`engine worker --processes 2` on the real broker: both members join the group and share its partitions;
every key's count is exact against the input, asked over HTTP of either member (the one that does not own
it forwards the query to the one that does); a member SIGKILLed is restarted by the supervisor and the
counts stay exact (at-least-once: killed with everything committed; exactly-once: while it processes, read
committed); SIGTERM to the supervisor stops both members cleanly (exit code 0, everything committed). The
settings are given as `engine worker` options, which reach every member."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter
from typing import Any

import aiohttp
import pytest

from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    committed_to_end,
    consume_until,
    create_topics,
    latest,
    produce,
    unique,
    until_done,
)
from tests.integration.rebalance_run import paced_produce

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def member_address(supervisor: WorkerProcess, index: int) -> str | None:
    """Member `index`'s web address as its latest run logged it (relayed tagged by the supervisor)."""
    found = re.findall(rf"^\[worker {index}\] .*web server at http://(\S+) ", supervisor.output(), re.M)
    return found[-1] if found else None


def member_pid(supervisor: WorkerProcess, index: int) -> int:
    """The pid of member `index`'s latest run, as the supervisor logged its start."""
    found = re.findall(rf"worker {index} started: pid (\d+)", supervisor.output())
    assert found, supervisor.output()[-3000:]
    return int(found[-1])


async def status(session: aiohttp.ClientSession, address: str | None) -> dict[str, Any] | None:
    if address is None:
        return None
    try:
        async with session.get(f"http://{address}/status") as response:
            return await response.json() if response.status == 200 else None
    except aiohttp.ClientError:
        return None


async def shared_by_both(supervisor: WorkerProcess) -> list[str]:
    """Wait until both members' latest runs hold active tasks, together every partition, each ready; their
    web addresses."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        async def probe() -> tuple[bool, Any]:
            found = [await status(session, member_address(supervisor, i)) for i in (0, 1)]
            if any(s is None for s in found):
                return False, None
            actives = [s["active"] for s in found if s is not None]
            held = sorted(n for active in actives for n in active)
            placed = all(actives) and held == list(range(PARTITIONS))
            return placed and not any(s["recovering"] for s in found if s is not None), actives

        await until_done(probe, "both members sharing the partitions", workers=[supervisor])
    return [address for i in (0, 1) if (address := member_address(supervisor, i)) is not None]


async def every_key_from_either_member(addresses: list[str], truth: Counter[str]) -> None:
    """Each member answers every key with its count, some itself and the others forwarded to the other."""
    answered_by: Counter[tuple[str, str]] = Counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for asked in addresses:
            for word, n in truth.items():
                deadline = time.monotonic() + 60
                while True:
                    async with session.get(f"http://{asked}/tables/counts/{word}") as response:
                        answer = (response.status, await response.json())
                    if answer[0] != 503 or time.monotonic() > deadline:  # (503: a partition moving)
                        break
                    await asyncio.sleep(0.2)
                assert (answer[0], answer[1].get("value")) == (200, n), answer
                answered_by[(asked, answer[1]["worker"])] += 1
    assert all(answered_by[(x, y)] > 0 for x in addresses for y in addresses), answered_by


async def killed_and_restarted(supervisor: WorkerProcess, index: int) -> None:
    """SIGKILL member `index` and wait until the supervisor said so and started it again."""
    pid = member_pid(supervisor, index)
    os.kill(pid, signal.SIGKILL)
    await supervisor.wait_for_output(f"worker {index} (pid {pid}) was killed by SIGKILL")
    await supervisor.wait_for_output(f"worker {index} started", count=2)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_two_processes_share_the_group_survive_a_killed_member_and_stop_cleanly(kafka, tmp_path,
                                                                                      guarantee):
    app_id, topic = unique("procs"), unique("words")
    await create_topics(kafka.bootstrap, [topic], PARTITIONS)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, **SHORT_SESSION}
    # The settings as command-line options, which the supervisor passes on to its members (those that set
    # a member apart, its data dir and web port, in its environment).
    options = ["--processes", "2", "--processing-guarantee", guarantee, "--web-port", "0", "--data-dir",
               str(tmp_path / "data")]
    supervisor = WorkerProcess("tests.integration.table_apps:app", kafka.url, env, tmp_path / "procs.log",
                               args=options)
    changelog = f"{app_id}-counts-changelog"
    try:
        addresses = await shared_by_both(supervisor)
        first = [f"w{(i * 7) % 50}" for i in range(2000)]
        await produce(kafka.bootstrap, topic, [(w, 1) for w in first])
        await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == Counter(first), timeout=90,
                            workers=[supervisor])
        await every_key_from_either_member(addresses, Counter(first))

        second = [f"w{(i * 11) % 50}" for i in range(3000)]
        truth = Counter(first + second)
        if guarantee == "at_least_once":  # killed with nothing in flight: at-least-once loses nothing then
            await committed_to_end(kafka.bootstrap, app_id, topic, PARTITIONS, workers=[supervisor])
            await killed_and_restarted(supervisor, 1)
            await produce(kafka.bootstrap, topic, [(w, 1) for w in second])
        else:  # killed while its tasks' transactions are open
            kill = asyncio.Event()
            producing = asyncio.ensure_future(paced_produce(
                kafka.bootstrap, topic, [(w, 1) for w in second], rate=1000, at={0.3: kill.set}))
            await kill.wait()
            await killed_and_restarted(supervisor, 1)
            await producing
        await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == truth, timeout=90,
                            workers=[supervisor])
        await every_key_from_either_member(await shared_by_both(supervisor), truth)
    finally:
        code = supervisor.terminate(timeout=60)
    assert code == 0, supervisor.output()[-3000:]
    log = supervisor.output()
    for index in (0, 1):
        assert re.search(rf"worker {index} \(pid {member_pid(supervisor, index)}\) stopped with exit code 0",
                         log), log[-3000:]
    assert "2 of 2 worker processes stopped cleanly" in log
    await committed_to_end(kafka.bootstrap, app_id, topic, PARTITIONS)  # (each member's final checkpoint)
