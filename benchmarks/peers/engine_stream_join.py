"""engine joining two streams (BENCH_MODE=join: the left topic BENCH_TOPIC joined with BENCH_RIGHT within 5 s,
each result sent to an output topic), or passing one topic through (BENCH_MODE=passthrough: BENCH_TOPIC,
each record sent on). The rate is of input records: the job ends at the BENCH_COUNT-th output record, the
driver tells how many inputs that took (benchmarks.stream_join)."""

import asyncio
import os

import engine
from benchmarks.peers.harness import Job, engine_worker

job = Job()
JOIN = os.environ.get("BENCH_MODE") == "join"


async def main() -> None:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir,
                     commit_interval=1.0)
    left = app.topic(job.topic, key_type=str, value_type=int)
    out = app.topic(f"{job.topic}-{job.group}-out", key_type=str, value_type=list)
    done = asyncio.Event()
    if JOIN:
        right = app.topic(os.environ["BENCH_RIGHT"], key_type=str, value_type=int)

        @app.agent(left)
        async def join(stream):
            async for key, pair in stream.join(right, within=5).items():
                await out.send(key=key, value=list(pair))
                if job.tick():
                    done.set()
    else:
        @app.agent(left)
        async def passthrough(stream):
            async for key, value in stream.items():
                await out.send(key=key, value=[value, value])
                if job.tick():
                    done.set()

    async with engine_worker(app):
        await done.wait()


asyncio.run(main())
