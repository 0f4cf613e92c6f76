"""Stateful count with engine: a RocksDB table with a changelog, counting keyed events."""

import asyncio
import gc

import engine
from benchmarks.peers.harness import Job

job = Job()


async def main() -> None:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir,
                     commit_interval=1.0)
    words = app.topic(job.topic, key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    done = asyncio.Event()

    @app.agent(words)
    async def count(stream):
        async for word, n in stream.items():
            counts[word] += n
            if job.tick():
                done.set()

    worker = engine.Worker(app, app.settings())
    await worker.start()
    gc.collect()
    gc.freeze()  # as engine worker does (engine.runtime.settle_heap)
    await done.wait()
    worker.request_stop()
    await worker.run_until_stopped()


asyncio.run(main())
