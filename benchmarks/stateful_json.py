"""Stateful JSON count: JSON objects (~60 bytes, `value_type=dict`) counted per key. A raw aiokafka loop that
decodes each value with orjson and counts into a dict, against an engine agent counting into a RocksDB table
with a changelog.

    .venv/bin/python -m benchmarks.stateful_json [--broker host:port] [--messages 200000] [--rounds 3]

Both jobs read the same preloaded topic (1,000 keys; each in its own consumer group) on the same broker in
the same run, alternating. Rates are events/s from the first record to the last one counted; the raw loop
does no I/O per event (its dict is its state), engine's table writes its store and changelog at checkpoints.
The figure that matters is engine/raw (median over rounds); by CPU time per event too, which a busy machine
disturbs less than wall time. Both freeze the start-up heap, as `engine worker`
does. Checked: both count every event of every key.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import shutil
import tempfile
import time
import uuid
from collections import Counter

import orjson
from aiokafka import AIOKafkaConsumer

import engine
from benchmarks.common import broker, create_topics, median, parser, preload
from engine.runtime import settle_heap


async def raw_count(bootstrap: str, source: str, count: int) -> tuple[float, float, Counter[str]]:
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=f"raw-{uuid.uuid4().hex}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_poll_records=1000)
    await consumer.start()
    settle_heap()
    counts: Counter[str] = Counter()
    seen = 0
    started = None
    cpu = 0.0
    try:
        while seen < count:
            batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            if started is None and batches:
                started, cpu = time.perf_counter(), time.process_time()
            for records in batches.values():
                for record in records:
                    value = orjson.loads(record.value)
                    counts[value["user"]] += 1
                seen += len(records)
        assert started is not None
        return count / (time.perf_counter() - started), (time.process_time() - cpu) / count * 1e6, counts
    finally:
        gc.unfreeze()
        await consumer.stop()


async def engine_count(bootstrap: str, source: str, count: int) -> tuple[float, float, Counter[str]]:
    data_dir = tempfile.mkdtemp(prefix="bench-json-")
    app = engine.App(f"bench-{uuid.uuid4().hex[:8]}", broker=f"kafka://{bootstrap}", data_dir=data_dir)
    events = app.topic(source, key_type=str, value_type=dict)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    done = asyncio.Event()
    seen = 0
    first: list[float] = []

    @app.agent(events)
    async def count_users(stream):
        nonlocal seen
        async for key, _value in stream.items():  # (decoded as the raw loop's are)
            if not first:
                first.extend((time.perf_counter(), time.process_time()))
            counts[key] += 1  # the key is the value's user (preload keys by user; checked at the end)
            seen += 1
            if seen == count:
                done.set()

    worker = engine.Worker(app, app.settings())
    await worker.start()
    settle_heap()  # as engine worker does after start-up
    try:
        await done.wait()
        rate = count / (time.perf_counter() - first[0])
        cpu = (time.process_time() - first[1]) / count * 1e6
        return rate, cpu, Counter({f"user-{key}": n for key, n in counts.items()})
    finally:
        gc.unfreeze()
        worker.request_stop()
        await worker.run_until_stopped()
        shutil.rmtree(data_dir, ignore_errors=True)


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with broker(args.broker) as bootstrap:
        source = f"json-count-{uuid.uuid4().hex[:6]}"
        await create_topics(bootstrap, [source], args.partitions)
        took = await preload(bootstrap, source, args.messages)
        print(f"preloaded {args.messages} messages on {args.partitions} partitions in {took:.1f}s")
        ratios: list[float] = []
        cpu_ratios: list[float] = []
        for round_ in range(args.rounds):
            raw, raw_cpu, raw_counts = await raw_count(bootstrap, source, args.messages)
            eng, eng_cpu, eng_counts = await engine_count(bootstrap, source, args.messages)
            assert eng_counts == raw_counts, "both count every event of every key"
            ratios.append(eng / raw)
            cpu_ratios.append(raw_cpu / eng_cpu)
            print(f"round {round_ + 1}: raw aiokafka+orjson+dict {raw:,.0f} events/s ({raw_cpu:.2f} CPU "
                  f"µs/event), engine table {eng:,.0f} events/s ({eng_cpu:.2f} CPU µs/event), engine/raw "
                  f"{ratios[-1]:.2f}")
        print(f"median of {args.rounds}: engine/raw {median(ratios):.2f} (by CPU per event: "
              f"{median(cpu_ratios):.2f})")


if __name__ == "__main__":
    asyncio.run(main())
