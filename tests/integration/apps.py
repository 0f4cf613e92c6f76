"""Apps the integration tests run as real `engine worker` processes. Configured by environment:
ITEST_APP (app id), ITEST_DELAY (seconds of work per event), ENGINE_BROKER."""

import asyncio
import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "itest"), commit_interval=0.2,
                 agent_max_restarts=1000)
numbers = app.topic("numbers", key_type=str, value_type=dict)
processed = app.topic("processed", key_type=str, value_type=dict)
DELAY = float(os.environ.get("ITEST_DELAY", "0"))
PID = os.getpid()


@app.agent(numbers, concurrency=2)
async def process(stream):
    async for event in stream.events():
        value = event.value
        if value.get("poison"):
            raise ValueError(f"poison number {value['n']}")
        if DELAY:
            await asyncio.sleep(DELAY)
        await processed.send(key=event.key, value={"n": value["n"], "pid": PID,
                                                   "partition": event.partition})
