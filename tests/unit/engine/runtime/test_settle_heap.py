"""A worker process settles its heap after start-up: the start-up heap frozen out of the collector's
generations (engine.runtime.settle_heap); and it may open files up to the system's hard limit."""

from __future__ import annotations

import gc
import subprocess
import sys

from engine.runtime import settle_heap


def test_settling_freezes_the_start_up_heap():
    survivor = [object()]  # alive through the settling: frozen with the rest of the heap
    try:
        settle_heap()
        assert not any(obj is survivor for obj in gc.get_objects())  # out of every generation
    finally:
        gc.unfreeze()
    assert any(obj is survivor for obj in gc.get_objects())


def test_a_worker_process_may_open_files_up_to_the_hard_limit():
    """RocksDB keeps every SST file of every store open: a worker process takes the hard limit of open
    files, not the soft one many systems set at 1,024 (tried in a child process: limits are the process's)."""
    script = (
        "import resource\n"
        "from engine.runtime.process import open_files_to_hard_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))\n"
        "assert open_files_to_hard_limit() == hard\n"
        "assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                          timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
