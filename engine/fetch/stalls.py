"""Where each ready task's partitions stand, for the stall watch (engine.monitors.watchdog) and `/status`:
what moves, what waits, and why a partition may wait (paused, parked, unanswered fetches, not fetched)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from engine.events import TP
    from engine.streams.quiesce import Quiesce
    from engine.tasks.active import ActiveTask
    from engine.tasks.pauses import Pauses
    from engine.transport.base import Consumer

# Seconds without an answer to a fetch of a partition that is fetched from (not paused) after which the stall
# watch counts it as waiting: a fetch is answered within fetch_max_wait (0.5 s) even when nothing is new.
FETCH_UNANSWERED = 15.0


async def task_states(tasks: Mapping[int, ActiveTask], consumer: Consumer, pauses: Pauses,
                      parked: Callable[[Collection[TP]], bool], quiesce: Quiesce | None
                      ) -> dict[int, tuple[object, bool, str]]:
    """Per ready task: a token that changes whenever the task moves (records acked or handed over), whether
    work waits for it (records buffered, in flight, or on the broker not fetched yet), and where each of its
    partitions stands and why it may wait (`parked`: whether a partition's batch waits for room in a
    mailbox)."""
    states: dict[int, tuple[object, bool, str]] = {}
    now = time.time()
    fetching = consumer.assignment()
    for number, task in sorted(tasks.items()):
        if not task.ready or task.closed:
            continue
        inputs = task.inputs
        moved, waiting, parts = [], False, []
        for tp, lease in sorted(task.leases.items()):
            buffered = inputs.buffered(tp) if inputs is not None and tp in inputs.inputs else 0
            lag = await consumer.lag(tp)
            paused = sorted(pauses.reasons(tp)) + (["parked"] if parked((tp,)) else [])
            # A partition fetched from (not paused) whose fetches the broker stopped answering: its lag is as
            # of its last answer, and may read 0 however much waits on the broker.
            fetched = consumer.fetched_at(tp)
            unanswered = None if fetched is None or paused else now - fetched
            stale = unanswered is not None and unanswered > FETCH_UNANSWERED
            # A partition of a ready task that the consumer does not fetch: nothing of it comes, and no lag
            # says that anything waits.
            unfetched = tp not in fetching
            waiting = waiting or bool(buffered or lease.in_flight or lag or stale or unfetched)
            moved.append((lease.position, lease.in_flight, buffered))
            parts.append(f"{tp.topic}[{tp.partition}] at {lease.position}, {lease.in_flight} in flight, "
                         f"{buffered} buffered, lag {'unknown' if lag is None else lag}"
                         + (f", paused ({', '.join(paused)})" if paused else "")
                         + (f", no fetch answered for {unanswered:.0f} s" if stale else "")
                         + (", not in the consumer's assignment" if unfetched else ""))
        if inputs is not None:
            parts.append(f"timestamp order: {task.release.state.value}")
        if quiesce is not None and quiesce.closed:
            parts.append("agents quiesced for a checkpoint")
        states[number] = (tuple(moved), waiting, "; ".join(parts))
    return states
