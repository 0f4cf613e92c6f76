"""A stateless app (no table, at-least-once): each event of ITEST_TOPIC echoed to `<ITEST_APP>-echo`, its
value `partition:offset`. What `engine worker -A tests.integration.echo_apps:app` runs."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "iecho"), commit_interval=0.2)
words = app.topic(os.environ.get("ITEST_TOPIC", "echo-words"), key_type=str, value_type=int)
echo = app.topic(f"{app.id}-echo", key_type=str, value_type=str)


@app.agent(words)
async def repeat(stream):
    async for event in stream.events():
        await echo.send(key=event.key, value=f"{event.partition}:{event.offset}")
