"""The streams rebalance protocol (KIP-1071) through `engine worker` on the real broker: a worker joining a
running one takes only some tasks, within a heartbeat interval of its start (the members ask each other to
heartbeat at once), and the first worker stops only those (it never sets up again the tasks it keeps), which
Kafka's own kafka-streams-groups.sh shows with each worker's standbys; an app moves from the classic
protocol to the streams one and back, its counts exact throughout; a group that runs the other protocol is
refused with the line that says what to do. Ground truth: every count and every closed window, computed from
the input (tests.integration.rebalance_run)."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections import Counter
from datetime import datetime

import pytest

from tests.integration.helpers import WorkerProcess, create_topics, unique, until_done, worker_status
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import outputs, paced_produce, wait_until_complete, words
from tests.kafka.broker import resolve_jars

pytestmark = pytest.mark.kafka


def worker(kafka, tmp_path, name: str, env: dict[str, str], protocol: str) -> WorkerProcess:
    return WorkerProcess("tests.integration.rebalance_apps:app", kafka.url,
                         {**env, "ENGINE_GROUP_PROTOCOL": protocol}, tmp_path / f"{name}.log")


def partitions_in(line: str) -> set[int]:
    """The partition numbers a task manager's "assigned"/"revoked N partitions: topic[0, 1]" line names."""
    return {int(p) for group in re.findall(r"\[([\d, ]+)\]", line) for p in group.split(",")}


def lines(output: str, what: str) -> list[str]:
    return [line for line in output.splitlines() if f"engine.tasks.manager: {what} " in line]


def logged_at(line: str) -> datetime:
    """When a worker logged `line` (its "[2026-11-26 22:02:45,264] INFO ..." stamp)."""
    return datetime.strptime(line[1:line.index("]")], "%Y-%m-%d %H:%M:%S,%f")


# The group's heartbeat interval is a third of the session timeout: 15 s here, the most the broker allows.
# A member hears of its tasks only in a heartbeat's answer, so without the members asking each other to beat
# at once a joining worker would get its tasks no sooner than one interval after it joined (the first
# worker revokes them at its own next beat, and the second hears it at its next).
LONG_HEARTBEATS = {"ENGINE_SESSION_TIMEOUT": "45"}
HEARTBEAT_INTERVAL = 15.0


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_a_joining_worker_takes_some_tasks_and_only_those_stop(kafka, tmp_path, guarantee):
    app_id, topic = unique("streams"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(16_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee,
           "ENGINE_STANDBY_REPLICAS": "1", **LONG_HEARTBEATS}
    first = worker(kafka, tmp_path, "first", env, "streams")
    second: WorkerProcess | None = None
    try:
        await first.wait_for_output("tables ready", 90)
        assert "streams group protocol" in first.output()

        def join() -> None:
            nonlocal second
            second = worker(kafka, tmp_path, "second", env, "streams")

        await paced_produce(kafka.bootstrap, topic, events, rate=4000, at={0.3: join})
        assert second is not None
        await second.wait_for_output("tables ready", 90)
        counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, workers=[first, second])
        status = await worker_status(first)
        described = await kafka_streams_groups(kafka.bootstrap, app_id)
        # (Read before the first worker stops: its leaving gives the second its tasks, which it logs.)
        taken_log = second.output()
    finally:
        assert first.terminate() == 0, first.output()[-3000:]
        if second is not None:
            assert second.terminate() == 0, second.output()[-3000:]
    check(events, counts, closes, exact=guarantee == "exactly_once")

    # The first worker gave up what the second took, in one revoke, and set nothing up again: the tasks it
    # kept went on throughout (the classic protocol revokes and assigns every one of them).
    revokes = lines(first.output(), "revoked")
    assigns_after = lines(first.output().split("tables ready", 1)[1], "assigned")
    assert len(revokes) == 1, revokes
    moved = partitions_in(revokes[0])
    taken = set().union(*(partitions_in(line) for line in lines(taken_log, "assigned")))
    assert moved == taken, (revokes, lines(taken_log, "assigned"))
    assert assigns_after == [], f"the first worker set up tasks again: {assigns_after}"
    assert status is not None
    assert set(status["active"]) == set(range(4)) - moved, status

    # The second worker had its tasks well within one heartbeat interval of its start: asked to beat at once,
    # the first revoked them and then asked the second to beat.
    started = logged_at(next(line for line in second.output().splitlines() if "starting worker" in line))
    given = logged_at(lines(second.output(), "assigned")[0])
    assert (given - started).total_seconds() < HEARTBEAT_INTERVAL, (started, given)

    # Kafka's own tool lists both workers, each with its active tasks (subtopology 0: engine's task p is
    # "0:[p]") and, one standby replica asked, the other's as its standbys.
    members = [line for line in described.splitlines()[1:] if line.strip()]
    assert len(members) == 2, described
    kept = set(range(4)) - moved
    shown = {f" ACTIVE: {_tasks(active)}; STANDBY: {_tasks(standby)};"
             for active, standby in ((moved, kept), (kept, moved))}
    assert {next((s for s in shown if s in line), line) for line in members} == shown, described


