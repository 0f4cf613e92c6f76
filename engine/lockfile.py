"""One worker process per app data dir: a lock the `engine worker` process holds for its lifetime.

Two workers started with the same data dir would share what is kept there: the worker's identity (its
transactional id, engine.runtime.worker_identity: each one's producer fences the other's) and the stores.
RocksDB locks each store on its own, but the second worker would only meet that lock at the first store
both want, after it joined the group and was given partitions. So the process takes this lock before it
starts anything: `flock` on `<data_dir>/<app>/worker.lock`, released by the kernel when the process ends,
however it ends (no stale lock after a SIGKILL), with its pid written in the file so that a second process
can say who holds it. The file itself stays: removing it would let a starting process lock a file that the
next one no longer sees.

Only the process entry point takes it (`engine worker`, engine.runtime.run_worker): workers embedded in one
process (tests, the test driver) keep their own data dirs, and several of them may run side by side.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import TYPE_CHECKING

from engine.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LOCK_NAME = "worker.lock"


@contextlib.contextmanager
def holding(folder: Path) -> Iterator[None]:
    """Hold the lock of `folder` (an app's data dir, created if missing) while the block runs; raise
    ConfigError naming the process that holds it already."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ConfigError(f"data dir {folder} is in use by another worker process (pid {holder}); give "
                              "each worker on this machine its own --data-dir (ENGINE_DATA_DIR)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
