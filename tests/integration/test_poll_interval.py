"""A worker of two that stalls past the group's poll interval (`max_poll_interval`, 2 s here), events
flowing, both guarantees, against ground truth computed from the input:
- its event loop blocked by an agent (a blocking call) within the session timeout (10 s): aiokafka's heartbeat
  runs on the blocked loop, and its poll-interval check counts from the last fetch that ended, while engine's
  fetch loop was usually waiting in one: nothing moves, the worker goes on where it stood (caught outside a
  fetch, aiokafka leaves the group as the loop wakes: then the partitions move and come back cleanly);
- an agent awaiting one event that long without blocking the loop: its mailbox fills (kept small here) and
  backpressure pauses every partition of its worker, while the fetch loop goes on asking (for none), and
  each exactly-once checkpoint waits for the agent at its gate, a wait that counts as a fetch: the group
  must take neither for a stall, and nothing moves either;
- its loop blocked past the session timeout too: the group gives its partitions to the other worker, which
  goes on with them; the stalled worker says it lost them, drops their uncommitted work and rejoins.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.helpers import SHORT_SESSION, WorkerProcess, create_topics, placed_over, unique
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import paced_produce, wait_until_complete, words

pytestmark = pytest.mark.kafka

POLL = {"ENGINE_MAX_POLL_INTERVAL": "2"}
STALL = "1:40:6"  # partition 1, offset 40: 6 s


@pytest.mark.parametrize(("guarantee", "stall"), [
    ("exactly_once", "blocked loop"),
    ("at_least_once", "blocked loop"),
    ("exactly_once", "awaiting agent"),
    ("exactly_once", "blocked past the session"),
    ("at_least_once", "blocked past the session"),
])
async def test_a_worker_stalled_past_the_poll_interval(kafka, tmp_path, guarantee, stall):
    app_id, topic = unique("poll"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(4_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee, **POLL}
    if stall == "awaiting agent":
        # (the classic protocol's consumer is the one that checks its poll interval: engine's streams-group
        # member leaves a stalled worker to the session timeout)
        env.update(ITEST_STUCK=STALL, ENGINE_MAILBOX_SIZE="50", ENGINE_GROUP_PROTOCOL="classic")
    else:  # once in all: the worker that takes the partition over must not block on it again
        env.update(ITEST_BLOCK=STALL, ITEST_BLOCK_ONCE=str(tmp_path / "blocked"))
    if stall == "blocked past the session":
        env.update(SHORT_SESSION)
    workers = [WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env, tmp_path / f"{name}.log")
               for name in ("one", "two")]
    try:
        for worker in workers:
            await worker.wait_for_output("tables ready", 90)
        await placed_over(workers, 4)
        placed = [worker.output().count("assigned ") for worker in workers]
        await paced_produce(kafka.bootstrap, topic, events, rate=1000)
        counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, timeout=60,
                                                   workers=workers)
        if stall == "blocked past the session":
            # The stalled worker rejoined and has partitions again (under the streams protocol they come
            # once the other worker gave them up, after the outputs may be complete).
            await placed_over(workers, 4)
        assert [worker.process.poll() for worker in workers] == [None, None], "both still running"
        # (read before the workers stop: the first one stopping gives its partitions to the other)
        running = [worker.output() for worker in workers]
        reassigned = [log.count("assigned ") for log in running] != placed
    finally:
        codes = [worker.terminate(timeout=60) for worker in workers]
    logs = [worker.output() for worker in workers]
    assert codes == [0, 0], [log[-3000:] for log in logs]
    check(events, counts, closes, exact=guarantee == "exactly_once")
    stalled = next(n for n, log in enumerate(logs) if f"count at {topic}[1]@40" in log)  # (said then)
    # (the moves while they ran: the logs read before the stop, without its hand-over)
    if stall == "blocked past the session":
        assert moved_cleanly(running, placed, stalled, topic), "partition 1 moved to the other worker"
    elif stall == "awaiting agent":
        assert not reassigned, running[stalled][-3000:]
    elif reassigned:
        # A blocked loop that caught the fetch loop outside its fetch (delivering a batch, or at a
        # checkpoint's gate): past the poll interval aiokafka leaves the group as the loop wakes.
        moved_cleanly(running, placed, stalled, topic)


def moved_cleanly(logs: list[str], placed: list[int], stalled: int, topic: str) -> bool:
    """The stalled worker said it lost its partitions and rejoined; whether the other one took partition 1
    meanwhile."""
    after = logs[stalled].split(f"{topic}[1]@40", 1)[1]
    assert re.search(r"WARNING .*lost \d+ partitions \(", after), after
    assert "assigned " in after, "the stalled worker rejoined"
    other = 1 - stalled
    taken = re.compile(rf"\d+ partitions: {re.escape(topic)}\[[0-9, ]*1[0-9, ]*\]")
    return any(taken.match(move) for move in logs[other].split("assigned ")[placed[other] + 1:])
