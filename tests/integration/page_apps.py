"""The app whose page test_page_in_browser.py opens: words counted into a table and into tumbling windows
(final results on `<app>-per-minute-closed`); a word whose value is "poison" failing the agent (dead letter).
Configured by ITEST_APP and ITEST_TOPIC; what `engine worker -A tests.integration.page_apps:app` runs."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "ipage"), commit_interval=0.2, standby_replicas=1)
words = app.topic(os.environ.get("ITEST_TOPIC", "page-words"), key_type=str, value_type=str)
counts = app.Table("counts", default=int, key_type=str, value_type=int)
per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(60, expires=3600)
per_minute.closed()


@app.agent(words)
async def count(stream):
    async for word, value in stream.items():
        if value == "poison":
            raise ValueError(f"the word {word!r} came poisoned")
        counts[word] += 1
        per_minute[word] += 1
