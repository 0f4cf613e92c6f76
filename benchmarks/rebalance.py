"""Rebalance stall: how long partitions stop processing when a worker joins and when one leaves, and how
many events are processed twice.

    .venv/bin/python -m benchmarks.rebalance [--rate 2000] [--seconds 30] [--guarantee both] [--delay 0.0005]
    .venv/bin/python -m benchmarks.rebalance --scenario restart [--static]

A producer sends `rate` events/s for `seconds` to a 4-partition topic. Worker A (`engine worker`) runs from
the start; worker B joins at 1/3 of the run; A leaves with SIGTERM at 2/3. The app sends every processed
event on with its partition and processing time; read back (read_committed), each partition's longest gap
between two processed events around the join and around the leave is its stall (at 2,000 events/s a
partition normally goes about 2 ms without an event). Events seen more than once were processed twice.
`--delay` gives the agent that many seconds of work per event (a slow agent, whose worker falls behind).

`--scenario restart`: workers A and B run from the start; at 1/2 of the run B is stopped (SIGTERM) and
started again on its data dir (a rolling restart's step). Reported: each partition's longest stall from the
restart on, and the rebalances A went through. `--static` makes both static members (group_instance_id).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from benchmarks.common import broker, create_topics, median, parser
from tests.integration.rebalance_run import paced_produce

# The engine the workers run: this checkout, or another one (BENCH_ENGINE_ROOT) to compare before and after.
ROOT = Path(os.environ.get("BENCH_ENGINE_ROOT") or Path(__file__).resolve().parents[1])


def start_worker(env: dict[str, str], data_dir: Path, log: Path,
                 app: str = "benchmarks.peers.engine_rebalance_app:app") -> subprocess.Popen[bytes]:
    """`engine worker -A app` of the engine under ROOT, with `env` over this process's, logging to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker", "-A", app,
             "--data-dir", str(data_dir), "--loglevel", "INFO"],
            cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)


async def read_outputs(bootstrap: str, topic: str, expected: int, timeout: float = 120) -> list[dict]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        values: list[dict] = []
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    value = orjson.loads(record.value)
                    values.append(value)
                    seen.add(value["id"])
        await asyncio.sleep(2)  # late duplicates
        for records in (await consumer.getmany(timeout_ms=500)).values():
            values.extend(orjson.loads(r.value) for r in records)
        return values
    finally:
        await consumer.stop()


def stalls(values: list[dict], around: float, until: float) -> dict[int, float]:
    """Each partition's longest gap between processed events in [around - 1, until)."""
    out = {}
    for partition in range(4):
        times = sorted(v["at"] for v in values
                       if v["p"] == partition and around - 1 <= v["at"] < until)
        out[partition] = max((b - a for a, b in itertools.pairwise(times)), default=float("nan"))
    return out


async def run_restart(bootstrap: str, rate: float, seconds: float, guarantee: str, delay: float,
                      static: bool) -> None:
    app_id = f"restart-{uuid.uuid4().hex[:8]}"
    topic, out_topic = f"{app_id}-in", f"{app_id}-out"
    await create_topics(bootstrap, [topic, out_topic], 4)
    work = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    env = {"BENCH_BOOTSTRAP": bootstrap, "BENCH_GROUP": app_id, "BENCH_TOPIC": topic,
           "BENCH_OUT_TOPIC": out_topic, "BENCH_GUARANTEE": guarantee, "BENCH_DELAY": str(delay),
           **({"ENGINE_GROUP_INSTANCE_ID": "auto"} if static else {})}
    workers = {"a": start_worker(env, work / "a", work / "a.log")}
    while "tables ready" not in (work / "a.log").read_text(errors="replace"):  # noqa: ASYNC110  # a log file
        await asyncio.sleep(0.2)
    workers["b"] = start_worker(env, work / "b", work / "b.log")
    while "tables ready" not in (work / "b.log").read_text(errors="replace"):  # noqa: ASYNC110  # a log file
        await asyncio.sleep(0.2)
    await asyncio.sleep(3)  # settled
    moments: dict[str, float] = {}
    restarting: list[asyncio.Task[None]] = []

    async def restart() -> None:
        moments["restart"] = time.time()
        workers["b"].send_signal(signal.SIGTERM)
        await asyncio.to_thread(workers["b"].wait, 60)
        with (work / "b.log").open("ab") as log:
            log.write(b"--- restarted ---\n")
        workers["b"] = start_worker(env, work / "b", work / "b2.log")

    total = int(rate * seconds)
    events = [(f"k{i % 1000}", {"id": i}) for i in range(total)]
    await paced_produce(bootstrap, topic, events, rate=rate,
                        at={1 / 2: lambda: restarting.append(asyncio.ensure_future(restart()))})
    await asyncio.gather(*restarting)
    values = await read_outputs(bootstrap, out_topic, total)
    for worker in workers.values():
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    ids = [v["id"] for v in values]
    revokes = (work / "a.log").read_text(errors="replace").count("revoked ")
    membership = "static" if static else "dynamic"
    print(f"{guarantee}, {membership} members: {total} events at {rate:g}/s; processed "
          f"twice: {len(ids) - len(set(ids))}; never processed: {total - len(set(ids))}; rebalances worker A "
          f"went through (revokes): {revokes}")
    gaps = stalls(values, moments["restart"], float("inf"))
    shown = ", ".join(f"p{p} {g:.2f}s" for p, g in gaps.items())
    print(f"  restart: longest stall per partition {shown}; max {max(gaps.values()):.2f}s, "
          f"median {median(list(gaps.values())):.2f}s")
    print(f"  logs in {work}")


