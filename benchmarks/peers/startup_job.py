"""A contender of benchmarks/startup.py: prints `first` when it has the first record of BENCH_TOPIC in hand,
then runs until SIGTERM.

BENCH_MODE: `raw` (an aiokafka consumer in group BENCH_GROUP, committing as it goes) or `engine` (an agent
under `engine.run_worker`, with a table, as an app would have).
"""

import asyncio
import os
import signal

from aiokafka import AIOKafkaConsumer

import engine
from benchmarks.peers.harness import Job

job = Job()
MODE = os.environ.get("BENCH_MODE", "engine")


def first() -> None:
    print("first", flush=True)


async def raw() -> None:
    consumer = AIOKafkaConsumer(job.topic, bootstrap_servers=job.bootstrap, group_id=job.group,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                auto_commit_interval_ms=100)
    await consumer.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    seen = False
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            if batches and not seen:
                seen = True
                first()
    finally:
        await consumer.stop()


def engine_app() -> engine.App:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir)
    source = app.topic(job.topic, key_type=str, value_type=dict)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    seen = []

    @app.agent(source)
    async def count(stream):
        async for key, _ in stream.items():
            counts[key] += 1
            if not seen:
                seen.append(True)
                first()

    return app


if MODE == "raw":
    asyncio.run(raw())
else:
    asyncio.run(engine.run_worker(engine_app()))
