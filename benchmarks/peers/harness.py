"""What every benchmark job shares: its configuration, and how it reports."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@dataclass
class Job:
    bootstrap: str = os.environ.get("BENCH_BOOTSTRAP", "127.0.0.1:9092")
    topic: str = os.environ.get("BENCH_TOPIC", "bench")
    count: int = int(os.environ.get("BENCH_COUNT", "200000"))
    group: str = os.environ.get("BENCH_GROUP", "bench")
    out: str = os.environ.get("BENCH_OUT", "bench.json")
    state_dir: str = os.environ.get("BENCH_STATE_DIR", "bench-state")
    seen: int = 0
    first: float | None = None
    cpu: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    def tick(self) -> bool:
        """Count one record; True when the last one was counted (and the report written)."""
        if self.first is None:
            self.first = time.perf_counter()
            self.cpu = time.process_time()
        self.seen += 1
        if self.seen == self.count:
            self.report()
            return True
        return False

    def report(self, seconds: float | None = None) -> None:
        assert self.first is not None or seconds is not None
        took = seconds if seconds is not None else time.perf_counter() - self.first  # type: ignore[operator]
        with open(self.out, "w") as f:
            json.dump({"seconds": took, "cpu": time.process_time() - self.cpu,
                       "records": self.count, **self.extra}, f)


@contextlib.asynccontextmanager
async def engine_worker(app: Any) -> AsyncIterator[Any]:
    """An engine worker of `app` started as `engine worker` starts one (the heap settled after start-up),
    stopped when the block ends: what an engine job runs its app in."""
    import engine
    from engine.runtime import settle_heap

    worker = engine.Worker(app, app.settings())
    await worker.start()
    settle_heap()
    try:
        yield worker
    finally:
        worker.request_stop()
        await worker.run_until_stopped()
