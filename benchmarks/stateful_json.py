"""Stateful JSON count: JSON objects (~60 bytes, `value_type=dict`) counted per key. A raw aiokafka loop that
decodes each value with orjson and counts into a dict, against an engine agent counting into a RocksDB table
with a changelog.

    .venv/bin/python -m benchmarks.stateful_json [--broker host:port] [--messages 200000] [--rounds 3]
        [--processes N] [--pipeline count|group_by|tumbling]

With `--pipeline`, engine's job is instead a declarative pipeline (engine.pipelines): `count` is
`app.stream(events).count("counts")`, `group_by` re-keys by the value's user first (through its repartition
topic; each round then also runs the raw loop through a repartition topic of its own, and gives engine's
ratio to that too), `tumbling` counts into 1-minute tumbling windows. Its rate runs from the first record
processed to the last (the processed positions of the source's partitions, then of the topic the count
reads, every 2 ms: a pipeline has no body to time in).

Both jobs read the same preloaded topic (1,000 keys; each in its own consumer group) on the same broker in
the same run, alternating. Rates are events/s from the first record to the last one counted; the raw loop
does no I/O per event (its dict is its state), engine's table writes its store and changelog at checkpoints.
The figure that matters is engine/raw (median over rounds); by CPU time per event too, which a busy machine
disturbs less than wall time. Both freeze the start-up heap, as `engine worker`
does. Checked: both count every event of every key.

With `--processes N`, the contenders are instead the same count as an `engine worker` (one process) and as
`engine worker --processes N` (N members under a supervisor), both free to run on every core (the broker
this benchmark starts stays pinned to the last one): events/s from the moment the group is stable with all
its members to the moment it has committed the topic to its end, as the broker reports (the group's lag,
read every 0.1 s; the app commits every 0.2 s). The figure is N processes / one (median over rounds).
Checked: each run's changelog holds every key's exact count.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import engine
from benchmarks.common import broker, create_topics, median, parser, preload
from benchmarks.peers.engine_json_count import make_app
from engine.errors import TransportError
from engine.events import TP
from engine.runtime import settle_heap
from engine.transport import transport_for
from tests.integration.helpers import latest, read_all

if TYPE_CHECKING:
    from collections.abc import Callable

    # What runs beside the worker while it counts (benchmarks.page_cost's polls)
    Beside = Callable[[engine.Worker], contextlib.AbstractAsyncContextManager[object]]


async def raw_count(bootstrap: str, source: str, count: int) -> tuple[float, float, Counter[str]]:
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=f"raw-{uuid.uuid4().hex}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_poll_records=1000)
    await consumer.start()
    settle_heap()
    counts: Counter[str] = Counter()
    seen = 0
    started = None
    cpu = 0.0
    try:
        while seen < count:
            batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            if started is None and batches:
                started, cpu = time.perf_counter(), time.process_time()
            for records in batches.values():
                for record in records:
                    value = orjson.loads(record.value)
                    counts[value["user"]] += 1
                seen += len(records)
        assert started is not None
        return count / (time.perf_counter() - started), (time.process_time() - cpu) / count * 1e6, counts
    finally:
        gc.unfreeze()
        await consumer.stop()


async def raw_group_by(bootstrap: str, source: str, count: int, partitions: int) -> tuple[float, float,
                                                                                        Counter[str]]:
    """The raw loop with a repartition, as a group_by written by hand would do it: each event decoded, sent
    re-keyed by its user to a topic of its own (aiokafka's send, each enqueued in turn) and counted by a
    second consumer of that topic, in the same process. Events/s and CPU µs/event from the first record
    read to the last counted."""
    through = f"raw-repartition-{uuid.uuid4().hex[:6]}"
    await create_topics(bootstrap, [through], partitions)
    group = f"raw-{uuid.uuid4().hex}"
    reader = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group,
                              auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=1000)
    counter = AIOKafkaConsumer(through, bootstrap_servers=bootstrap, group_id=f"{group}-counts",
                               auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=1000)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    for client in (reader, counter, producer):
        await client.start()
    settle_heap()
    counts: Counter[str] = Counter()
    started: list[float] = []

    async def forward() -> None:
        forwarded = 0
        while forwarded < count:
            batches = await reader.getmany(timeout_ms=500, max_records=1000)
            if not started and batches:
                started.extend((time.perf_counter(), time.process_time()))
            for records in batches.values():
                for record in records:
                    value = orjson.loads(record.value)
                    await producer.send(through, orjson.dumps(value), key=value["user"].encode())
                forwarded += len(records)

    async def count_users() -> None:
        seen = 0
        while seen < count:
            for records in (await counter.getmany(timeout_ms=500, max_records=1000)).values():
                for record in records:
                    counts[orjson.loads(record.value)["user"]] += 1
                seen += len(records)

    try:
        await asyncio.gather(forward(), count_users())
        return (count / (time.perf_counter() - started[0]), (time.process_time() - started[1]) / count * 1e6,
                counts)
    finally:
        gc.unfreeze()
        for client in (reader, counter, producer):
            await client.stop()


async def engine_count(bootstrap: str, source: str, count: int, *, beside: Beside | None = None,
                       **settings: object) -> tuple[float, float, Counter[str]]:
    """The agent's count: events/s and CPU µs per event from its first event to its last, and its counts.
    `beside`: what runs beside the worker once it started (benchmarks.page_cost: a page polling it);
    `settings`: the App's own."""
    data_dir = tempfile.mkdtemp(prefix="bench-json-")
    app = engine.App(f"bench-{uuid.uuid4().hex[:8]}", broker=f"kafka://{bootstrap}", data_dir=data_dir,
                     **settings)
    events = app.topic(source, key_type=str, value_type=dict)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    done = asyncio.Event()
    seen = 0
    first: list[float] = []
    last: list[float] = []  # (measured at the last event: what runs beside may go on after it)

    @app.agent(events)
    async def count_users(stream):
        nonlocal seen
        async for key, _value in stream.items():  # (decoded as the raw loop's are)
            if not first:
                first.extend((time.perf_counter(), time.process_time()))
            counts[key] += 1  # the key is the value's user (preload keys by user; checked at the end)
            seen += 1
            if seen == count:
                last.extend((time.perf_counter(), time.process_time()))
                done.set()

    worker = engine.Worker(app, app.settings())
    await worker.start()
    settle_heap()  # as engine worker does after start-up
    try:
        async with beside(worker) if beside is not None else contextlib.nullcontext():
            await done.wait()
        rate = count / (last[0] - first[0])
        cpu = (last[1] - first[1]) / count * 1e6
        return rate, cpu, Counter({f"user-{key}": n for key, n in counts.items()})
    finally:
        gc.unfreeze()
        worker.request_stop()
        await worker.run_until_stopped()
        shutil.rmtree(data_dir, ignore_errors=True)


async def _polled(condition: Callable[[], bool]) -> None:
    """Return once `condition()` holds, checked every 2 ms (a pipeline has no body of ours to signal from)."""
    while True:
        if condition():
            return
        await asyncio.sleep(0.002)


async def pipeline_count(bootstrap: str, source: str, count: int, kind: str) -> tuple[float, float,
                                                                                    Counter[str]]:
    """The count as a pipeline of `kind` (count, group_by, tumbling): events/s and CPU µs/event from the first
    record processed to the last, and its counts per user."""
    data_dir = tempfile.mkdtemp(prefix="bench-json-pipeline-")
    app = engine.App(f"bench-{uuid.uuid4().hex[:8]}", broker=f"kafka://{bootstrap}", data_dir=data_dir)
    events = app.topic(source, key_type=str, value_type=dict)
    pipeline = app.stream(events)
    if kind == "group_by":
        pipeline = pipeline.group_by(lambda value: value["user"], key_type=str)
    elif kind == "tumbling":
        pipeline = pipeline.tumbling(60)
    counted = pipeline.count("counts")
    table = getattr(counted, "table", counted)  # (a windowed pipeline's table underneath)
    worker = engine.Worker(app, app.settings())
    await worker.start()
    settle_heap()  # as engine worker does after start-up

    # What the aggregation reads: the source, or the repartition topic a group_by forwards every event to.
    last = f"{app.id}-counts-0-repartition" if kind == "group_by" else source

    def processed(topic: str) -> int:
        return sum(lease.position or 0 for tp, lease in worker.conductor.leases.current.items()
                   if tp.topic == topic)

    try:
        await _polled(lambda: processed(source) > 0)
        started, cpu, at_start = time.perf_counter(), time.process_time(), processed(source)
        await _polled(lambda: processed(last) >= count)
        done = count
        rate = (done - at_start) / (time.perf_counter() - started)
        cpu_per_event = (time.process_time() - cpu) / (done - at_start) * 1e6
        totals: Counter[str] = Counter()
        for key, n in table.items():
            user = key[0] if kind == "tumbling" else key
            totals[user if kind == "group_by" else f"user-{user}"] += n
        return rate, cpu_per_event, totals
    finally:
        gc.unfreeze()
        worker.request_stop()
        await worker.run_until_stopped()
        shutil.rmtree(data_dir, ignore_errors=True)


ROOT = Path(__file__).resolve().parents[1]


def _every_core() -> None:
    """(Run by the worker between fork and exec: this process may be pinned to one core, see common.py.)"""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))


