"""A test kit for apps, two ways.

The test driver (`TestDriver`, engine.testing.driver): synchronous, deterministic, on virtual time; each
input is processed with everything it causes before `send` returns, and wall-clock time moves only when the
test says:

    with TestDriver(app) as driver:
        driver.send(my_topic, key="k", value=..., timestamp_ms=...)
        assert driver.table("counts") == {...}

`running`: a worker on real time in the test's own event loop, fed and waited for (`eventually`), for tests
that need the loop to themselves (two workers of one app, queries over HTTP):

    async with testing.running(app) as worker:
        await my_topic.send(value=...)
        await testing.eventually(lambda: results == expected)
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

from engine.runtime import Worker
from engine.transport.memory_broker import MemoryBroker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from engine.app import App


def memory_url() -> str:
    """A memory:// URL of a fresh, private broker."""
    return f"memory://test-{uuid.uuid4().hex}"


def broker_for(url: str) -> MemoryBroker:
    return MemoryBroker.named(url.split("://", 1)[1])


@contextlib.asynccontextmanager
async def running(app: App, **overrides: Any) -> AsyncIterator[Worker]:
    """Run a worker for `app` for the block: on the app's memory:// broker, or a private one if the app is
    configured for Kafka and no `broker=` is given."""
    if "broker" not in overrides and app.settings().transport_scheme != "memory":
        overrides["broker"] = memory_url()
    overrides.setdefault("commit_interval", 0.05)
    overrides.setdefault("web_enabled", False)  # no port per test; pass web_enabled=True to test queries
    worker = Worker(app, app.settings(overrides))
    await worker.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        await worker.run_until_stopped()


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0, *, interval: float = 0.005) -> None:
    """Wait until `predicate()` is true, looking every `interval` seconds; fail with AssertionError after
    `timeout` seconds. (A predicate that blocks, reading files or an object store, takes the loop from the
    workers running in it while it runs: look at it less often.)"""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout:g}s")
        await asyncio.sleep(interval)


from engine.testing.driver import DeadLetter, Record, TestDriver  # noqa: E402  # needs Worker above
from engine.testing.virtual_time import NeverIdle  # noqa: E402

__all__ = ["DeadLetter", "NeverIdle", "Record", "TestDriver", "broker_for", "eventually", "memory_url",
           "running"]
