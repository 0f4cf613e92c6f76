"""A worker as its process runs it (`engine worker`, `run_worker`): the data dir checked and held, the worker
stopped cleanly on SIGTERM/SIGINT, the start-up heap frozen."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

from engine.lockfile import holding
from engine.loops import stop_on_signals
from engine.runtime.data_dir import check_data_dir
from engine.runtime.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.app import App


def settle_heap() -> None:
    """Hide the start-up heap (modules, the app, clients) from the garbage collector.

    Everything allocated before the worker runs lives as long as the process; left in the collector's
    generations, every full collection rescans it, at a cost on the per-event path (benchmarks/README.md).
    A worker process owns its interpreter, so it freezes that heap once, after start-up (the
    standard-library recipe for long-lived servers).
    """
    gc.collect()
    gc.freeze()


async def run_worker(app: App, overrides: Mapping[str, Any] | None = None) -> None:
    """Start a worker for `app`, stop it cleanly on SIGTERM/SIGINT, raise WorkerFailed on failure. The
    process holds its app's data dir for as long (engine.lockfile): a second one given it refuses to start.
    It takes the process as its own: once started, it freezes the process's heap (`settle_heap`)."""
    settings = app.settings(overrides)
    check_data_dir(settings)
    with holding(settings.app_dir):  # before any client exists: a refused worker leaves nothing open
        worker = Worker(app, settings)
        with stop_on_signals(worker.request_stop):
            await worker.start()
            settle_heap()
            await worker.run_until_stopped()
