"""End-to-end latency: from an input record's send to its output record's arrival, at fixed rates.

    .venv/bin/python -m benchmarks.latency [--rates 500,2000,10000] [--seconds 30] [--warmup 5] [--linger 0]

For each rate and each contender (benchmarks/peers/latency_job.py, a subprocess on its own 4-partition
topics): a producer sends `rate` events/s, each carrying the wall-clock time it was sent, for `warmup`
seconds, then, once the contender has processed all of those (it has started and caught up), `seconds`
more; a separate consumer (read_committed) reads the output and takes, for each
event of the measured part, the time it arrived minus the time it was sent. Contenders: a raw aiokafka
consume-produce loop; an engine passthrough agent; an engine agent counting into a table; a fused
pipeline counting into a table (`app.stream(source).map(...).count(...)`: no output topic); both engine
agents under exactly_once with a 100 ms commit interval (their output is visible when the transaction
commits). Reported per contender and rate: p50, p99, p99.9 and max in ms, the events measured, and each
engine contender's p99 minus raw's; then the same from each event's send to the moment the contender
processed it (noted by the job itself: the raw loop's and the agents' hands, the pipeline's map), which is
what a pipeline, whose result is its table, is compared by.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from benchmarks.common import broker, create_topics, parser
from engine.errors import TransportError
from engine.transport import open_transport

if TYPE_CHECKING:
    from engine.transport.base import Admin

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = {
    "raw aiokafka": {"BENCH_MODE": "raw"},
    "engine": {"BENCH_MODE": "engine"},
    "engine + table": {"BENCH_MODE": "engine-table"},
    "engine pipeline": {"BENCH_MODE": "engine-pipeline"},
    "engine, exactly_once": {"BENCH_MODE": "engine", "BENCH_GUARANTEE": "exactly_once",
                             "BENCH_COMMIT": "0.1"},
    "engine + table, exactly_once": {"BENCH_MODE": "engine-table", "BENCH_GUARANTEE": "exactly_once",
                                     "BENCH_COMMIT": "0.1"},
}
PARTITIONS = 4


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def produce(bootstrap: str, topic: str, rate: float, seconds: float, measured: bool, start: int) -> int:
    """Send `rate` events/s for `seconds`, each stamped with the time it is sent; returns how many."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    sent = 0
    try:
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                i = start + sent
                value = orjson.dumps({"id": i, "t": time.time(), "m": measured})
                await producer.send(topic, value, key=f"k{i % 1000}".encode())
                sent += 1
            await asyncio.sleep(0.001)
        await producer.flush()
    finally:
        await producer.stop()
    return sent


