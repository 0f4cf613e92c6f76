"""A worker as its process runs it (`engine worker`, `run_worker`): the data dir checked and held, the worker
stopped cleanly on SIGTERM/SIGINT, the start-up heap frozen, its open files allowed up to the system's hard
limit."""

from __future__ import annotations

import gc
import logging
import resource
from typing import TYPE_CHECKING, Any

from engine.lockfile import holding
from engine.loops import stop_on_signals
from engine.runtime.data_dir import check_data_dir
from engine.runtime.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.app import App

log = logging.getLogger(__name__)


def settle_heap() -> None:
    """Hide the start-up heap (modules, the app, clients) from the garbage collector.

    Everything allocated before the worker runs lives as long as the process; left in the collector's
    generations, every full collection rescans it, at a cost on the per-event path (benchmarks/README.md).
    A worker process owns its interpreter, so it freezes that heap once, after start-up (the
    standard-library recipe for long-lived servers).
    """
    gc.collect()
    gc.freeze()


def open_files_to_hard_limit() -> int:
    """Raise the process's limit of open files from its soft value to its hard one (as the JVM does for
    Kafka Streams); returns the limit now.

    Each RocksDB store keeps every one of its SST files open, with its log, manifest, lock and directories:
    some 10 to 20 files a table partition (benchmarks/README.md, the soak). A worker holding a few hundred
    table partitions, active and standby, passes the soft limit many systems set (1,024) and fails
    opening its next store with "Too many open files", where the hard limit allows it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:  # (a platform that refuses it: the soft limit stays)
        log.debug("open files limit left at %d: %s", soft, exc)
        return soft
    return hard


async def run_worker(app: App, overrides: Mapping[str, Any] | None = None) -> None:
    """Start a worker for `app`, stop it cleanly on SIGTERM/SIGINT, raise WorkerFailed on failure. The
    process holds its app's data dir for as long (engine.lockfile): a second one given it refuses to start.
    It takes the process as its own: its open files allowed up to the hard limit before it opens anything
    (`open_files_to_hard_limit`), and once started its heap frozen (`settle_heap`)."""
    settings = app.settings(overrides)
    open_files_to_hard_limit()
    check_data_dir(settings)
    with holding(settings.app_dir):  # before any client exists: a refused worker leaves nothing open
        worker = Worker(app, settings)
        with stop_on_signals(worker.request_stop):
            await worker.start()
            settle_heap()
            await worker.run_until_stopped()
