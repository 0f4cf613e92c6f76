"""engine under a processing guarantee (BENCH_GUARANTEE), for benchmarks/exactly_once.py: BENCH_MODE=count
counts keyed events into a RocksDB table with a changelog; BENCH_MODE=passthrough decodes JSON, adds a field
and sends it to BENCH_SINK; BENCH_MODE=ask has an agent ask another agent for each event, one at a time, and
reports the asks' latency. Reports the rate and how many checkpoints (commits) ran from the first record to
the last one processed."""

import asyncio
import json
import os
from pathlib import Path

import engine
from benchmarks.peers.harness import Job
from engine.runtime import settle_heap

job = Job()
MODE = os.environ.get("BENCH_MODE", "count")


def add_commits(commits: int) -> None:
    """tick() reported the rate at the last record; the commits are added to that report."""
    path = Path(job.out)
    path.write_text(json.dumps({**json.loads(path.read_text()), **job.extra, "commits": commits}))


async def main() -> None:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir,
                     commit_interval=float(os.environ.get("BENCH_COMMIT_INTERVAL", "1.0")),
                     processing_guarantee=os.environ.get("BENCH_GUARANTEE", "at_least_once"))
    done = asyncio.Event()
    if MODE == "count":
        words = app.topic(job.topic, key_type=str, value_type=int)
        counts = app.Table("counts", default=int, key_type=str, value_type=int)

        @app.agent(words)
        async def count(stream):
            async for word, n in stream.items():
                counts[word] += n
                if job.tick():
                    done.set()
    elif MODE == "ask":
        words = app.topic(job.topic, key_type=str, value_type=int)
        took: list[float] = []

        @app.agent(app.topic(f"{job.group}-questions", value_type=int))
        async def double(stream):
            async for n in stream:
                yield 2 * n

        @app.agent(words)
        async def asker(stream):
            loop = asyncio.get_running_loop()
            async for n in stream:
                asked = loop.time()
                assert await double.ask(n, timeout=60) == 2 * n
                took.append(loop.time() - asked)
                if job.tick():
                    ordered = sorted(took)
                    job.extra.update(ask_p50=ordered[len(ordered) // 2],
                                     ask_p99=ordered[len(ordered) * 99 // 100], ask_max=ordered[-1])
                    done.set()
    else:
        source = app.topic(job.topic, key_serializer="raw", value_type=dict)
        sink = app.topic(os.environ["BENCH_SINK"], key_serializer="raw", value_type=dict)

        @app.agent(source)
        async def passthrough(stream):
            async for key, value in stream.items():
                value["seen"] = True
                await sink.send(key=key, value=value)
                if job.tick():
                    done.set()

    worker = engine.Worker(app, app.settings())
    await worker.start()
    checkpoints = worker.tasks.checkpoints
    commits = 0
    run = checkpoints.run

    async def counted(*args, **kwargs):  # the benchmark's own count of checkpoints, wrapped around them
        nonlocal commits
        if job.first is not None and job.seen < job.count:
            commits += 1
        return await run(*args, **kwargs)

    checkpoints.run = counted
    settle_heap()  # as engine worker does after start-up
    await done.wait()
    add_commits(commits)
    worker.request_stop()
    await worker.run_until_stopped()


asyncio.run(main())
