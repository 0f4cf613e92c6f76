"""The worker and the process that runs it: `Worker`, the one composition root (engine.runtime.worker), its
status (engine.runtime.status), and `run_worker`, what `engine worker` runs (engine.runtime.process)."""

from engine.runtime.data_dir import check_data_dir, worker_identity
from engine.runtime.process import run_worker, settle_heap
from engine.runtime.worker import Worker

__all__ = ["Worker", "check_data_dir", "run_worker", "settle_heap", "worker_identity"]