async def run(bootstrap: str, rate: float, seconds: float, guarantee: str, delay: float) -> None:
    app_id = f"rebalance-{uuid.uuid4().hex[:8]}"
    topic, out_topic = f"{app_id}-in", f"{app_id}-out"
    await create_topics(bootstrap, [topic, out_topic], 4)
    work = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
    env = {"BENCH_BOOTSTRAP": bootstrap, "BENCH_GROUP": app_id, "BENCH_TOPIC": topic,
           "BENCH_OUT_TOPIC": out_topic, "BENCH_GUARANTEE": guarantee, "BENCH_DELAY": str(delay)}
    first = start_worker(env, work / "a", work / "a.log")
    while "tables ready" not in (work / "a.log").read_text(errors="replace"):  # noqa: ASYNC110  # a log file
        await asyncio.sleep(0.2)
    workers = [first]
    moments: dict[str, float] = {}

    def join() -> None:
        moments["join"] = time.time()
        workers.append(start_worker(env, work / "b", work / "b.log"))

    def leave() -> None:
        moments["leave"] = time.time()
        first.send_signal(signal.SIGTERM)

    total = int(rate * seconds)
    events = [(f"k{i % 1000}", {"id": i}) for i in range(total)]
    await paced_produce(bootstrap, topic, events, rate=rate, at={1 / 3: join, 2 / 3: leave})
    values = await read_outputs(bootstrap, out_topic, total)
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    ids = [v["id"] for v in values]
    twice = len(ids) - len(set(ids))
    missing = total - len(set(ids))
    print(f"{guarantee}: {total} events at {rate:g}/s, {delay * 1000:g} ms of work each; processed twice: "
          f"{twice}; never processed: {missing}")
    windows = {"join": (moments["join"], moments["leave"]), "leave": (moments["leave"], float("inf"))}
    for moment, (around, until) in windows.items():
        gaps = stalls(values, around, until)
        shown = ", ".join(f"p{p} {g:.2f}s" for p, g in gaps.items())
        print(f"  {moment}: longest stall per partition {shown}; max {max(gaps.values()):.2f}s, "
              f"median {median(list(gaps.values())):.2f}s")
    print(f"  logs in {work}")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rate", type=float, default=2000)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--guarantee", choices=["at_least_once", "exactly_once", "both"], default="both")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--scenario", choices=["join-leave", "restart"], default="join-leave")
    p.add_argument("--static", action="store_true", help="static members (restart scenario)")
    args = p.parse_args()
    guarantees = ["at_least_once", "exactly_once"] if args.guarantee == "both" else [args.guarantee]
    with broker(args.broker) as bootstrap:
        for guarantee in guarantees:
            if args.scenario == "restart":
                asyncio.run(run_restart(bootstrap, args.rate, args.seconds, guarantee, args.delay,
                                        args.static))
            else:
                asyncio.run(run(bootstrap, args.rate, args.seconds, guarantee, args.delay))


if __name__ == "__main__":
    main()
