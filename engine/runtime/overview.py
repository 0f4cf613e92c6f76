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

from engine.scope import running_as
from engine.topology.graph import graph_of, table_detail

if TYPE_CHECKING:
    from engine.events import TP
    from engine.fetch.stalls import TaskState
    from engine.monitors.watchdog import Watchdog
    from engine.processing.runner import DeadLetter
    from engine.runtime.worker import Worker
    from engine.stats import Histogram

KEPT = 60  # samples kept at most: two minutes of a page polling every 2 s
KEPT_FOR = 120.0  # seconds a sample is kept (a page opened again an hour later starts a new trend)
SPACING = 1.0  # seconds between two samples at least (several pages open poll no faster than one)
RATE_OVER = 10.0  # seconds a partition's rate is measured over (from the oldest sample that recent)
LATEST = 10  # latest dead letters and late events of this worker shown


@dataclass
class Sample:
    at: float  # monotonic seconds
    positions: dict[TP, int | None]
    lags: dict[TP, int | None]
    loop_lag: list[tuple[float, int]]  # the event loop's lag histogram, cumulative
    restored: int  # changelog records the worker's restores applied, in all


@dataclass
class PageSamples:
    """The worker's partitions' positions and lags and its loop's lag, as the page's asks sampled them."""

    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=KEPT))

    def take(self, states: dict[int, TaskState], loop_lag: Histogram | None, restored: int,
             now: float) -> None:
        samples = self.samples
        while samples and now - samples[0].at > KEPT_FOR:
            samples.popleft()
        if samples and now - samples[-1].at < SPACING:
            return
        partitions = [p for state in states.values() for p in state.partitions]
        samples.append(Sample(now, {p.tp: p.position for p in partitions}, {p.tp: p.lag for p in partitions},
                              loop_lag.cumulative() if loop_lag is not None else [], restored))

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

    def restore_rate(self) -> float | None:
        """Changelog records per second the worker's restores applied over the last RATE_OVER seconds."""
        if not self.samples:
            return None
        latest = self.samples[-1]
        first = self._since(latest.at)
        return None if first is None else (latest.restored - first.restored) / (latest.at - first.at)

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
        bound = next(bound for bound, count in counts if count >= 0.99 * total)
        return bound if bound != float("inf") else counts[-2][0]  # (past the last bound: at least that)


class PageSource:
    """What the page shows of one worker: its overview, and the app's topology as a graph, drawn again only
    when it changed (`declare_late` adds topics)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.samples = PageSamples()
        self._drawn: tuple[int, dict[str, Any]] | None = None  # (topics when drawn, the graph)

    def graph(self) -> dict[str, Any]:
        topology = self.worker.topology
        if self._drawn is None or self._drawn[0] != len(topology.topics):
            self._drawn = (len(topology.topics), graph_of(self.worker.app, topology).as_json())
        return self._drawn[1]

    async def overview(self) -> dict[str, Any]:
        with running_as(self.worker):  # (tables read as this worker has them, whoever asks)
            return await worker_overview(self.worker, self.samples, self.worker.watchdog)


async def worker_overview(worker: Worker, samples: PageSamples, watchdog: Watchdog | None) -> dict[str, Any]:
    """This worker as the page shows it (engine.web.views merges the workers')."""
    states = await worker.conductor.task_states()
    monitor = worker.loop_monitor
    progress = worker.tables.progress if worker.tables is not None else None
    samples.take(states, monitor.lag if monitor is not None else None,
                 progress.applied if progress is not None else 0, time.monotonic())
    assigned, tasks, consumer = worker.assigned(), worker.tasks, worker.consumer
    waiting = watchdog.unmoved(states) if watchdog is not None else {}
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
        "partitions": partitions, "stuck": stuck, "tables": _tables(worker, await _standby_lags(worker)),
        "recovery": {"applied": progress.applied if progress is not None else 0,
                     "remaining": max(progress.remaining, 0) if progress is not None else 0,
                     "records_per_s": samples.restore_rate()},
        "dead_letters": _dead_letters(worker), "late": _late(worker),
        "loop_lag_p99_ms": None if p99 is None else p99 * 1000,
        "agents": {runner.agent.name: {"events": runner.received, "dead_letters": runner.dead_letters}
                   for runner in worker.runners},
    }


async def _standby_lags(worker: Worker) -> dict[TP, int | None]:
    """The changelog partitions of this worker's standby tasks, each with the records it has yet to apply."""
    if worker.tables is None:
        return {}
    standby = worker.tasks.standby
    return {tp: lag for tp, lag in (await worker.tables.follow_lags()).items() if tp.partition in standby}


def _tables(worker: Worker, standby_lags: dict[TP, int | None]) -> list[dict[str, Any]]:
    """Each table's partitions here, its keys (the stores' estimates: counting would scan them), its bytes on
    disk, its late events, its standby partitions here with their lag; a windowed table's keys are its
    windows (key, window) kept."""
    found = []
    for table in worker.app.tables.values():
        changelog = table.changelog_topic.name
        parts = list(table.active.items())
        windowed = table.windowed
        found.append({
            "name": table.name, "kind": table_detail(table), "global": table.is_global,
            "partitions": table.partition_count,
            "here": sorted(number for number, _ in parts),
            "keys": sum(part.store.approximate_len() for _, part in parts),
            "disk_bytes": sum(part.store.disk_bytes() for _, part in parts),
            "late_events": windowed.late_events if windowed is not None else None,
            "windows_closed": table.windows_closed if windowed is not None else None,
            "standby": {str(tp.partition): lag for tp, lag in sorted(standby_lags.items())
                        if tp.topic == changelog},
        })
    return found


def _dead_letters(worker: Worker) -> dict[str, Any]:
    latest = sorted((letter for runner in worker.runners for letter in runner.latest_dead_letters),
                    key=lambda letter: -letter.at)
    return {
        "counts": {runner.agent.name: runner.dead_letters for runner in worker.runners},
        "topics": {runner.agent.name: runner.dlq.name for runner in worker.runners},
        "latest": [_dead_letter(letter) for letter in latest[:LATEST]],
    }


def _dead_letter(letter: DeadLetter) -> dict[str, Any]:
    origin = letter.origin
    return {"at": letter.at, "agent": origin.agent, "topic": origin.topic, "partition": origin.partition,
            "offset": origin.offset, "error": origin.error, "key": letter.key, "value": letter.value}


def _late(worker: Worker) -> dict[str, Any]:
    windowed = [(table.name, kind) for table in worker.app.tables.values()
                if (kind := table.windowed) is not None]
    latest = sorted(((name, late) for name, kind in windowed for late in kind.latest_late_events),
                    key=lambda entry: -entry[1].at)
    return {
        "counts": {name: kind.late_events for name, kind in windowed},
        "latest": [{"at": late.at, "table": name, "topic": late.topic, "partition": late.partition,
                    "offset": late.offset, "behind_s": late.behind_ms / 1000}
                   for name, late in latest[:LATEST]],
    }
