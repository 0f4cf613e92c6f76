"""What a worker holds now, as `GET /status` and `engine status` show it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.runtime.worker import Worker


async def worker_status(worker: Worker) -> dict[str, Any]:
    """The worker's tasks, its stores' changelog positions per task (summed over tables), the late events
    counted per windowed table, the partitions whose committed offset was gone from the broker
    (engine.tasks.starts), where the checkpoint under way stands ("prepared": its writes being sent and
    committed; None between two), and where each ready task's partitions stand (what the stall watch reads:
    position, in flight, buffered, lag, pauses)."""
    states = await worker.conductor.task_states()
    assigned = worker.assigned()
    tasks = worker.tasks
    return {
        "app": worker.app.id, "worker": worker.placement.endpoint,
        "active": sorted(assigned), "recovering": sorted(n for n, ready in assigned.items() if not ready),
        "standby": sorted(tasks.standby),
        "store_positions": {str(n): at for n, at in sorted(tasks.positions().items())},
        "late_events": {t.name: t.windowed.late_events for t in worker.app.tables.values()
                        if t.windowed is not None},
        "offset_jumps": {f"{tp.topic}[{tp.partition}]": {"committed": j.committed, "to": j.to,
                                                         "skipped": j.skipped}
                         for tp, j in sorted(tasks.starts.jumps.items())},
        "checkpoint": current.state.value if (current := tasks.checkpoints.current) else None,
        "partitions": {str(n): state.where for n, state in states.items()},
    }
