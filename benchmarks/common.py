"""Shared by the benchmarks: a broker (ours from tests/kafka unless --broker is given), preloading, and
running a peer job (benchmarks/peers) as a subprocess."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """Yield a bootstrap address: the given one, or a fresh single broker started for this run.

    A broker we start is pinned to the last core and this process to the first, so that the Python side
    of every job (raw or engine) gets one core to itself and the ratios are not at the mercy of the JVM.
    """
    if bootstrap:
        yield bootstrap
        return
    from tests.kafka.broker import KafkaCluster

    cores = sorted(os.sched_getaffinity(0))
    pinned = len(cores) > 1
    with KafkaCluster(1, heap="1g", cpus=str(cores[-1]) if pinned else None, peak=True) as cluster:
        if pinned:
            os.sched_setaffinity(0, {cores[0]})
        yield cluster.bootstrap


async def address_of(log: Path, timeout: float = 120) -> str:
    """`host:port` of the web server a worker logging to `log` said it listens on (ENGINE_WEB_PORT=0)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = await asyncio.to_thread(log.read_text, errors="replace")
        found = re.search(r"web server at http://(\S+) ", text)
        if found:
            return found.group(1)
        await asyncio.sleep(0.2)
    raise RuntimeError(f"no web address in {log}")


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--broker", help="host:port of a running Kafka (default: start one)")
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=4)
    return p


async def create_topics(bootstrap: str, names: list[str], partitions: int,
                        configs: Mapping[str, str] | None = None) -> None:
    """Create `names` with `partitions` each (and `configs`, e.g. cleanup.policy=compact for a table's)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1, topic_configs=dict(configs or {}))
                                   for n in names])
    finally:
        await admin.close()


async def send_records(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> float:
    """Every (key, value) of `records` produced to `topic`, batched; the seconds it took."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1024 * 1024,
                                max_request_size=16 * 1024 * 1024)
    await producer.start()
    started = time.perf_counter()
    try:
        for key, value in records:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()
    return time.perf_counter() - started


def json_event(i: int, keys: int = 1000) -> tuple[bytes, bytes]:
    """Event `i` of the JSON benchmarks (~57 bytes), keyed by its user, one of `keys`."""
    value = orjson.dumps({"id": i, "user": f"user-{i % keys}", "amount": i % 97, "ok": True})
    return str(i % keys).encode(), value


async def preload(bootstrap: str, topic: str, count: int) -> float:
    return await send_records(bootstrap, topic, (json_event(i) for i in range(count)))


def run_job(module: str, bootstrap: str, topic: str, count: int, *, group: str | None = None,
            timeout: float = 600, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Run a benchmarks.peers job as a subprocess (`env`: its own variables, such as BENCH_MODE); its report,
    or None (with its log) if it failed."""
    name = module.rsplit(".", 1)[-1]
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    out = workdir / "result.json"
    env = {**os.environ, **(env or {}), "BENCH_BOOTSTRAP": bootstrap, "BENCH_TOPIC": topic,
           "BENCH_COUNT": str(count), "BENCH_GROUP": group or f"{name}-{uuid.uuid4().hex[:8]}",
           "BENCH_OUT": str(out), "BENCH_STATE_DIR": str(workdir / "state")}
    started = time.perf_counter()
    with (workdir / "log.txt").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", module], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[1])
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if not out.exists():
        tail = (workdir / "log.txt").read_text(errors="replace")[-1500:]
        print(f"  {name}: no result after {time.perf_counter() - started:.0f}s (its files kept in "
              f"{workdir}); log tail:\n{tail}")
        return None
    result: dict[str, Any] = json.loads(out.read_text())
    shutil.rmtree(workdir, ignore_errors=True)  # its stores: a benchmark run leaves no state behind
    return result


def available(module: str) -> bool:
    """Whether a peer framework is importable (they live in .venv-bench only)."""
    try:
        __import__(module)
    except ImportError:
        print(f"  {module} is not installed here: run `bash benchmarks/setup.sh` and use .venv-bench")
        return False
    return True
