"""Helpers for integration tests: worker processes, and plain aiokafka clients to feed and read topics."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]
# Worker settings of the tests that kill, freeze or block workers: the group gives up on a silent member after
# 3 s (the test broker allows sessions that short) instead of Kafka's 10 s, so each fault costs seconds less.
SHORT_SESSION = {"ENGINE_SESSION_TIMEOUT": "3"}


def engine_cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`engine ARGS` run to its end with `env`: its exit code and output."""
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, env=dict(env),
                          capture_output=True, text=True, timeout=120, check=False)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class WorkerProcess:
    """`engine worker -A ...` as a child process, with its output kept for the failure message."""

    def __init__(self, app: str, broker: str, env: dict[str, str], log: Path,
                 args: Sequence[str] = ()) -> None:
        """Unless `env` names one (ENGINE_DATA_DIR), the worker's data dir is its own, beside its log: a
        worker started again with the same log finds its stores, as a restarted machine would, and two
        workers never share one (an `engine worker` refuses a data dir another one holds). `args`: more
        options of `engine worker` (`--processes 2`)."""
        self.log_path = log
        self._log = log.open("ab")
        data = {"ENGINE_DATA_DIR": str(log.with_suffix(".data"))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker", "-A", app, "--broker", broker,
             "--loglevel", "INFO", *args],
            cwd=ROOT, env={**os.environ, **data, **env}, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def records(self, level: str) -> list[str]:
        """The worker's log records at `level` (ERROR, WARNING), each whole: its first line and the lines
        that continue it (a traceback, asyncio's "future: <Task ...>"), so that a failure message shows
        what the record was about, not only its first line."""
        started = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] ")
        records: list[str] = []
        for line in self.output().splitlines():
            if started.match(line) or not records:
                records.append(line)
            else:
                records[-1] += "\n" + line
        return [record for record in records if f" {level} " in record.split("\n", 1)[0]]

    async def wait_for_output(self, text: str, timeout: float = 60, count: int = 1) -> None:
        """Wait until the worker logged `text` (`count` times); fail early, with its log, if it exited."""
        for _ in range(int(timeout * 10)):
            if self.output().count(text) >= count:
                return
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited:\n{self.output()[-3000:]}")
            await asyncio.sleep(0.1)
        raise AssertionError(f"{text!r} not seen in worker log:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM, and assert a clean exit (code 0), showing the end of the log if not. Once stopped,
        stopping again checks the same exit code."""
        code = self.terminate()
        assert code == 0, f"worker exited with {code}:\n{self.output()[-3000:]}"

    def terminate(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"worker did not stop on SIGTERM:\n{self.output()[-3000:]}") from None
        finally:
            self._log.close()


async def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 4,
                        replication: int = 1, config: Mapping[str, str] | None = None,
                        auth: Mapping[str, Any] | None = None) -> None:
    """(`auth`, here and below: aiokafka's options for a secured broker, as `sasl_auth` gives them.)"""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **(auth or {}))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, replication, topic_configs=dict(config or {}))
                                   for n in names])
    finally:
        await admin.close()


async def delete_topic(bootstrap: str, name: str, timeout: float = 30) -> None:
    """Delete a topic and wait until the broker no longer lists it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([name])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while name in await admin.list_topics():
            if loop.time() > deadline:
                raise AssertionError(f"topic {name!r} still listed {timeout}s after its deletion")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, items: Iterable[tuple[Any, Any]],
                  raw: bool = False, auth: Mapping[str, Any] | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all", **(auth or {}))
    await producer.start()
    try:
        for key, value in items:
            k = key if raw or key is None else str(key).encode()
            v = value if raw else orjson.dumps(value)
            await producer.send(topic, v, key=k)
        await producer.flush()
    finally:
        await producer.stop()


def latest(records: Iterable[Any], upto: Mapping[int, int | None] | None = None) -> dict[str, int]:
    """A counting table's state from its changelog records (in log order per partition): the last value of
    each key; with `upto`, only records at or before each partition's offset (None: none of it)."""
    state: dict[str, int] = {}
    for record in records:
        if upto is not None:
            limit = upto.get(record.partition)
            if limit is None or record.offset > limit:
                continue
        key = record.key.decode()
        if record.value is None:
            state.pop(key, None)
        else:
            state[key] = int(record.value)
    return state


