"""The app of the partition-count test: a table written straight from the events of `<prefix>events` (a
topic the team made with more partitions than `topic_partitions`), and a count per parity through a
group_by. ITEST_APP and ITEST_PREFIX configure it."""

import os

import engine

PREFIX = os.environ.get("ITEST_PREFIX", "pc-")
app = engine.App(os.environ.get("ITEST_APP", "iparts"), commit_interval=0.2)
events = app.topic(f"{PREFIX}events", key_type=str, value_type=int)
counts = app.Table("counts", default=int, key_type=str, value_type=int)
per_parity = app.stream(events).group_by(lambda n: "even" if n % 2 == 0 else "odd",
                                         key_type=str).count("per-parity")


@app.agent(events)
async def count(stream):
    async for key, n in stream.items():
        counts[key] += n
