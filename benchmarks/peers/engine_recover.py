"""Recovery with engine: start on a table whose changelog holds BENCH_COUNT records; time until ready."""

import asyncio
import time
from collections.abc import Collection
from typing import Any

import engine
from benchmarks.peers.harness import Job

job = Job()
started = time.perf_counter()


async def main() -> None:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir)
    source = app.topic(job.topic, key_type=str, value_type=int)
    app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def idle(stream):
        async for _ in stream:
            pass

    worker = engine.Worker(app, app.settings())
    assert worker.tables is not None
    restore = worker.tables.restore
    done = asyncio.Event()

    async def timed_restore(states: Collection[Any], until: Any = None) -> None:
        await restore(states, until)
        job.extra["replayed"] = sum(worker.tables.replayed.values())  # type: ignore[union-attr]
        job.report(time.perf_counter() - started)
        done.set()

    worker.tables.restore = timed_restore  # type: ignore[method-assign]
    await worker.start()
    await done.wait()
    worker.request_stop()
    await worker.run_until_stopped()


asyncio.run(main())
