"""Start-up: time from starting a worker process to its first record in hand, against a raw aiokafka
consumer's, on a new group and on an existing one (restarted with its data dir).

    .venv/bin/python -m benchmarks.startup [--rounds 3]

Each round and contender (benchmarks/peers/startup_job.py) gets a fresh group on a 4-partition topic holding
100 records: the time from spawning the process to its printing that it has the first record is "new
group". The process then stops (SIGTERM, after its offsets are committed), 10 more records are sent, and
the same group starts again on the same data dir: "existing group". Both include the interpreter's start
and imports, as a user sees them. Medians over rounds, and engine minus raw.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

from benchmarks.common import broker, create_topics, median, parser

ROOT = Path(__file__).resolve().parents[1]


async def send(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, orjson.dumps({"id": i}), key=f"k{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()


async def time_to_first(env: dict[str, str]) -> float:
    """Spawn the job, return the seconds until it reports its first record, then stop it."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.peers.startup_job", cwd=ROOT, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert process.stdout is not None
    try:
        while True:
            line = await asyncio.wait_for(process.stdout.readline(), 120)
            if not line:
                raise RuntimeError(f"{env['BENCH_MODE']} exited before its first record")
            if line.strip() == b"first":
                took = time.monotonic() - started
                break
        await asyncio.sleep(2)  # its offsets get committed
        return took
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()


async def run(bootstrap: str, rounds: int) -> None:
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for mode in ("raw", "engine"):
            group = f"startup-{uuid.uuid4().hex[:8]}"
            topic = f"{group}-in"
            await create_topics(bootstrap, [topic], 4)
            await send(bootstrap, topic, 100)
            env = {"BENCH_MODE": mode, "BENCH_BOOTSTRAP": bootstrap, "BENCH_GROUP": group,
                   "BENCH_TOPIC": topic, "BENCH_STATE_DIR": tempfile.mkdtemp(prefix="bench-startup-")}
            new = await time_to_first(env)
            await send(bootstrap, topic, 10)
            existing = await time_to_first(env)
            shutil.rmtree(env["BENCH_STATE_DIR"], ignore_errors=True)
            for kind, took in (("new group", new), ("existing group", existing)):
                results.setdefault(mode, {}).setdefault(kind, []).append(took)
            print(f"  {mode:7} new group {new:.2f} s, existing group {existing:.2f} s")
    for kind in ("new group", "existing group"):
        raw, eng = median(results["raw"][kind]), median(results["engine"][kind])
        print(f"median, {kind}: raw aiokafka {raw:.2f} s, engine {eng:.2f} s; "
              f"engine - raw {eng - raw:+.2f} s")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a new topic's first sends retry: not news
    with broker(args.broker) as bootstrap:
        asyncio.run(run(bootstrap, args.rounds))


if __name__ == "__main__":
    main()
