"""An app with a plain and a windowed table for the Spark bridge tests; `make_app` builds it in-process,
`app` is what the `engine export` CLI loads (configured by ITEST_APP and ITEST_TOPIC)."""

import os
from dataclasses import dataclass

import engine


@dataclass
class Hit:
    word: str
    at: float  # event time, seconds


def make_app(app_id: str, topic: str = "export-hits") -> engine.App:
    app = engine.App(app_id, commit_interval=0.2)
    hits = app.topic(topic, key_type=str, value_type=Hit, timestamp=lambda hit: hit.at)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(
        60, expires=24 * 3600)

    @app.agent(hits)
    async def count(stream):
        async for hit in stream:
            counts[hit.word] += 1
            per_minute[hit.word] += 1

    return app


app = make_app(os.environ.get("ITEST_APP", "iexport"), os.environ.get("ITEST_TOPIC", "export-hits"))