async def worker_processes(bootstrap: str, source: str, count: int, processes: int) -> float:
    """The count as `engine worker --processes N` (N=1: a lone worker in its process): events/s from the group
    stable with its N members to the topic committed to its end. Checked: every key's count exact."""
    app = make_app(f"bench-{uuid.uuid4().hex[:8]}", source, bootstrap)
    data_dir = Path(tempfile.mkdtemp(prefix="bench-json-processes-"))
    log = data_dir / "log.txt"
    env = {**os.environ, "BENCH_GROUP": app.id, "BENCH_TOPIC": source, "BENCH_BOOTSTRAP": bootstrap,
           "ENGINE_DATA_DIR": str(data_dir), "ENGINE_WEB_PORT": "0"}
    transport = transport_for(app.settings())
    admin, reader = transport.admin(), transport.consumer(group_id=None)
    await reader.start()
    output = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli.main", "worker", "-A", "benchmarks.peers.engine_json_count",
        "--loglevel", "WARNING", "--processes", str(processes), env=env, cwd=ROOT, stdout=output,
        stderr=output, preexec_fn=_every_core)
    os.close(output)
    try:
        tps = [TP(source, p) for p in range((await admin.describe_topics())[source])]
        ends = {tp: end for tp, (_, end) in (await reader.offsets(tps)).items()}
        settled: tuple[float, int] | None = None
        while True:
            try:
                group = await admin.describe_group(app.id)
                committed = await admin.committed(app.id)
            except TransportError:  # (a new broker: its group coordinator not known yet)
                await asyncio.sleep(0.1)
                continue
            now = time.perf_counter()
            lag = sum(end - committed.get(tp, 0) for tp, end in ends.items())
            if settled is None and group.state == "Stable" and len(group.members) == processes:
                settled = (now, lag)
            if settled is not None and lag == 0:
                break
            if worker.returncode is not None:
                raise RuntimeError(f"the worker exited with {worker.returncode}; see {log}")
            await asyncio.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(worker.wait(), 120)
        await reader.stop()
        await admin.close()
    assert code == 0, f"the worker exited with {code}; see {log}"
    counts = latest(await read_all(bootstrap, f"{app.id}-counts-changelog"))
    assert counts == {str(k): count // 1000 + (k < count % 1000) for k in range(min(count, 1000))}, (
        "every key's count")
    shutil.rmtree(data_dir, ignore_errors=True)
    if settled[1] < count // 2:
        print(f"  (the group settled with {settled[1]} of {count} events left: use more --messages)")
    return settled[1] / (now - settled[0])


