"""The zero-setup demo: runs the wordcount and not-viewing examples on the in-memory broker with generated
input, prints what they computed, and exits. `bash examples/demo.sh` sets up everything first."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import engine
from examples import not_viewing, wordcount

WORDS = "the quick brown fox jumps over the lazy dog while the cat sleeps".split()  # noqa: SIM905


async def run_example(app: engine.App, feed, done, timeout: float = 30.0) -> None:
    worker = engine.Worker(app, app.settings({"broker": f"memory://demo-{app.id}"}))
    await worker.start()
    try:
        await feed()
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: {app.id} did not finish within {timeout:g}s")
            await asyncio.sleep(0.05)
    finally:
        worker.request_stop()
        await worker.run_until_stopped()


async def wordcount_demo() -> None:
    rng = random.Random(7)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    expected = Counter(w for line in lines for w in line.split())

    async def feed() -> None:
        for line in lines:
            await wordcount.lines.send(value=line)

    started = time.perf_counter()
    await run_example(wordcount.app, feed, lambda: wordcount.totals == expected)
    took = time.perf_counter() - started
    print(f"wordcount: {len(lines)} lines, {sum(expected.values())} words in {took:.2f}s; top words:")
    for word, count in sorted(wordcount.totals.items(), key=lambda kv: (-kv[1], kv[0]))[:5]:
        print(f"  {word:8} {count}")


async def not_viewing_demo() -> None:
    rng = random.Random(11)
    users = ["ada", "grace", "linus", "barbara", "ken"]
    actions = [(rng.choice(users), rng.choice(["Open", "Close"])) for _ in range(50)]
    closes = sum(1 for _, action in actions if action == "Close")
    sent: list[not_viewing.Notification] = []

    @not_viewing.app.agent(not_viewing.notifications, name="demo_printer")
    async def collect(stream):
        async for note in stream:
            sent.append(note)

    async def feed() -> None:
        for user, action in actions:
            await not_viewing.app_events.send(key=user, value=not_viewing.AppEvent(user, action))

    await run_example(not_viewing.app, feed, lambda: len(sent) == closes)
    per_user = Counter(note.user for note in sent)
    print(f"not-viewing: {len(actions)} open/close events, {len(sent)} notifications:")
    for user, count in sorted(per_user.items()):
        print(f"  {user:8} {count} x {sent[0].message!r}")


async def main() -> None:
    await wordcount_demo()
    await not_viewing_demo()


if __name__ == "__main__":
    asyncio.run(main())
