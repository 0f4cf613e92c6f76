import asyncio
import uuid

import engine
from engine.transport.memory import MemoryBroker


def memory_url() -> str:
    return f"memory://{uuid.uuid4().hex}"


async def run_until(worker, predicate, timeout=5.0):
    await worker.start()
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.01)
    finally:
        worker.request_stop()
        await worker.run_until_stopped()


async def test_wordcount_shape_on_memory():
    url = memory_url()
    app = engine.App("wc", broker=url, commit_interval=0.05)
    lines = app.topic("lines", value_type=str)
    words = app.topic("words", key_type=str, value_type=int)
    seen: list[tuple[str, int]] = []

    @app.agent(lines, concurrency=2)
    async def split(stream):
        async for line in stream:
            for word in line.lower().split():
                await words.send(key=word, value=1)

    @app.agent(words)
    async def collect(stream):
        async for word, n in stream.items():
            seen.append((word, n))

    broker = MemoryBroker.named(url.split("://")[1])
    for line in ["a b", "b c", "c d e"]:
        broker.append("lines", None, line.encode(), (), None)
    worker = engine.Worker(app, app.settings())
    await run_until(worker, lambda: len(seen) == 7)
    assert sorted(w for w, _ in seen) == ["a", "b", "b", "c", "c", "d", "e"]
