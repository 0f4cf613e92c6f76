"""A counting app for the table integration tests; `make_app` builds it in-process, `app` is what
`engine worker -A tests.integration.table_apps:app` runs (configured by ITEST_APP, ITEST_DELAY)."""

import asyncio
import os

import engine


def make_app(app_id: str, delay: float = 0.0, topic: str = "table-words", **settings) -> engine.App:
    app = engine.App(app_id, commit_interval=0.3, **settings)
    words = app.topic(topic, key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(words, concurrency=2)
    async def count(stream):
        async for word, n in stream.items():
            counts[word] += n
            if delay:
                await asyncio.sleep(delay)

    app.counts = counts  # type: ignore[attr-defined]  # handy for in-process tests
    return app


app = make_app(os.environ.get("ITEST_APP", "itables"), float(os.environ.get("ITEST_DELAY", "0")),
               os.environ.get("ITEST_TOPIC", "table-words"))