async def until_done(probe: Callable[[], Awaitable[tuple[bool, Any]]], what: str, *, stall: float = 60,
                     longest: float = 600, workers: Iterable[WorkerProcess] = ()) -> None:
    """Poll `probe` (which returns whether the wait is over, and a measure of progress) until it is done;
    fail once the progress stood still for `stall` seconds (a stall: a slow machine only takes longer, up
    to `longest`), naming `what` and showing the end of each worker's log."""
    loop = asyncio.get_running_loop()
    started = moved = loop.time()
    last: Any = None
    while True:
        done, progress = await probe()
        if done:
            return
        now = loop.time()
        if progress != last:
            last, moved = progress, now
        if now - moved > stall or now - started > longest:
            logs = "".join(f"\n--- {w.log_path.name}:\n{w.output()[-3000:]}" for w in workers)
            raise AssertionError(f"{what}: not done after {now - started:.0f}s, {now - moved:.0f}s without "
                                 f"progress (at {progress!r}){logs}")
        await asyncio.sleep(0.5)


def sasl_auth(user: str, password: str) -> dict[str, Any]:
    """aiokafka's options for the secured test broker (SASL_PLAINTEXT, SCRAM-SHA-512)."""
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user, "sasl_plain_password": password}


def sasl_env(user: str, password: str) -> dict[str, str]:
    """The same, as a worker's or a CLI command's ENGINE_* settings."""
    return {"ENGINE_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "ENGINE_SASL_MECHANISM": "SCRAM-SHA-512",
            "ENGINE_SASL_USERNAME": user, "ENGINE_SASL_PASSWORD": password}


def web_address(worker: WorkerProcess) -> str:
    """The worker's web address, as its log says it (`web server at http://host:port ...`)."""
    found = re.search(r"web server at http://(\S+) ", worker.output())
    assert found, worker.output()[-3000:]
    return found.group(1)


