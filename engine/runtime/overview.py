"""What one worker shows on the app's page (engine.web.page): its place in the group, its partitions with
their lag and rate, its tables, its dead letters and late events, as JSON. The web server merges every
worker's into the app's views (engine.web.views).

Nothing of this is kept on the per-event path: counters the worker keeps anyway are read when the page asks,
and rates and trends come from the samples `PageSamples` takes at those asks (at most one a second, the last
`KEPT`). A page that nobody opens costs nothing; one open costs a read of the worker's state per poll.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.topology.graph import table_detail

if TYPE_CHECKING:
    from engine.events import TP
    from engine.fetch.stalls import TaskState
    from engine.monitors.watchdog import Watchdog
    from engine.runtime.worker import Worker
    from engine.stats import Histogram

KEPT = 60  # samples kept: two minutes of a page polling every 2 s
SPACING = 1.0  # seconds between two samples at least (several pages open poll no faster than one)
RATE_OVER = 10.0  # seconds a partition's rate is measured over (from the oldest sample that recent)


@dataclass
class Sample:
    at: float  # monotonic seconds
    positions: dict[TP, int | None]
    lags: dict[TP, int | None]
    loop_lag: list[tuple[float, int]]  # the event loop's lag histogram, cumulative


@dataclass
class PageSamples:
    """The worker's partitions' positions and lags and its loop's lag, as the page's asks sampled them."""

    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=KEPT))

    def take(self, states: dict[int, TaskState], loop_lag: Histogram | None, now: float) -> None:
        if self.samples and now - self.samples[-1].at < SPACING:
            return
        partitions = [p for state in states.values() for p in state.partitions]
        self.samples.append(Sample(now, {p.tp: p.position for p in partitions},
                                   {p.tp: p.lag for p in partitions},
                                   loop_lag.cumulative() if loop_lag is not None else []))

    def _since(self, now: float) -> Sample | None:
        """The oldest sample within RATE_OVER of `now`, if there is one older than the latest."""
        recent = [s for s in self.samples if now - s.at <= RATE_OVER]
        return recent[0] if len(recent) > 1 else None

    def rate(self, tp: TP) -> float | None:
        """Records per second the partition moved over the last RATE_OVER seconds (None: not known yet)."""
        if not self.samples:
            return None
        latest = self.samples[-1]
        first = self._since(latest.at)
        if first is None:
            return None
        before, after = first.positions.get(tp), latest.positions.get(tp)
        if before is None or after is None or after < before:
            return None
        return (after - before) / (latest.at - first.at)

    def trend(self, tp: TP) -> list[int | None]:
        """The partition's lag at each sample kept, oldest first."""
        return [s.lags.get(tp) for s in self.samples]

    def loop_lag_p99(self) -> float | None:
        """The 99th percentile (a bucket's bound, seconds) of the loop's lag over the last RATE_OVER s."""
        if not self.samples:
            return None
        latest = self.samples[-1]
        first = self._since(latest.at)
        if first is None or not latest.loop_lag or len(first.loop_lag) != len(latest.loop_lag):
            return None
        counts = [(bound, b - a) for (bound, b), (_, a) in zip(latest.loop_lag, first.loop_lag, strict=True)]
        total = counts[-1][1]
        if total <= 0:
            return None
        return next(bound for bound, count in counts if count >= 0.99 * total)


async def worker_overview(worker: Worker, samples: PageSamples, watchdog: Watchdog | None) -> dict[str, Any]:
    """This worker as the page shows it (engine.web.views merges the workers')."""
    states = await worker.conductor.task_states()
    monitor = worker.loop_monitor
    samples.take(states, monitor.lag if monitor is not None else None, time.monotonic())
    assigned, tasks, consumer = worker.assigned(), worker.tasks, worker.consumer
    waiting = watchdog.unmoved() if watchdog is not None else {}
    partitions = []
    for number, state in states.items():
        for p in state.partitions:
            tp = p.tp
            partitions.append({
                "topic": tp.topic, "partition": tp.partition, "task": number, "committed": p.committed,
                "position": p.position, "lag": p.lag, "records_per_s": samples.rate(tp),
                "lag_trend": samples.trend(tp), "waiting_s": waiting.get(number), "paused": list(p.paused),
                "state": p.text()})
    stuck = [{"agent": agent, "topic": event.topic, "partition": event.partition, "offset": event.offset,
              "seconds": seconds} for agent, event, seconds in (watchdog.stuck() if watchdog else [])]
    p99 = samples.loop_lag_p99()
    return {
        "app": worker.app.id, "worker": worker.placement.endpoint, "time": time.time(),
        "protocol": consumer.group_protocol, "generation": consumer.group_generation(),
        "tasks": {"active": sorted(assigned),
                  "recovering": sorted(n for n, ready in assigned.items() if not ready),
                  "standby": sorted(tasks.standby)},
        "rebalances": tasks.rebalances, "changes": [change.as_json() for change in tasks.history.changes],
        "partitions": partitions, "stuck": stuck, "tables": _tables(worker),
        "recovery": _recovery(worker),
        "dead_letters": _dead_letters(worker), "late": _late(worker),
        "loop_lag_p99_ms": None if p99 is None else p99 * 1000,
        "agents": {runner.agent.name: {"events": runner.received, "dead_letters": runner.dead_letters}
                   for runner in worker.runners},
    }


def _tables(worker: Worker) -> list[dict[str, Any]]:
    """Each table's partitions here, its keys (the stores' estimates: counting would scan them), its bytes on
    disk, its late events; a windowed table's keys are its windows (key, window) kept."""
    found = []
    for table in worker.app.tables.values():
        parts = list(table.active.items())
        windowed = table.windowed
        found.append({
            "name": table.name, "kind": table_detail(table), "partitions": table.partition_count,
            "here": sorted(number for number, _ in parts),
            "keys": sum(part.store.approximate_len() for _, part in parts),
            "disk_bytes": sum(part.store.disk_bytes() for _, part in parts),
            "late_events": windowed.late_events if windowed is not None else None,
        })
    return found


def _recovery(worker: Worker) -> dict[str, Any]:
    progress = worker.tables.progress if worker.tables is not None else None
    if progress is None:
        return {"applied": 0, "remaining": 0, "records_per_s": None}
    return {"applied": progress.applied, "remaining": progress.remaining, "records_per_s": progress.rate}


def _dead_letters(worker: Worker) -> dict[str, Any]:
    latest = sorted((letter for runner in worker.runners for letter in runner.latest_dead_letters),
                    key=lambda letter: -letter.at)
    return {
        "counts": {runner.agent.name: runner.dead_letters for runner in worker.runners},
        "topics": {runner.agent.name: runner.dlq.name for runner in worker.runners},
        "latest": [{"at": letter.at, "agent": o.agent, "topic": o.topic, "partition": o.partition,
                    "offset": o.offset, "error": f"{o.error_type}: {o.error}", "key": letter.key,
                    "value": letter.value} for letter in latest[:10] if (o := letter.origin)],
    }


def _late(worker: Worker) -> dict[str, Any]:
    windowed = [(table.name, kind) for table in worker.app.tables.values()
                if (kind := table.windowed) is not None]
    latest = sorted(((name, late) for name, kind in windowed for late in kind.latest_late_events),
                    key=lambda entry: -entry[1].at)
    return {
        "counts": {name: kind.late_events for name, kind in windowed},
        "latest": [{"at": late.at, "table": name, "topic": late.topic, "partition": late.partition,
                    "offset": late.offset, "behind_s": late.behind_ms / 1000} for name, late in latest[:10]],
    }
