"""The zero-setup demo: runs the examples on the in-memory broker (and in-memory stores) with generated
input, prints what they computed, and exits. `bash examples/demo.sh` sets up everything first."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter

import engine
from engine import testing

os.environ.setdefault("NOT_VIEWING_TICK_SECONDS", "0.2")  # before the example is imported

from typing import TYPE_CHECKING

from . import fraud, inventory, not_viewing, wordcount

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

WORDS = "the quick brown fox jumps over the lazy dog while the cat sleeps".split()  # noqa: SIM905


async def run_example(
    app: engine.App, feed: Callable[[], Awaitable[None]], done: Callable[[], bool], timeout: float = 30.0,
    **settings: object,
) -> None:
    """Run `app` on a fresh in-memory broker (and in-memory stores unless `settings` say otherwise), feed it,
    wait until `done()`, and stop it, which writes its final checkpoint."""
    overrides = {"broker": testing.memory_url(), "store": "memory://", "commit_interval": 0.1,
                 **settings}
    worker = engine.Worker(app, app.settings(overrides))
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


def collector(app: engine.App, topic: engine.Topic, name: str) -> list:
    """An extra agent that gathers what an example sends to `topic`."""
    seen: list = []

    @app.agent(topic, name=name)
    async def collect(stream):
        async for value in stream:
            seen.append(value)

    return seen


async def wordcount_demo() -> None:
    rng = random.Random(7)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    expected = Counter(w for line in lines for w in line.split())

    async def feed() -> None:
        for line in lines:
            await wordcount.lines.send(value=line)

    started = time.perf_counter()
    await run_example(wordcount.app, feed, lambda: dict(wordcount.counts.items()) == expected)
    took = time.perf_counter() - started
    print(f"wordcount: {len(lines)} lines, {sum(expected.values())} words in {took:.2f}s; top words:")
    for word, count in expected.most_common(5):
        print(f"  {word:8} {count}")


async def fraud_demo() -> None:
    flagged = collector(fraud.app, fraud.suspicious, "demo_flagged")
    home = {"ada": "FR", "bob": "NL", "eve": "DE"}
    payments = [fraud.Payment(f"p{i}", c, 10.0 + i, home[c]) for i, c in enumerate(home)]
    payments += [fraud.Payment("p10", "ada", 999.0, "BR"), fraud.Payment("p11", "bob", 5.0, "NL"),
                 fraud.Payment("p12", "eve", 420.0, "KY")]

    async def feed() -> None:
        for payment in payments:
            await fraud.payments.send(key=payment.customer, value=payment)

    await run_example(fraud.app, feed, lambda: len(flagged) == 2)
    print(f"fraud: {len(payments)} payments, suspicious:")
    for payment in sorted(flagged, key=lambda p: p.id):
        print(f"  {payment.id} {payment.customer} paid {payment.amount:g} from {payment.country} "
              f"(before only {home[payment.customer]})")


async def inventory_demo() -> None:
    reorders = collector(inventory.app, inventory.reorders, "demo_reorders")
    rng = random.Random(3)
    skus = ["sku-apple", "sku-pear", "sku-plum"]

    async def feed() -> None:
        for sku in skus:
            await inventory.shipments.send(key=sku, value=inventory.Shipment(sku, 60))
        # The shelves are stocked before the shop opens.
        await testing.eventually(lambda: dict(inventory.stock.items()) == dict.fromkeys(skus, 60), 10)
        for _ in range(80):
            sku = rng.choice(skus[:2])
            await inventory.sales.send(key=sku, value=inventory.Sale(sku, rng.randint(2, 4)))

    await run_example(inventory.app, feed, lambda: {r.sku for r in reorders} == set(skus[:2]))
    print("inventory: 3 products stocked with 60 each, 80 sales of apples and pears; reorders:")
    for reorder in reorders:
        print(f"  reorder {reorder.quantity} of {reorder.sku} (stock fell to {reorder.stock})")


async def not_viewing_demo() -> None:
    sent = collector(not_viewing.app, not_viewing.notifications, "demo_printer")
    rng = random.Random(11)
    users = ["ada", "grace", "linus", "barbara", "ken"]
    actions = [(rng.choice(users), rng.choice(["Open", "Close"])) for _ in range(50)]
    last = dict(actions)
    closed = {user for user, action in last.items() if action == "Close"}

    async def feed() -> None:
        for user, action in actions:
            await not_viewing.app_events.send(key=user, value=not_viewing.AppEvent(user, action))

    await run_example(not_viewing.app, feed, lambda: {n.user for n in sent} >= closed)
    notified = {n.user for n in sent}
    print(f"not-viewing: {len(actions)} open/close events; users whose app is closed: "
          f"{', '.join(sorted(closed))}; notified on the ticks: {', '.join(sorted(notified))}")
    assert notified == closed, "only users whose status is Close are notified"


async def main() -> None:
    await wordcount_demo()
    await fraud_demo()
    await inventory_demo()
    await not_viewing_demo()


if __name__ == "__main__":
    asyncio.run(main())
