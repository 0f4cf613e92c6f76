"""A contender of benchmarks/latency.py: reads BENCH_TOPIC and writes every value, unchanged, to
BENCH_OUT_TOPIC, until SIGTERM.

BENCH_MODE: `raw` (an aiokafka consume-produce loop, committing every 100 ms), `engine` (a passthrough
agent), or `engine-table` (the agent also counts each key into a RocksDB table with a changelog).
BENCH_GUARANTEE and BENCH_COMMIT (seconds) set the engine's processing guarantee and commit interval.
"""

import asyncio
import os
import signal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import engine
from benchmarks.peers.harness import Job
from engine.tools import run_on_loop

job = Job()
MODE = os.environ.get("BENCH_MODE", "engine")
OUT = os.environ["BENCH_OUT_TOPIC"]


async def raw() -> None:
    consumer = AIOKafkaConsumer(job.topic, bootstrap_servers=job.bootstrap, group_id=job.group,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                auto_commit_interval_ms=100)
    producer = AIOKafkaProducer(bootstrap_servers=job.bootstrap)
    await consumer.start()
    await producer.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        while not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=100)).values():
                for record in records:
                    await producer.send(OUT, record.value, key=record.key)
    finally:
        await producer.stop()
        await consumer.stop()


def engine_app() -> engine.App:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir,
                     commit_interval=float(os.environ.get("BENCH_COMMIT", "1.0")),
                     processing_guarantee=os.environ.get("BENCH_GUARANTEE", "at_least_once"))
    source = app.topic(job.topic, key_type=str, value_type=dict)
    out = app.topic(OUT, key_type=str, value_type=dict)
    table = MODE == "engine-table"
    counts = app.Table("counts", default=int, key_type=str, value_type=int) if table else None

    @app.agent(source)
    async def forward(stream):
        async for key, value in stream.items():
            if counts is not None:
                counts[key] += 1
            await out.send(key=key, value=value)

    return app


LOOP = os.environ.get("ENGINE_EVENT_LOOP", "auto")  # both on the loop a worker would use
if MODE == "raw":
    run_on_loop(raw(), LOOP)
else:
    run_on_loop(engine.run_worker(engine_app()), LOOP)