async def compare_processes(bootstrap: str, source: str, count: int, processes: int, rounds: int) -> None:
    ratios = []
    for round_ in range(rounds):
        order = [1, processes] if round_ % 2 == 0 else [processes, 1]
        rates = {n: await worker_processes(bootstrap, source, count, n) for n in order}
        ratios.append(rates[processes] / rates[1])
        print(f"round {round_ + 1}: engine worker {rates[1]:,.0f} events/s, --processes {processes} "
              f"{rates[processes]:,.0f} events/s, ratio {ratios[-1]:.2f}")
    print(f"median of {rounds}: --processes {processes} / one process {median(ratios):.2f}")


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--processes", type=int, help="compare engine worker --processes N with one process")
    p.add_argument("--pipeline", choices=["count", "group_by", "tumbling"],
                   help="engine's job as a pipeline of this kind instead of an agent")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with broker(args.broker) as bootstrap:
        source = f"json-count-{uuid.uuid4().hex[:6]}"
        await create_topics(bootstrap, [source], args.partitions)
        took = await preload(bootstrap, source, args.messages)
        print(f"preloaded {args.messages} messages on {args.partitions} partitions in {took:.1f}s")
        if args.processes:
            await compare_processes(bootstrap, source, args.messages, args.processes, args.rounds)
            return
        ratios: list[float] = []
        cpu_ratios: list[float] = []
        through_ratios: list[float] = []
        through_cpu_ratios: list[float] = []
        for round_ in range(args.rounds):
            raw, raw_cpu, raw_counts = await raw_count(bootstrap, source, args.messages)
            eng, eng_cpu, eng_counts = await (
                pipeline_count(bootstrap, source, args.messages, args.pipeline) if args.pipeline
                else engine_count(bootstrap, source, args.messages))
            assert eng_counts == raw_counts, "both count every event of every key"
            ratios.append(eng / raw)
            cpu_ratios.append(raw_cpu / eng_cpu)
            print(f"round {round_ + 1}: raw aiokafka+orjson+dict {raw:,.0f} events/s ({raw_cpu:.2f} CPU "
                  f"µs/event), engine {args.pipeline or 'agent'} {eng:,.0f} events/s ({eng_cpu:.2f} CPU "
                  f"µs/event), engine/raw {ratios[-1]:.2f}")
            if args.pipeline == "group_by":  # against a raw loop that repartitions too
                through, through_cpu, through_counts = await raw_group_by(bootstrap, source, args.messages,
                                                                          args.partitions)
                assert through_counts == raw_counts, "both count every event of every key"
                through_ratios.append(eng / through)
                through_cpu_ratios.append(through_cpu / eng_cpu)
                print(f"round {round_ + 1}: raw loop through a repartition topic {through:,.0f} events/s "
                      f"({through_cpu:.2f} CPU µs/event), engine/that {through_ratios[-1]:.2f}")
        print(f"median of {args.rounds}: engine/raw {median(ratios):.2f} (by CPU per event: "
              f"{median(cpu_ratios):.2f})")
        if through_ratios:
            print(f"median of {args.rounds}: engine/raw through a repartition topic "
                  f"{median(through_ratios):.2f} (by CPU per event: {median(through_cpu_ratios):.2f})")


if __name__ == "__main__":
    asyncio.run(main())
