"""Stateful count with faust-streaming: a RocksDB (rocksdict) table with a changelog."""

import os
import sys

import faust

from benchmarks.peers.harness import Job

job = Job()
app = faust.App(job.group, broker=f"kafka://{job.bootstrap}", store="rocksdb://", datadir=job.state_dir,
                topic_partitions=4, web_enabled=False, broker_commit_interval=1.0,
                producer_linger=0.005)  # faust's default is 0 (a request per record); engine lingers 5 ms
words = app.topic(job.topic, key_type=str, value_type=int, key_serializer="raw",
                  value_serializer="json")
counts = app.Table("counts", default=int, partitions=4)


@app.agent(words)
async def count(stream):
    async for word, n in stream.items():
        counts[word.decode() if isinstance(word, bytes) else word] += n
        if job.tick():
            os._exit(0)


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()
