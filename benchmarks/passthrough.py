"""Passthrough: consume JSON, decode, add a field, encode, produce. Raw aiokafka vs an engine agent.

    .venv/bin/python -m benchmarks.passthrough [--broker host:port] [--messages 200000] [--rounds 2]

Both jobs read the same preloaded 4-partition topic (each in its own consumer group) on the same broker in
the same run, and write to their own output topic. Rates are messages/s from first fetch to last produce
acknowledged; the figure that matters is engine/raw.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import engine
from benchmarks.common import broker, create_topics, median, parser, preload


async def raw_aiokafka(bootstrap: str, source: str, sink: str, count: int) -> float:
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=f"raw-{uuid.uuid4().hex}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_poll_records=1000)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                max_batch_size=256 * 1024)
    await consumer.start()
    await producer.start()
    seen = 0
    started = None
    try:
        while seen < count:
            batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            if started is None and batches:
                started = time.perf_counter()
            for records in batches.values():
                for record in records:
                    value = orjson.loads(record.value)
                    value["seen"] = True
                    await producer.send(sink, orjson.dumps(value), key=record.key)
                seen += len(records)
        await producer.flush()
        await consumer.commit()
        assert started is not None
        return count / (time.perf_counter() - started)
    finally:
        await producer.stop()
        await consumer.stop()


async def engine_agent(bootstrap: str, source: str, sink: str, count: int) -> float:
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
                first.append(time.perf_counter())
            value["seen"] = True
            await sink_topic.send(key=key, value=value)
            seen += 1
            if seen == count:
                done.set()

    worker = engine.Worker(app, app.settings())
    await worker.start()
    try:
        await done.wait()
        await worker.producer.flush()
        return count / (time.perf_counter() - first[0])
    finally:
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
        raws, engines, ratios = [], [], []
        for round_ in range(args.rounds):
            raws.append(await raw_aiokafka(bootstrap, source, source + "-raw", args.messages))
            engines.append(await engine_agent(bootstrap, source, source + "-engine", args.messages))
            ratios.append(engines[-1] / raws[-1])
            print(f"round {round_ + 1}: raw aiokafka {raws[-1]:,.0f} msg/s, "
                  f"engine {engines[-1]:,.0f} msg/s, engine/raw {ratios[-1]:.2f}")
        print(f"median: raw aiokafka {median(raws):,.0f} msg/s, engine agent {median(engines):,.0f} "
              f"msg/s, engine/raw {median(ratios):.2f} (rounds: {args.rounds})")


if __name__ == "__main__":
    asyncio.run(main())
