"""The app of the leader-timer test: it reads ITEST_TOPIC (so that it has tasks, and a task 0) and every
0.2 s, on the group's leader only, sends its process id to `<app>-ticks`. ITEST_APP and ITEST_TOPIC
configure it."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "ileader"), commit_interval=0.2)
words = app.topic(os.environ.get("ITEST_TOPIC", "leader-words"), key_type=str, value_type=int)
ticks = app.topic(f"{app.id}-ticks", key_type=str, value_type=int)


@app.agent(words)
async def consume(stream):
    async for _ in stream:
        pass


@app.timer(0.2, on_leader=True)
async def tick():
    await ticks.send(key="tick", value=os.getpid())
