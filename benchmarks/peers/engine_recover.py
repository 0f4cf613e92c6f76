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
    activate = worker.tables.activate
    done = asyncio.Event()

    async def timed_activate(numbers: Collection[int], sources: Any = None,
                             ) -> dict[int, list[tuple[Any, Any]]]:
        parts = await activate(numbers, sources)
        job.extra["replayed"] = sum(worker.tables.replayed.values())  # type: ignore[union-attr]
        job.report(time.perf_counter() - started)
        done.set()
        return parts

    worker.tables.activate = timed_activate  # type: ignore[method-assign]
    await worker.start()
    await done.wait()
    worker.request_stop()
    await worker.run_until_stopped()


asyncio.run(main())
