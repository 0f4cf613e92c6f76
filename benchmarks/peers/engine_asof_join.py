"""engine joining a stream with a table (BENCH_MODE=plain: the table's latest value; BENCH_MODE=versioned: a
versioned table, each event with the value valid at its time; BENCH_GRACE seconds of grace, 0 by default):
an agent keeps the table from BENCH_PRICES, another left-joins BENCH_TOPIC with it and sends each result on.
The job ends at the BENCH_COUNT-th result (benchmarks.asof_join)."""

import asyncio
import os

import engine
from benchmarks.peers.harness import Job, engine_worker

job = Job()
VERSIONED = os.environ.get("BENCH_MODE") == "versioned"
GRACE = float(os.environ.get("BENCH_GRACE", "0"))


async def main() -> None:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir,
                     commit_interval=1.0)
    orders = app.topic(job.topic, key_type=str, value_type=int)
    prices_topic = app.topic(os.environ["BENCH_PRICES"], key_type=str, value_type=int)
    out = app.topic(f"{job.topic}-{job.group}-out", key_type=str, value_type=list)
    table = app.Table("prices", key_type=str, value_type=int)
    prices = table.versioned(history=3600) if VERSIONED else table
    done = asyncio.Event()

    @app.agent(prices_topic)
    async def keep(stream):
        async for key, price in stream.items():
            prices[key] = price

    @app.agent(orders)
    async def price(stream):
        joined = stream.left_join(prices, grace=GRACE) if GRACE else stream.left_join(prices)
        async for key, pair in joined.items():
            await out.send(key=key, value=list(pair))
            if job.tick():
                done.set()

    async with engine_worker(app):
        await done.wait()


asyncio.run(main())
