"""A contender of benchmarks/latency.py: reads BENCH_TOPIC until SIGTERM and, but for the pipeline, writes
every value, unchanged, to BENCH_OUT_TOPIC.

BENCH_MODE: `raw` (an aiokafka consume-produce loop, committing every 100 ms), `engine` (a passthrough
agent), `engine-table` (the agent also counts each key into a RocksDB table with a changelog), or
`engine-pipeline` (`app.stream(source).map(...).count("counts")`, fused: no output topic, its result is the
table). BENCH_GUARANTEE and BENCH_COMMIT (seconds) set the engine's processing guarantee and commit interval.

Every mode also notes, for each measured event, the milliseconds from its send to the moment it is
processed (the raw loop's and the agents' hands, the pipeline's map), and writes them to
`<BENCH_STATE_DIR>/processed.json` when it stops.
"""

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import engine
from benchmarks.peers.harness import Job
from engine.runtime import settle_heap
from engine.tools import run_on_loop

job = Job()
MODE = os.environ.get("BENCH_MODE", "engine")
OUT = os.environ["BENCH_OUT_TOPIC"]
PROCESSED: list[float] = []  # ms from each measured event's send to its processing


def processed(value: dict[str, Any]) -> dict[str, Any]:
    if value["m"]:
        PROCESSED.append((time.time() - value["t"]) * 1000)
    return value


async def raw() -> None:
    settle_heap()  # the heap and collector an engine worker has, so that the jobs differ only in their code
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
                    processed(orjson.loads(record.value))
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
    if MODE == "engine-pipeline":
        app.stream(source).map(processed).count("counts")
        return app
    counts = app.Table("counts", default=int, key_type=str, value_type=int) if table else None

    @app.agent(source)
    async def forward(stream):
        async for key, value in stream.items():
            processed(value)
            if counts is not None:
                counts[key] += 1
            await out.send(key=key, value=value)

    return app


LOOP = os.environ.get("ENGINE_EVENT_LOOP", "auto")  # both on the loop a worker would use
if MODE == "raw":
    run_on_loop(raw(), LOOP)
else:
    run_on_loop(engine.run_worker(engine_app()), LOOP)
Path(job.state_dir, "processed.json").write_bytes(orjson.dumps(PROCESSED))