def _tasks(tasks: set[int]) -> str:
    """Tasks as kafka-streams-groups.sh shows them: subtopology 0's, "0:[1,3]"."""
    return "0:[" + ",".join(map(str, sorted(tasks))) + "]"


async def kafka_streams_groups(bootstrap: str, group: str) -> str:
    """What `kafka-streams-groups.sh --describe --group <group> --members --verbose` prints (Kafka's own
    StreamsGroupCommand, from the test broker's jars)."""
    tool = await asyncio.create_subprocess_exec(
        "java", "-cp", f"{resolve_jars()}/*", "org.apache.kafka.tools.streams.StreamsGroupCommand",
        "--bootstrap-server", bootstrap, "--describe", "--group", group, "--members", "--verbose",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    shown = (await asyncio.wait_for(tool.communicate(), 120))[0].decode()
    assert tool.returncode == 0, shown
    return shown


@pytest.mark.parametrize("guarantee", ["exactly_once"])
async def test_an_app_moves_from_the_classic_protocol_to_streams_and_back(kafka, tmp_path, guarantee):
    """Kafka's offline migration: every worker of one protocol stopped, then the other's started; committed
    offsets (and the tables' changelogs) stay with the group id, so the counts go on exact."""
    app_id, topic = unique("migrate"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(9_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee}
    thirds = [events[:3000], events[3000:6000], events[6000:]]
    for step, protocol in enumerate(["classic", "streams", "classic"]):
        current = worker(kafka, tmp_path, f"{protocol}-{step}", env, protocol)
        try:
            await current.wait_for_output("tables ready", 90)
            assert f"{protocol} group protocol" in current.output()
            await paced_produce(kafka.bootstrap, topic, thirds[step], rate=6000)
            if step < 2:  # (the last third ends with each key's closing word: the windows close)
                sent = Counter(key for part in thirds[:step + 1] for key, _ in part)
                await _counts_reach(kafka.bootstrap, app_id, dict(sent))
            else:
                counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, workers=[current])
        finally:
            assert current.terminate() == 0, current.output()[-3000:]
    check(events, counts, closes, exact=True)


async def _counts_reach(bootstrap: str, app_id: str, truth: dict[str, int]) -> None:
    async def probe() -> tuple[bool, object]:
        counts, _ = await outputs(bootstrap, app_id)
        return counts == truth, counts

    await until_done(probe, f"the counts of {app_id} reaching the input's")


async def test_a_group_of_the_other_protocol_is_refused_with_what_to_do(kafka, tmp_path):
    """A worker asked for the streams protocol while a classic worker runs the group stops with one line
    naming what to do; with `auto` it joins as classic, and says why. A classic worker while a streams one
    runs the group is refused too."""
    app_id, topic = unique("refused"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic}
    classic = worker(kafka, tmp_path, "classic", env, "classic")
    try:
        await classic.wait_for_output("tables ready", 90)
        streams = worker(kafka, tmp_path, "streams", env, "streams")
        assert streams.process.wait(90) != 0
        assert f"group {app_id!r} is a live group of the classic protocol" in streams.output()
        assert "must all stop before the app starts with group_protocol=streams" in streams.output()
        auto = worker(kafka, tmp_path, "auto", env, "auto")
        try:
            await auto.wait_for_output("tables ready", 90)
            assert "classic group protocol" in auto.output()
            assert "group protocol: classic, not streams" in auto.output()
        finally:
            assert auto.terminate() == 0, auto.output()[-3000:]
    finally:
        assert classic.terminate() == 0, classic.output()[-3000:]

    app_id = unique("refused")
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic}
    streams = worker(kafka, tmp_path, "streams-2", env, "streams")
    try:
        await streams.wait_for_output("tables ready", 90)
        late = worker(kafka, tmp_path, "classic-2", env, "classic")
        assert late.process.wait(90) != 0
        assert f"group {app_id!r} is a streams group" in late.output(), late.output()[-3000:]
    finally:
        assert streams.terminate() == 0, streams.output()[-3000:]
