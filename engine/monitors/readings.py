"""What a worker reports on `GET /metrics`: its counters and histograms, read where they are kept, as
metric families (engine.monitors.metrics renders them).

Counted on the per-event path: events handed to each agent and records fetched per topic (per batch, by the
conductor), records sent per topic (an increment in `Topic.send`), and the processing time of one event in
TIMED_EVERY per agent (engine.streams.stream). Everything else is counted where it happens off that
path (checkpoints, rebalances, dead letters, restarts, late events, recovery) or read when scraped (lag).
Topics and tables are the app's, shared by every worker of the app in one process: their counts are the
process's.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Protocol

from engine.monitors.metrics import Family

if TYPE_CHECKING:
    from engine.app import App
    from engine.fetch.conductor import Conductor
    from engine.monitors.loopwatch import LoopMonitor
    from engine.processing.runner import AgentRunner
    from engine.tables.manager import TableManager
    from engine.tasks.manager import TaskManager
    from engine.topics import Topic
    from engine.transport.base import Consumer


class Worker(Protocol):
    """What the readings read of a worker (engine.runtime.Worker is one): its parts, each where it counts."""

    @property
    def app(self) -> App: ...

    @property
    def conductor(self) -> Conductor: ...

    @property
    def consumer(self) -> Consumer: ...

    @property
    def loop_monitor(self) -> LoopMonitor | None: ...

    @property
    def runners(self) -> list[AgentRunner]: ...

    @property
    def tables(self) -> TableManager | None: ...

    @property
    def tasks(self) -> TaskManager: ...

    def all_topics(self) -> list[Topic]: ...


async def worker_families(worker: Worker) -> list[Family]:
    """Every metric of `worker`, as of now."""
    watched = worker.loop_monitor
    loop = [Family("engine_event_loop_lag_seconds", "How much later than scheduled the event loop ran a "
                   "timer (sampled every 0.1 s): time the loop spent on something else",
                   "histogram").add((), watched.lag)] if watched is not None else []
    return [*_events(worker), *_agents(worker), *await _lag(worker), *_checkpoints(worker),
            *_tables(worker), *_rebalances(worker), *loop, _python_heap()]


def _python_heap() -> Family:
    """The interpreter's own memory, apart from native memory (RocksDB's budget, the allocator's arenas):
    what tells a worker whose memory grows keeping Python objects from one whose native memory grows."""
    return Family("engine_python_allocated_blocks", "Memory blocks the interpreter holds for Python objects "
                  "(sys.getallocatedblocks): grows with the objects kept, not with native memory (the "
                  "process's, per process)", "gauge").add((), sys.getallocatedblocks())


def _events(worker: Worker) -> list[Family]:
    consumed = Family("engine_records_consumed", "Records fetched and dispatched to agents (or applied to "
                      "a table over the topic)", "counter", ("topic",))
    for name, count in sorted(worker.conductor.consumed.items()):
        consumed.add((name,), count)
    sent = Family("engine_records_sent", "Records sent through Topic.send and agent sinks (by every worker "
                  "of the app in this process)", "counter", ("topic",))
    for topic in sorted(worker.all_topics(), key=lambda t: t.name):
        if topic.sent:
            sent.add((topic.name,), topic.sent)
    return [consumed, sent]


def _agents(worker: Worker) -> list[Family]:
    received = Family("engine_agent_events", "Events handed to the agent's instances", "counter", ("agent",))
    timing = Family("engine_agent_event_seconds", "Processing time of one event, from its hand-over to the "
                    "agent until the agent asks for the next (one event in 32 is timed)", "histogram",
                    ("agent",))
    dead = Family("engine_agent_dead_letters", "Records the agent failed on, sent to its dead-letter topic",
                  "counter", ("agent",))
    restarts = Family("engine_agent_restarts", "Instances restarted after crashing outside any event",
                      "counter", ("agent",))
    for runner in worker.runners:
        name = (runner.agent.name,)
        received.add(name, runner.received)
        timing.add(name, runner.processing)
        dead.add(name, runner.dead_letters)
        restarts.add(name, runner.restarts)
    return [received, timing, dead, restarts]


async def _lag(worker: Worker) -> list[Family]:
    lag = Family("engine_consumer_lag", "Records in the partition past what this worker has fetched, as of "
                 "its last fetch", "gauge", ("topic", "partition"))
    consumer = worker.consumer
    for tp in sorted(consumer.assignment()):
        found = await consumer.lag(tp)
        if found is not None:
            lag.add((tp.topic, str(tp.partition)), found)
    return [lag]


def _checkpoints(worker: Worker) -> list[Family]:
    checkpoints = worker.tasks.checkpoints
    return [
        Family("engine_checkpoint_seconds", "Duration of a checkpoint (the pause for agents under "
               "exactly-once, the changelog writes, the commit)", "histogram").add((), checkpoints.durations),
        Family("engine_checkpoint_failures", "Checkpoints that failed (their tasks rewind or are lost)",
               "counter").add((), checkpoints.failures),
    ]


def _tables(worker: Worker) -> list[Family]:
    changelog = Family("engine_changelog_records", "Changelog records committed by checkpoints (by every "
                       "worker of the app in this process)", "counter", ("table",))
    closed = Family("engine_windows_closed", "Final results of windows sent to the table's closed() topic "
                    "and committed by this worker's checkpoints", "counter", ("table",))
    late = Family("engine_late_events", "Events too late for every window they belong to (past the grace): "
                  "dropped, or sent to the table's late topic", "counter", ("table",))
    local = Family("engine_table_partitions", "Table partitions active on this worker", "gauge", ("table",))
    for table in sorted(worker.app.tables.values(), key=lambda t: t.name):
        changelog.add((table.name,), table.changelog_records)
        if table.windowed is not None:
            late.add((table.name,), table.windowed.late_events)
            if table.windowed.closed_topic is not None:
                closed.add((table.name,), table.windows_closed)
    manager = worker.tables
    if manager is not None:
        for name, table in sorted(manager.tables.items()):
            local.add((name,), sum(1 for _ in table.active))
    progress = manager.progress if manager is not None else None
    memory = Family("engine_store_memory_bytes", "Memory the RocksDB stores hold outside Python's objects: "
                    "`total` charged to their shared budget (store_memory), `memtables` of it unflushed "
                    "writes", "gauge", ("part",))
    for part, size in sorted((manager.store_memory() if manager is not None else {}).items()):
        memory.add((part,), size)
    return [
        changelog, closed, late, local, memory,
        Family("engine_recovery_records", "Changelog records replayed into stores to recover "
               "partitions", "counter").add((), progress.applied if progress is not None else 0),
        Family("engine_recovery_records_remaining", "Changelog records left to replay before the "
               "partitions being recovered are ready", "gauge").add(
                   (), progress.remaining if progress is not None else 0),
    ]


def _rebalances(worker: Worker) -> list[Family]:
    tasks = worker.tasks
    return [
        Family("engine_rebalances", "Assignments this worker heard from the group", "counter").add(
            (), tasks.rebalances),
        Family("engine_rebalance_stall_seconds", "Time from a revoke (or an assignment) until the partitions "
               "assigned are processed again: the stall of each change of ownership", "histogram").add(
                   (), tasks.stalls),
        Family("engine_tasks", "Tasks on this worker, by kind", "gauge", ("kind",)).add(
            ("active",), len(tasks.active)).add(("standby",), len(tasks.standby)),
    ]
