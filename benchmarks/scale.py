"""Membership changes past one machine, by simulation (issue 36, item 5): what one worker joining and then one
leaving cost a group of N workers over P partitions, under the classic group protocol and the streams one
(KIP-1071).

    .venv/bin/python -m benchmarks.scale [--workers 3 10 30] [--partitions 64 256] \
        [--protocol classic streams] [--per-partition 4] [--quiet 10] [--factor 2]

The N workers are `engine.Worker`s of one app in this process, on one event loop (engine.scope lets workers of
one App share a process), each with its own data dir, memory stores and web server (a streams member asks the
others' to heartbeat at once when its change moves tasks), members of one group on the benchmark's broker:
lightweight, but each with its own consumer, producer, membership and tasks, as a worker process has. The
app counts each event of a P-partition topic into a table (its changelog on the broker) and notes when it
processed it. A paced stream sends `--per-partition` events/s to every partition (one key per partition,
round robin), for the whole run.

The group settles (every partition active and set up on one worker, every worker holding some, from the
workers' own `status()`), runs `--quiet` seconds, then a worker joins; it settles again and runs `--quiet`
seconds, then the first worker leaves by a clean stop (what SIGTERM does: its tasks checkpointed and closed,
the group left); it settles again and runs `--quiet` seconds. For each change:

- settled: seconds from the change (the new worker's start called, the old one's stop asked) until the
  workers' task states show the group settled again;
- paused: the partitions whose longest gap in processing, from the change until `--quiet` seconds after the
  group settled, was more than `--factor` times their longest gap in the quiet seconds before the change
  (from 2 s after the previous settling on); a revoked partition pauses by this measure, as it stops;
- resumed: seconds from the change until every paused partition processed again (the end of the longest gap
  of the last to resume): the time until every task runs again;
- moved: the partitions whose active owner after the change is another than before.

Run time: each configuration takes about 3 x `--quiet` seconds plus the settlings; the whole default set,
12 configurations, about 15-25 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka.admin import AIOKafkaAdminClient

import engine
from benchmarks.common import broker, create_topics, median
from benchmarks.rebalance import Holding, holding_of, longest_gap
from engine.partitioner import partition_for
from tests.integration.rebalance_run import paced_produce

if TYPE_CHECKING:
    from collections.abc import Iterator

log = logging.getLogger("benchmarks.scale")


def simulated_app(app_id: str, bootstrap: str, topic: str, processed: list[list[float]]) -> engine.App:
    """The app every simulated worker runs: each event counted into a memory table (with its changelog), and
    the time it was processed noted in `processed[partition]`."""
    app = engine.App(app_id, broker="kafka://" + bootstrap, store="memory://", commit_interval=0.2)
    source = app.topic(topic, key_type=str, value_type=dict)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def process(stream: Any) -> None:
        async for event in stream.events():
            counts[event.key] += 1
            processed[event.partition].append(time.time())

    return app


def keys_for(partitions: int) -> list[str]:
    """One key for each partition, in partition order (the one Kafka's default partitioner puts there)."""
    found: dict[int, str] = {}
    for n in itertools.count():
        key = f"k{n}"
        found.setdefault(partition_for(key.encode(), partitions), key)
        if len(found) == partitions:
            return [found[p] for p in range(partitions)]
    raise AssertionError("unreachable")


def round_robin(partitions: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """Events to every partition in turn, endlessly."""
    keys = keys_for(partitions)
    for i in itertools.count():
        yield keys[i % partitions], {"id": i}


@dataclass
class Group:
    """The simulated workers of one app, each started as a worker process would be and stopped as SIGTERM
    stops one."""

    app: engine.App
    overrides: dict[str, Any]
    work: Path
    partitions: int
    workers: dict[str, engine.Worker] = field(default_factory=dict)
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def add(self, name: str) -> None:
        settings = self.app.settings({**self.overrides, "data_dir": str(self.work / name)})
        worker = engine.Worker(self.app, settings, watch_loop=False)  # one loop: no thread per worker
        self.workers[name] = worker
        await worker.start()
        self.running[name] = asyncio.ensure_future(worker.run_until_stopped())

    async def remove(self, name: str) -> None:
        self.workers.pop(name).request_stop()
        await self.running.pop(name)

    async def stop(self) -> None:
        for worker in self.workers.values():
            worker.request_stop()
        await asyncio.gather(*self.running.values(), return_exceptions=True)
        self.workers.clear()
        self.running.clear()

    def holding(self) -> Holding:
        return holding_of({name: worker.status() for name, worker in self.workers.items()}, self.partitions)

    async def settled(self, timeout: float) -> tuple[float, Holding]:
        """When the group settled (Holding.settled, no standbys), and who holds what then."""
        deadline = time.monotonic() + timeout
        while True:
            now = self.holding()
            if now.settled(list(self.workers), 0):
                return time.time(), now
            for name, task in self.running.items():
                if task.done():
                    task.result()  # a failed worker's error
                    raise RuntimeError(f"worker {name} stopped")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the group did not settle in {timeout:.0f} s: {now}")
            await asyncio.sleep(0.1)


@dataclass(frozen=True)
class Change:
    """What one membership change cost (the module's docstring defines each figure)."""

    protocol: str
    workers: int
    partitions: int
    change: str
    settled: float
    resumed: float
    paused: int
    moved: int
    baseline_max: float
    baseline_median: float
    pause_max: float


def measure(processed: list[list[float]], *, protocol: str, workers: int, change: str, at: float,
            since: float, until: float, before: Holding, after: Holding, settled: float,
            factor: float) -> Change:
    partitions = len(processed)
    baseline: list[float] = []
    paused: list[tuple[float, float]] = []  # (gap, when it ended) of each paused partition
    for times in processed:
        ordered = sorted(times)
        usual, _ = longest_gap(ordered, since, at)
        gap, ended = longest_gap(ordered, at, until)
        baseline.append(usual)
        if gap > factor * usual:
            paused.append((gap, ended))
    moved = sum(before.owner[p] != after.owner[p] for p in range(partitions))
    return Change(protocol, workers, partitions, change, settled - at,
                  max((ended for _, ended in paused), default=at) - at, len(paused), moved, max(baseline),
                  median(baseline), max((gap for gap, _ in paused), default=0.0))


async def run(bootstrap: str, protocol: str, workers: int, partitions: int, per_partition: float,
              quiet: float, factor: float, settle_timeout: float = 300) -> list[Change]:
    """N workers settle, one joins, then the first leaves: what each change cost."""
    app_id = f"scale-{uuid.uuid4().hex[:8]}"
    topic = f"{app_id}-in"
    await create_topics(bootstrap, [topic], partitions)
    await visible(bootstrap, topic)
    processed: list[list[float]] = [[] for _ in range(partitions)]
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    group = Group(simulated_app(app_id, bootstrap, topic, processed),
                  {"web_enabled": True, "web_port": 0, "group_protocol": protocol}, work, partitions)
    stream = asyncio.ensure_future(paced_produce(bootstrap, topic, round_robin(partitions),
                                                 rate=per_partition * partitions))
    names = [f"w{n:02d}" for n in range(workers + 1)]
    results: list[Change] = []
    try:
        started = time.time()
        await asyncio.gather(*(group.add(name) for name in names[:workers]))
        settled, before = await group.settled(settle_timeout)
        print(f"  {protocol}, {workers} workers, {partitions} partitions: settled {settled - started:.1f} s "
              f"after starting", flush=True)
        for change, name in (("join", names[-1]), ("leave", names[0])):
            await asyncio.sleep(quiet)
            before = group.holding()
            at = time.time()
            await (group.add(name) if change == "join" else group.remove(name))
            done, after = await group.settled(settle_timeout)
            await asyncio.sleep(quiet)
            results.append(measure(processed, protocol=protocol, workers=workers, change=change, at=at,
                                   since=settled + 2, until=time.time(), before=before, after=after,
                                   settled=done, factor=factor))
            print(f"  {row(results[-1])}", flush=True)
            settled = done
    finally:
        await group.stop()
        stream.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stream
        await delete_topics(bootstrap, app_id)
        shutil.rmtree(work, ignore_errors=True)
    return results


async def visible(bootstrap: str, topic: str) -> None:
    """Once the broker lists a topic just created: a worker that described the topics before it did would
    create the app's changelog with the default partition count, not the input's."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        while topic not in await admin.list_topics():  # noqa: ASYNC110  # the broker, not this process
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, app_id: str) -> None:
    """The run's topics (its input, the app's changelog and internal topics), so runs do not pile up."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([t for t in await admin.list_topics() if t.startswith(app_id)])
    finally:
        await admin.close()


HEADER = ("| protocol | workers | partitions | change | settled (s) | every partition running again (s) | "
          "paused | moved | longest pause (s) | baseline gap max / median (s) |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def row(c: Change) -> str:
    return (f"| {c.protocol} | {c.workers} | {c.partitions} | {c.change} | {c.settled:.2f} | "
            f"{c.resumed:.2f} | {c.paused}/{c.partitions} | {c.moved} | {c.pause_max:.2f} | "
            f"{c.baseline_max:.2f} / {c.baseline_median:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--broker", help="host:port of a running Kafka (default: start one)")
    p.add_argument("--workers", type=int, nargs="+", default=[3, 10, 30], help="group sizes before the join")
    p.add_argument("--partitions", type=int, nargs="+", default=[64, 256])
    p.add_argument("--protocol", nargs="+", choices=["classic", "streams"], default=["classic", "streams"])
    p.add_argument("--per-partition", type=float, default=4, help="events/s sent to each partition")
    p.add_argument("--quiet", type=float, default=10, help="seconds the group runs between changes")
    p.add_argument("--factor", type=float, default=2, help="a paused partition's gap over its baseline's")
    args = p.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-scale-logs-")) / "workers.log"
    logging.basicConfig(filename=logs, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    print(f"the workers' log: {logs}")
    results: list[Change] = []
    with broker(args.broker) as bootstrap:
        for partitions in args.partitions:
            for workers in args.workers:
                for protocol in args.protocol:
                    results += asyncio.run(run(bootstrap, protocol, workers, partitions, args.per_partition,
                                               args.quiet, args.factor))
    print(HEADER)
    for result in results:
        print(row(result))


if __name__ == "__main__":
    main()
