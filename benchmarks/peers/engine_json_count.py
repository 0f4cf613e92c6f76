"""The engine job of `benchmarks.stateful_json --processes N`, run by `engine worker`: JSON objects counted
per key into a RocksDB table with a changelog, as the benchmark's in-process engine job counts them
(configured by BENCH_GROUP, BENCH_TOPIC and BENCH_BOOTSTRAP)."""

import os

import engine


def make_app(group: str, topic: str, bootstrap: str) -> engine.App:
    """(The benchmark builds the same app to read its group's status.) Commits every 0.2 s: the rate is read
    from the committed offsets."""
    app = engine.App(group, broker=f"kafka://{bootstrap}", commit_interval=0.2)
    events = app.topic(topic, key_type=str, value_type=dict)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(events)
    async def count_users(stream):
        async for key, _value in stream.items():
            counts[key] += 1

    return app


app = make_app(os.environ.get("BENCH_GROUP", "bench"), os.environ.get("BENCH_TOPIC", "bench"),
               os.environ.get("BENCH_BOOTSTRAP", "127.0.0.1:9092"))
