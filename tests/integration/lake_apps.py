"""The app of the lake export tests: a count per word (a dropped word's count deleted) and a count per word
per minute (windows expiring after 10 minutes of event time). `make_app` builds it in-process; `app` is what
`engine worker` runs, exporting every table to ITEST_LAKE every ITEST_EVERY seconds when that is set."""

import os
from dataclasses import dataclass

import engine


@dataclass
class Hit:
    word: str
    at: float  # event time, seconds
    drop: bool = False  # remove the word's count


def make_app(app_id: str, topic: str) -> engine.App:
    app = engine.App(app_id, commit_interval=0.2)
    hits = app.topic(topic, key_type=str, value_type=Hit, timestamp=lambda hit: hit.at)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(60, expires=600)

    @app.agent(hits)
    async def count(stream):
        async for hit in stream:
            if hit.drop:
                counts.pop(hit.word, None)
            else:
                counts[hit.word] += 1
                per_minute[hit.word] += 1

    return app


app = make_app(os.environ.get("ITEST_APP", "ilake"), os.environ.get("ITEST_TOPIC", "lake-hits"))
if os.environ.get("ITEST_LAKE"):
    app.export("all", os.environ["ITEST_LAKE"], every=float(os.environ.get("ITEST_EVERY", "2")))
