"""The app of benchmarks/rebalance.py: counts each event into a table and sends it on to BENCH_OUT_TOPIC with
its partition and the wall-clock time it was processed, so the benchmark can see each partition's stalls
and every event processed more than once."""

import asyncio
import os
import time

import engine

app = engine.App(os.environ["BENCH_GROUP"], broker="kafka://" + os.environ["BENCH_BOOTSTRAP"],
                 commit_interval=0.2, processing_guarantee=os.environ.get("BENCH_GUARANTEE", "at_least_once"),
                 store=os.environ.get("BENCH_STORE", "rocksdb://"),
                 store_memory=int(os.environ.get("BENCH_STORE_MEMORY", 64 << 20)))
source = app.topic(os.environ["BENCH_TOPIC"], key_type=str, value_type=dict)
out = app.topic(os.environ["BENCH_OUT_TOPIC"], key_type=str, value_type=dict)
counts = app.Table("counts", default=int, key_type=str, value_type=int)
DELAY = float(os.environ.get("BENCH_DELAY", "0"))  # seconds of work per event (a slow agent)


@app.agent(source, concurrency=2)
async def process(stream):
    async for event in stream.events():
        counts[event.key] += 1
        if DELAY:
            await asyncio.sleep(DELAY)
        record = {"id": event.value["id"], "p": event.partition, "at": time.time()}
        await out.send(key=event.key, value=record)
