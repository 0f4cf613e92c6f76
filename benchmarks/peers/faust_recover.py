"""Recovery with faust-streaming: start on a table whose changelog holds BENCH_COUNT records."""

import os
import sys
import time

import faust

from benchmarks.peers.harness import Job

job = Job()
started = time.perf_counter()
app = faust.App(job.group, broker=f"kafka://{job.bootstrap}", store="rocksdb://", datadir=job.state_dir,
                topic_partitions=4, web_enabled=False, producer_linger=0.005)
source = app.topic(job.topic, key_type=str, value_type=int, key_serializer="raw",
                   value_serializer="json")
counts = app.Table("counts", default=int, partitions=4)


@app.agent(source)
async def idle(stream):
    async for _ in stream:
        pass


@app.task
async def watch() -> None:
    await app.tables.recovery.completed.wait()
    job.report(time.perf_counter() - started)
    os._exit(0)


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()