async def worker_status(worker: WorkerProcess) -> dict[str, Any] | None:
    """The worker's own `GET /status` (its tasks, its stores' changelog positions), or None if it does not
    answer (yet)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, \
                session.get(f"http://{web_address(worker)}/status") as response:
            return await response.json() if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, AssertionError):
        return None


async def placed_over(workers: Iterable[WorkerProcess], partitions: int) -> None:
    """Wait until every worker has active tasks, together all `partitions` of them, each ready: the group
    settled with all of these members (the state before a test's fault)."""
    members = list(workers)

    async def probe() -> tuple[bool, Any]:
        found = [await worker_status(w) for w in members]
        if any(s is None for s in found):
            return False, None
        actives = [tuple(s["active"]) for s in found if s is not None]
        done = all(actives) and sorted(p for a in actives for p in a) == list(range(partitions)) and not any(
            s["recovering"] for s in found if s is not None)
        return done, actives

    await until_done(probe, f"the group settling over {len(members)} workers", workers=members)


async def beginning_offsets(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Each partition's log start offset."""
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await reader.start()
    try:
        return dict(await reader.beginning_offsets(tps))
    finally:
        await reader.stop()


async def committed_offsets(bootstrap: str, group: str,
                            tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The group's committed offset of each partition it committed."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group, partitions=tps)
        return {tp: meta.offset for tp, meta in found.items() if meta.offset >= 0}
    finally:
        await admin.close()


async def committed_to_end(bootstrap: str, group: str, topic: str, partitions: int,
                           workers: Iterable[WorkerProcess] = ()) -> None:
    """Wait until `group` has committed every partition of `topic` up to its end: everything in it was
    processed and checkpointed (the state a test kills a worker in, to expect exact counts after)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await reader.start()
    try:
        async def probe() -> tuple[bool, Any]:
            ends = await reader.end_offsets(tps)
            committed = await admin.list_consumer_group_offsets(group, partitions=tps)
            behind = sum(ends[tp] - max(committed[tp].offset, 0) if tp in committed else ends[tp]
                         for tp in tps)
            return behind == 0, behind

        await until_done(probe, f"group {group} committing {topic} to its end", workers=workers)
    finally:
        await reader.stop()
        await admin.close()


async def standbys_caught_up(worker: WorkerProcess, bootstrap: str, changelog: str) -> None:
    """Wait until every standby task of `worker` has replayed its partition of `changelog` (the app's only
    table's) up to the last record in it now, as the worker's /status reports its stores' positions. (Up to
    the last record, not the log's end: a transaction's commit marker takes an offset too.)"""
    last: dict[int, int] = {}
    for record in await read_all(bootstrap, changelog):
        last[record.partition] = max(last.get(record.partition, 0), record.offset + 1)

    async def probe() -> tuple[bool, Any]:
        status = await worker_status(worker)
        if status is None or not status["standby"]:
            return False, None
        positions = status["store_positions"]
        behind = {n: last.get(n, 0) - positions.get(str(n), 0) for n in status["standby"]}
        return all(n <= 0 for n in behind.values()), behind

    await until_done(probe, f"the standbys of {worker.log_path.name} catching up", workers=[worker])


async def consume_until(bootstrap: str, topic: str, done: Any, timeout: float = 60.0,
                        isolation_level: str = "read_committed",
                        auth: Mapping[str, Any] | None = None,
                        workers: Iterable[WorkerProcess] = ()) -> list[Any]:
    """Read `topic` from the beginning until `done(records)` is true; returns the records. Committed only,
    by default, as engine reads: changelogs are written in transactions (a killed worker's open one is
    aborted by its successor), and without transactions this is the same as uncommitted. Fails once no
    record came for `timeout` seconds, showing the end of each of `workers`' logs."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=None, enable_auto_commit=False, isolation_level=isolation_level,
                                **(auth or {}))
    await consumer.start()
    records: list[Any] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done(records):
            if loop.time() > deadline:
                logs = "".join(f"\n--- {w.log_path.name}:\n{w.output()[-3000:]}" for w in workers)
                raise AssertionError(f"timed out reading {topic!r}: {len(records)} records so far, none for "
                                     f"{timeout:.0f}s{logs}")
            batches = await consumer.getmany(timeout_ms=500)
            for batch in batches.values():
                if batch:
                    records.extend(batch)
                    deadline = loop.time() + timeout
    finally:
        await consumer.stop()
    return records


async def read_all(bootstrap: str, topic: str, timeout: float = 30.0,
                   isolation_level: str = "read_committed") -> list[Any]:
    """Every record of `topic` up to its current end (all partitions); read_committed (the default, as
    engine reads): up to the last stable offset, without records of aborted or open transactions."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                isolation_level=isolation_level)
    await consumer.start()
    records: list[Any] = []
    try:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            described = await admin.describe_topics([topic])
        finally:
            await admin.close()
        partitions = {p["partition"] for p in described[0]["partitions"]}
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in tps])

        while await behind():
            if loop.time() > deadline:
                raise AssertionError(f"timed out reading {topic!r} to its end")
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records


# Kafka's ACL codes (org.apache.kafka.common.acl / resource), for the secured brokers' tests.
ACL_TOPIC, ACL_GROUP, ACL_CLUSTER, ACL_TRANSACTIONAL_ID = 2, 3, 4, 5
ACL_LITERAL, ACL_PREFIXED = 3, 4
ACL_ALL, ACL_READ, ACL_WRITE, ACL_DESCRIBE, ACL_IDEMPOTENT_WRITE = 2, 3, 4, 8, 12
ACL_ALLOW = 3


async def grant(bootstrap: str, auth: Mapping[str, Any], principal: str,
                acls: Iterable[tuple[int, str, int, int]]) -> None:
    """Allow `principal` (User:name) each (resource type, name, pattern type, operation), as a super user
    (`auth`): aiokafka's admin has no ACL call, so its CreateAcls request goes to a broker directly."""
    from aiokafka.protocol.admin import CreateAclsRequest

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **auth)
    await admin.start()
    try:
        client = admin._client  # the admin's network client (a test harness may use aiokafka's insides)
        node = client.get_random_node()
        for resource, name, pattern, operation in acls:
            response = await client.send(node, CreateAclsRequest(resource, name, pattern, principal, "*",
                                                                 operation, ACL_ALLOW))
            for result in response.creation_responses:
                assert result[0] == 0, f"ACL {resource, name, pattern, operation} refused: {result}"
    finally:
        await admin.close()
