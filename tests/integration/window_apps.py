"""A windowed counting app for the exactly-once integration test; `app` is what `engine worker -A
tests.integration.window_apps:app` runs (configured by ITEST_APP, ITEST_TOPIC, ITEST_DELAY)."""

import asyncio
import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "iwindows"), commit_interval=0.2,
                 processing_guarantee="exactly_once")
clicks = app.topic(os.environ.get("ITEST_TOPIC", "clicks"), key_type=str, value_type=dict,
                   timestamp=lambda click: click["at"])
per_window = app.Table("clicks", default=int, key_type=str, value_type=int).tumbling(10, grace=2,
                                                                                     expires=600)
per_window.closed()  # final results on <app>-clicks-closed
DELAY = float(os.environ.get("ITEST_DELAY", "0"))


@app.agent(clicks)
async def count(stream):
    async for user, _ in stream.items():
        per_window[user] += 1
        if DELAY:
            await asyncio.sleep(DELAY)
