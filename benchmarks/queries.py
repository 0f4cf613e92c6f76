"""Query latency: table lookups over HTTP against a running app of two `engine worker`s.

    .venv/bin/python -m benchmarks.queries [--keys 10000] [--seconds 10] [--broker host:port]

Both workers count a preloaded topic into a table (tests.integration.table_apps). Once every key answers,
one client asks worker A for random keys, one request at a time on a kept-alive connection, for `seconds`:
a key whose partition A owns is answered by A (local), any other is forwarded once by A to B (forwarded).
Reported per kind: requests, p50, p99 and mean latency, as the client sees it.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from aiokafka import AIOKafkaProducer

from benchmarks.common import address_of, broker, create_topics, parser
from benchmarks.rebalance import start_worker


async def preload(bootstrap: str, topic: str, keys: list[str]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for key in keys:
            await producer.send(topic, b"1", key=key.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def all_answer(session: aiohttp.ClientSession, at: str, keys: list[str], timeout: float = 300) -> None:
    pending = list(keys)
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} keys still unanswered")
        still = []
        for key in pending:
            async with session.get(f"http://{at}/tables/counts/{key}") as response:
                if response.status != 200:
                    still.append(key)
                await response.read()
        pending = still
        if pending:
            await asyncio.sleep(0.5)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def load(session: aiohttp.ClientSession, at: str, keys: list[str], seconds: float,
               ) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"local": [], "forwarded": []}
    me = at
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        key = random.choice(keys)
        started = time.perf_counter()
        async with session.get(f"http://{at}/tables/counts/{key}") as response:
            body = await response.json()
        elapsed = time.perf_counter() - started
        assert response.status == 200, body
        timings["local" if body["worker"] == me else "forwarded"].append(elapsed)
    return timings


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args()
    with broker(args.broker) as bootstrap, tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        topic, app_id = f"bench-queries-{uuid.uuid4().hex[:8]}", f"bench-queries-{uuid.uuid4().hex[:8]}"
        await create_topics(bootstrap, [topic], 4)
        keys = [f"key-{i}" for i in range(args.keys)]
        env = {"ENGINE_BROKER": f"kafka://{bootstrap}", "ITEST_APP": app_id, "ITEST_TOPIC": topic,
               "ENGINE_WEB_PORT": "0"}
        app = "tests.integration.table_apps:app"
        workers = [start_worker(env, root / name, root / f"{name}.log", app=app) for name in ("a", "b")]
        try:
            addresses = [await address_of(root / f"{name}.log") for name in ("a", "b")]
            await preload(bootstrap, topic, keys)
            async with aiohttp.ClientSession() as session:
                await all_answer(session, addresses[0], keys)
                timings = await load(session, addresses[0], keys, args.seconds)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(60)
    print(f"{args.keys} keys, {args.seconds:g} s of one-at-a-time GET /tables/counts/{{key}} to worker A:")
    for kind, values in timings.items():
        if values:
            mean = sum(values) / len(values)
            print(f"  {kind:9}: {len(values):6} requests, p50 {percentile(values, 0.5) * 1000:.2f} ms, "
                  f"p99 {percentile(values, 0.99) * 1000:.2f} ms, mean {mean * 1000:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