async def collect(bootstrap: str, topic: str, latencies: list[float], stop: asyncio.Event,
                  seen: list[int]) -> None:
    """Read the output: each measured event's latency into `latencies`; `seen[0]` counts every record."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, fetch_max_wait_ms=5)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=50)).values():
                now = time.time()
                seen[0] += len(records)
                for record in records:
                    value = orjson.loads(record.value)
                    if value["m"]:
                        latencies.append((now - value["t"]) * 1000)
    finally:
        await consumer.stop()


def start_job(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "benchmarks.peers.latency_job"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


async def all_committed(admin: Admin, group: str, topic: str, count: int, deadline: float) -> None:
    """Return once `group` committed `count` records of `topic` (over its partitions), or at `deadline`:
    what a job without output topic is waited for by."""
    while time.monotonic() < deadline:
        try:
            committed = await admin.committed(group)
        except TransportError:  # (the group not there yet)
            committed = {}
        if sum(offset for tp, offset in committed.items() if tp.topic == topic) >= count:
            return
        await asyncio.sleep(0.2)


async def run_one(bootstrap: str, name: str, env: dict[str, str], rate: float, seconds: float,
                  warmup: float) -> tuple[list[float], list[float], int]:
    """Output latencies (none for a job without output), processed latencies, and how many were sent."""
    app_id = f"latency-{uuid.uuid4().hex[:8]}"
    source, out = f"{app_id}-in", f"{app_id}-out"
    await create_topics(bootstrap, [source, out], PARTITIONS)
    work = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    job_env = {**os.environ, "BENCH_BOOTSTRAP": bootstrap, "BENCH_GROUP": app_id, "BENCH_TOPIC": source,
               "BENCH_OUT_TOPIC": out, "BENCH_STATE_DIR": str(work), **env}
    process = start_job(job_env, work / "job.log")
    latencies: list[float] = []
    seen = [0]
    stop = asyncio.Event()
    collector = asyncio.ensure_future(collect(bootstrap, out, latencies, stop, seen))
    pipeline = env["BENCH_MODE"] == "engine-pipeline"  # (no output: its group's commits say what it did)
    admin = open_transport(f"kafka://{bootstrap}").admin()
    try:
        warm = await produce(bootstrap, source, rate, warmup, False, 0)
        # Measured from a job that caught up with its warm-up: a job still starting (its group joining, its
        # table's changelog created) would otherwise hold the first measured events back, and its start
        # would read as the latency of its running.
        deadline = time.monotonic() + 60
        if pipeline:
            await all_committed(admin, app_id, source, warm, deadline)
        else:
            while seen[0] < warm and time.monotonic() < deadline:  # noqa: ASYNC110  # a count going up
                await asyncio.sleep(0.05)
        sent = await produce(bootstrap, source, rate, seconds, True, warm)
        deadline = time.monotonic() + 30
        if pipeline:
            await all_committed(admin, app_id, source, warm + sent, deadline)
        else:
            while len(latencies) < sent and time.monotonic() < deadline:  # noqa: ASYNC110  # a list filling up
                await asyncio.sleep(0.2)
    finally:
        stop.set()
        await collector
        await admin.close()
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    noted = work / "processed.json"
    processed = orjson.loads(noted.read_bytes()) if noted.exists() else []
    if process.returncode != 0:
        print(f"  {name}: its job exited with {process.returncode}; its log: {work / 'job.log'}")
        return latencies, processed, sent
    shutil.rmtree(work, ignore_errors=True)  # (kept when the run failed: its job's log is there)
    return latencies, processed, sent


async def run(bootstrap: str, rates: list[float], seconds: float, warmup: float) -> None:
    for rate in rates:
        print(f"\n{rate:g} events/s for {seconds:g} s (after {warmup:g} s of warm-up):")
        results = {name: await run_one(bootstrap, name, env, rate, seconds, warmup)
                   for name, env in CONTENDERS.items()}
        for kind, which in (("to the output's arrival", 0), ("to the event processed", 1)):
            print(f" {kind}:")
            raw_p99 = None
            for name, result in results.items():
                sent = result[2]
                ordered = sorted(result[which])
                if not ordered:
                    print(f"  {name:30} nothing measured of {sent} events")
                    continue
                p99 = percentile(ordered, 0.99)
                raw_p99 = p99 if name == "raw aiokafka" else raw_p99
                versus = ("" if raw_p99 is None or name == "raw aiokafka"
                          else f"; p99 - raw's: {p99 - raw_p99:+.1f} ms")
                print(f"  {name:30} p50 {percentile(ordered, 0.5):7.1f} ms  p99 {p99:7.1f} ms  "
                      f"p99.9 {percentile(ordered, 0.999):7.1f} ms  max {ordered[-1]:7.1f} ms  "
                      f"({len(ordered)}/{sent} measured){versus}")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rates", default="500,2000,10000")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--warmup", type=float, default=5)
    p.add_argument("--linger", type=float, help="engine's producer_linger in seconds (default: its own, 0)")
    args = p.parse_args()
    if args.linger is not None:
        os.environ["ENGINE_PRODUCER_LINGER"] = str(args.linger)  # read by the engine contenders
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a new topic's first requests retry: not news
    with broker(args.broker) as bootstrap:
        asyncio.run(run(bootstrap, [float(r) for r in args.rates.split(",")], args.seconds, args.warmup))


if __name__ == "__main__":
    main()
