"""Passthrough: consume JSON, decode, add a field, encode, produce. Raw aiokafka vs an engine agent.

    .venv/bin/python -m benchmarks.passthrough [--broker host:port] [--messages 200000] [--rounds 5]

Both jobs read the same preloaded 4-partition topic (each in its own consumer group) on the same broker in
the same run, alternating, and write to their own output topic. Rates are messages/s from the first record
to the last produce acknowledged; the figure that matters is engine/raw (median over rounds). Both jobs
freeze the start-up heap as `engine worker` does (engine.runtime.settle_heap), so the ratio measures
engine's own per-event cost. CPU µs/msg over the same span is printed too.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
import uuid

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import engine
from benchmarks.common import broker, create_topics, median, parser, preload
from engine.runtime import settle_heap
from engine.tools import run_on_loop

Result = tuple[float, float]  # (messages/s, CPU µs per message)


def _result(count: int, wall: float, cpu: float) -> Result:
    return count / wall, cpu / count * 1e6


async def raw_aiokafka(bootstrap: str, source: str, sink: str, count: int) -> Result:
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=f"raw-{uuid.uuid4().hex}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_poll_records=1000)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                max_batch_size=256 * 1024)
    await consumer.start()
    await producer.start()
    settle_heap()
    seen = 0
    started = None
    try:
        while seen < count:
            batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            if started is None and batches:
                started, cpu = time.perf_counter(), time.process_time()
            for records in batches.values():
                for record in records:
                    value = orjson.loads(record.value)
                    value["seen"] = True
                    await producer.send(sink, orjson.dumps(value), key=record.key)
                seen += len(records)
        await producer.flush()
        assert started is not None
        result = _result(count, time.perf_counter() - started, time.process_time() - cpu)
        await consumer.commit()
        return result
    finally:
        gc.unfreeze()
        await producer.stop()
        await consumer.stop()


SETTINGS: dict[str, object] = {}


async def engine_agent(bootstrap: str, source: str, sink: str, count: int) -> Result:
    app = engine.App(f"bench-{uuid.uuid4().hex[:8]}", broker=f"kafka://{bootstrap}")
    source_topic = app.topic(source, key_serializer="raw", value_type=dict)
    sink_topic = app.topic(sink, key_serializer="raw", value_type=dict)
    done = asyncio.Event()
    seen = 0
    first: list[float] = []

    @app.agent(source_topic)
    async def passthrough(stream):
        nonlocal seen
        async for key, value in stream.items():
            if not first:
                first.extend((time.perf_counter(), time.process_time()))
            value["seen"] = True
            await sink_topic.send(key=key, value=value)
            seen += 1
            if seen == count:
                done.set()

    worker = engine.Worker(app, app.settings(SETTINGS))
    await worker.start()
    settle_heap()  # as engine worker does after start-up
    try:
        await done.wait()
        await worker.producer.flush()
        return _result(count, time.perf_counter() - first[0], time.process_time() - first[1])
    finally:
        gc.unfreeze()
        worker.request_stop()
        await worker.run_until_stopped()


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with broker(args.broker) as bootstrap:
        source = f"passthrough-in-{uuid.uuid4().hex[:6]}"
        await create_topics(bootstrap, [source, source + "-raw", source + "-engine"], args.partitions)
        took = await preload(bootstrap, source, args.messages)
        print(f"preloaded {args.messages} messages on {args.partitions} partitions in {took:.1f}s")
        raws, engines, ratios, cpu_ratios = [], [], [], []
        for round_ in range(args.rounds):
            raw, raw_cpu = await raw_aiokafka(bootstrap, source, source + "-raw", args.messages)
            eng, eng_cpu = await engine_agent(bootstrap, source, source + "-engine", args.messages)
            raws.append(raw)
            engines.append(eng)
            ratios.append(eng / raw)
            cpu_ratios.append(raw_cpu / eng_cpu)
            print(f"round {round_ + 1}: raw aiokafka {raw:,.0f} msg/s ({raw_cpu:.1f} CPU µs/msg), "
                  f"engine {eng:,.0f} msg/s ({eng_cpu:.1f} CPU µs/msg), engine/raw {ratios[-1]:.2f}")
        print(f"median of {args.rounds}: raw aiokafka {median(raws):,.0f} msg/s, engine agent "
              f"{median(engines):,.0f} msg/s, engine/raw {median(ratios):.2f} "
              f"(by CPU per message: {median(cpu_ratios):.2f})")


if __name__ == "__main__":
    # Both jobs on the loop a worker would use (uvloop when installed); ENGINE_EVENT_LOOP=asyncio to compare.
    run_on_loop(main(), os.environ.get("ENGINE_EVENT_LOOP", "auto"))
