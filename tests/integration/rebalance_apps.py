"""The app of the rebalance and fault tests: a plain count and a 10-second tumbling count of the same
words, with final results on `<app>-per-window-closed`. `engine worker -A
tests.integration.rebalance_apps:app` runs it, configured by ITEST_APP, ITEST_TOPIC, ITEST_DELAY (seconds
of work per event), ITEST_GUARANTEE, ITEST_CONCURRENCY, ITEST_STUCK ("partition:offset:seconds": the one
event the agent sits on, once per process, to test a stuck agent), and ITEST_ECHO (if set, every event's
"i" is sent to `<app>-echo` first, so that a transaction holds the outputs of the events before a stuck
one), and ITEST_BLOCK ("partition:offset:seconds": the event during which the agent blocks the event loop,
every time it meets it, as a blocking client library would; with ITEST_BLOCK_ONCE, a file path, only while
that file does not exist: the first block creates it, so the workers sharing it block once in all),
ITEST_SLOW ("partition:offset:seconds": the event the agent awaits that long on, without blocking the loop,
every time it meets it, as a slow remote call would), and ITEST_LATE (if set, records too late for their
window go to `<app>-per-window-late`)."""

import asyncio
import os
import time

import engine

app = engine.App(os.environ.get("ITEST_APP", "irebalance"), commit_interval=0.2,
                 processing_guarantee=os.environ.get("ITEST_GUARANTEE", "at_least_once"))
words = app.topic(os.environ.get("ITEST_TOPIC", "words"), key_type=str, value_type=dict,
                  timestamp=lambda word: word["at"])
counts = app.Table("counts", default=int, key_type=str, value_type=int)
per_window = app.Table("per-window", default=int, key_type=str, value_type=int).tumbling(
    10, grace=5, expires=3600, late_topic=bool(os.environ.get("ITEST_LATE")))
per_window.closed()
DELAY = float(os.environ.get("ITEST_DELAY", "0"))
STUCK = tuple(float(x) for x in os.environ.get("ITEST_STUCK", "").split(":") if x) or None
stuck_once: list[bool] = []
BLOCK = tuple(float(x) for x in os.environ.get("ITEST_BLOCK", "").split(":") if x) or None
BLOCK_ONCE = os.environ.get("ITEST_BLOCK_ONCE")
SLOW = tuple(float(x) for x in os.environ.get("ITEST_SLOW", "").split(":") if x) or None
echo = app.topic(f"{app.id}-echo", key_type=str, value_type=int) if os.environ.get("ITEST_ECHO") else None


def block() -> None:
    """Block the event loop (the point: a blocking call in an agent); with BLOCK_ONCE, only if its file does
    not exist yet (created here)."""
    if BLOCK_ONCE:
        try:
            open(BLOCK_ONCE, "x").close()  # only its existence counts
        except FileExistsError:
            return
    assert BLOCK is not None
    time.sleep(BLOCK[2])  # (a line the loop monitor names)


@app.agent(words, concurrency=int(os.environ.get("ITEST_CONCURRENCY", "2")))
async def count(stream):
    async for event in stream.events():
        if echo is not None:
            await echo.send(key=event.key, value=event.value["i"])
        if STUCK is not None and (event.partition, event.offset) == (STUCK[0], STUCK[1]) and not stuck_once:
            stuck_once.append(True)
            await asyncio.sleep(STUCK[2])
        if BLOCK is not None and (event.partition, event.offset) == (BLOCK[0], BLOCK[1]):
            block()
        if SLOW is not None and (event.partition, event.offset) == (SLOW[0], SLOW[1]):
            await asyncio.sleep(SLOW[2])
        counts[event.key] += 1
        per_window[event.key] += 1
        if DELAY:
            await asyncio.sleep(DELAY)
