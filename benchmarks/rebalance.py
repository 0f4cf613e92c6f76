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

    .venv/bin/python -m benchmarks.rebalance --scenario join leave kill --workers 3 --partitions 12 \
        [--standbys 1] [--protocol classic]

`join`, `leave`, `kill` (issue 36's measure of what a move costs): a group of `--workers` (the mover
included) settles (every worker active on some partitions, restored, with its standbys), then at 1/2 of the
stream one more worker joins, or one leaves by SIGTERM, or one is SIGKILLed. Each partition's owner before
and after comes from the workers' own /status (its `active` tasks, asked just before the change and once the
group has settled again); a partition stayed if its owner is the same, else it moved (to its standby, if the
new owner held one). Reported per partition: its longest gap in the baseline (the minute before the change,
or from settling on if shorter) and from the change on; stayed and moved summarised (max, median, and
during/baseline). `--protocol streams` runs the workers as members of a streams group (KIP-1071), `classic`
(the default) as the classic protocol's.

    .venv/bin/python -m benchmarks.rebalance --scenario sequence --partitions 12 --standbys 1 --seconds 60 \
        [--protocol streams] [--commit-interval 0.5]

`sequence` (issue 55's): the changes of a day in one run, each from a group that went through the ones
before. Workers A and B settle; at 1/4 of the stream C joins, at 2/4 A leaves by SIGTERM, at 3/4 B is
SIGKILLed. Each change is reported as `join`/`leave`/`kill` are, its window running to the next change and
its baseline the window before it (from settling on, for the first): what each partition's owner was just
before the change and just before the next one (or once the group settled at the end).
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from benchmarks.common import address_of, broker, create_topics, median, parser
from tests.integration.rebalance_run import paced_produce

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

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


async def read_outputs(bootstrap: str, topic: str, expected: int, partitions: int = 4,
                       timeout: float = 120) -> list[dict]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
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


def stalls(values: list[dict], around: float, until: float, partitions: int = 4) -> dict[int, float]:
    """Each partition's longest gap between processed events in [around - 1, until)."""
    return longest_gaps(values, around - 1, until, partitions)


def longest_gaps(values: list[dict[str, Any]], since: float, until: float,
                 partitions: int) -> dict[int, float]:
    """Each partition's longest gap between two events it processed one after the other, of the gaps that
    end in [since, until) (a gap that spans a change belongs to the window it ends in)."""
    times_of: dict[int, list[float]] = {partition: [] for partition in range(partitions)}
    for value in values:
        times_of[value["p"]].append(value["at"])
    return {partition: longest_gap(sorted(times), since, until)[0] for partition, times in times_of.items()}


def longest_gap(times: Sequence[float], since: float, until: float) -> tuple[float, float]:
    """The longest gap between two times one after the other in `times` (in order) of the gaps that end in
    [since, until), and the time it ended at; (nan, nan) if none does."""
    return max(((b - a, b) for a, b in itertools.pairwise(times) if since <= b < until),
               default=(float("nan"), float("nan")))


async def run_restart(bootstrap: str, rate: float, seconds: float, guarantee: str, delay: float,
                      static: bool, partitions: int) -> None:
    app_id = f"restart-{uuid.uuid4().hex[:8]}"
    topic, out_topic = f"{app_id}-in", f"{app_id}-out"
    await create_topics(bootstrap, [topic, out_topic], partitions)
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
    values = await read_outputs(bootstrap, out_topic, total, partitions)
    for worker in workers.values():
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    ids = [v["id"] for v in values]
    revokes = (work / "a.log").read_text(errors="replace").count("revoked ")
    membership = "static" if static else "dynamic"
    print(f"{guarantee}, {membership} members: {total} events at {rate:g}/s; processed "
          f"twice: {len(ids) - len(set(ids))}; never processed: {total - len(set(ids))}; rebalances worker A "
          f"went through (revokes): {revokes}")
    gaps = stalls(values, moments["restart"], float("inf"), partitions)
    shown = ", ".join(f"p{p} {g:.2f}s" for p, g in gaps.items())
    print(f"  restart: longest stall per partition {shown}; max {max(gaps.values()):.2f}s, "
          f"median {median(list(gaps.values())):.2f}s")
    print(f"  logs in {work}")


async def run(bootstrap: str, rate: float, seconds: float, guarantee: str, delay: float,
              partitions: int) -> None:
    app_id = f"rebalance-{uuid.uuid4().hex[:8]}"
    topic, out_topic = f"{app_id}-in", f"{app_id}-out"
    await create_topics(bootstrap, [topic, out_topic], partitions)
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
    values = await read_outputs(bootstrap, out_topic, total, partitions)
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
        gaps = stalls(values, around, until, partitions)
        shown = ", ".join(f"p{p} {g:.2f}s" for p, g in gaps.items())
        print(f"  {moment}: longest stall per partition {shown}; max {max(gaps.values()):.2f}s, "
              f"median {median(list(gaps.values())):.2f}s")
    print(f"  logs in {work}")


# The group protocols the workers can run, each as the environment that selects it: the classic one, or the
# streams rebalance protocol (KIP-1071, docs/internals/streams-rebalance-protocol.md), which the workers
# refuse to start without (rather than falling back to the classic one).
PROTOCOLS: dict[str, dict[str, str]] = {"classic": {"ENGINE_GROUP_PROTOCOL": "classic"},
                                        "streams": {"ENGINE_GROUP_PROTOCOL": "streams"}}
MOVES = ("join", "leave", "kill")
BASELINE = 60.0  # seconds before the change its gaps are compared with (less if the run is shorter)


@dataclass(frozen=True)
class Holding:
    """Who held each partition at one moment, from the workers' own /status: the active owner (None if no
    live worker had it active) and the workers keeping a standby of it."""

    owner: dict[int, str | None]
    standbys: dict[int, set[str]]
    recovering: set[int]

    def settled(self, workers: Collection[str], standbys: int) -> bool:
        """Every partition active on one worker and restored, every worker holding some (a group that has not
        taken a new member in yet looks complete too), and as many standbys as the workers allow."""
        owners = list(self.owner.values())
        wanted = min(standbys, len(workers) - 1)
        return (all(o in workers for o in owners) and set(workers) <= set(owners) and not self.recovering
                and all(len(s) >= wanted for s in self.standbys.values()))


async def holding(session: aiohttp.ClientSession, addresses: Mapping[str, str], partitions: int) -> Holding:
    """Ask every live worker's /status what it holds now."""
    statuses = {}
    for name, address in addresses.items():
        async with session.get(f"http://{address}/status") as response:
            statuses[name] = await response.json()
    return holding_of(statuses, partitions)


def holding_of(statuses: Mapping[str, Mapping[str, Any]], partitions: int) -> Holding:
    """Who holds what, from each live worker's status (`GET /status`, `Worker.status()`) by its name."""
    owner: dict[int, str | None] = dict.fromkeys(range(partitions))
    standbys: dict[int, set[str]] = {p: set() for p in range(partitions)}
    recovering: set[int] = set()
    for name, status in statuses.items():
        for partition in status["active"]:
            owner[partition] = name if owner[partition] is None else f"{owner[partition]}+{name}"
        for partition in status["standby"]:
            standbys[partition].add(name)
        recovering.update(status["recovering"])
    return Holding(owner, standbys, recovering)


async def settled(session: aiohttp.ClientSession, addresses: Mapping[str, str], partitions: int,
                  standbys: int, timeout: float = 180) -> Holding:
    """The workers' holding once it has settled (Holding.settled)."""
    deadline = time.monotonic() + timeout
    while True:
        now = await holding(session, addresses, partitions)
        if now.settled(list(addresses), standbys):
            return now
        if time.monotonic() > deadline:
            raise RuntimeError(f"the group did not settle: {now}")
        await asyncio.sleep(0.5)


async def run_move(bootstrap: str, move: str, workers: int, partitions: int, rate: float, seconds: float,
                   guarantee: str, delay: float, standbys: int, protocol: str) -> None:
    """One change to a group of `workers` at the middle of a paced stream: a worker joins the others
    (`join`), or one of them leaves by SIGTERM (`leave`) or is SIGKILLed (`kill`)."""
    names = [chr(ord("a") + n) for n in range(workers)]
    mover = names[-1]  # the worker that joins, leaves or is killed
    await run_changes(bootstrap, move, names[:-1] if move == "join" else names, ((move, mover, 1 / 2),),
                      partitions, rate, seconds, guarantee, delay, standbys, protocol)


SEQUENCE = (("join", "c", 1 / 4), ("leave", "a", 2 / 4), ("kill", "b", 3 / 4))  # (change, worker, when)


async def run_changes(bootstrap: str, name: str, starting: Sequence[str],
                      changes: Sequence[tuple[str, str, float]], partitions: int, rate: float, seconds: float,
                      guarantee: str, delay: float, standbys: int, protocol: str,
                      commit_interval: float | None = None) -> None:
    """Workers `starting` settle, then each change (a worker joins, leaves by SIGTERM or is SIGKILLed)
    comes at its fraction of a paced stream; each is reported (`report_moves`) over its window, to the next
    change, with what each partition's owner was just before it and just before the next one (or once the
    group settled at the end)."""
    app_id = f"{name}-{uuid.uuid4().hex[:8]}"
    topic, out_topic = f"{app_id}-in", f"{app_id}-out"
    await create_topics(bootstrap, [topic, out_topic], partitions)
    work = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    env = {"BENCH_BOOTSTRAP": bootstrap, "BENCH_GROUP": app_id, "BENCH_TOPIC": topic,
           "BENCH_OUT_TOPIC": out_topic, "BENCH_GUARANTEE": guarantee, "BENCH_DELAY": str(delay),
           "ENGINE_WEB_PORT": "0", "ENGINE_STANDBY_REPLICAS": str(standbys), **PROTOCOLS[protocol],
           **({"ENGINE_COMMIT_INTERVAL": str(commit_interval)} if commit_interval is not None else {})}
    running = {worker: start_worker(env, work / worker, work / f"{worker}.log") for worker in starting}
    total = int(rate * seconds)
    events = [(f"k{i % 1000}", {"id": i}) for i in range(total)]
    moments: dict[str, float] = {}
    before: dict[str, Holding] = {}
    changing: list[asyncio.Task[None]] = []
    try:
        async with aiohttp.ClientSession() as session:
            addresses = {worker: await address_of(work / f"{worker}.log") for worker in running}
            await settled(session, addresses, partitions, standbys)
            moments["settled"] = time.time()

            async def change(move: str, worker: str) -> None:
                before[move] = await holding(session, addresses, partitions)
                moments[move] = time.time()
                if move == "join":
                    running[worker] = start_worker(env, work / worker, work / f"{worker}.log")
                    addresses[worker] = await address_of(work / f"{worker}.log")
                else:
                    running[worker].send_signal(signal.SIGTERM if move == "leave" else signal.SIGKILL)
                    del addresses[worker]

            at = {when: (lambda m=move, w=worker: changing.append(asyncio.ensure_future(change(m, w))))
                  for move, worker, when in changes}
            await paced_produce(bootstrap, topic, events, rate=rate, at=at)
            await asyncio.gather(*changing)
            values = await read_outputs(bootstrap, out_topic, total, partitions)
            final = await settled(session, addresses, partitions, min(standbys, len(addresses) - 1))
    finally:
        for worker in running.values():
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in running.values():
            worker.wait(60)
    ids = [v["id"] for v in values]
    twice, missing = len(ids) - len(set(ids)), total - len(set(ids))
    commits = "" if commit_interval is None else f", commits every {commit_interval:g} s"
    print(f"{name}, {guarantee}, {protocol} protocol, {standbys} standby replicas{commits}: "
          f"{len(starting)} workers at the start, {partitions} partitions, {total} events at {rate:g}/s, "
          f"{delay * 1000:g} ms of work each; processed twice: {twice}; never processed: {missing}")
    for index, (move, who, _) in enumerate(changes):
        following = changes[index + 1][0] if index + 1 < len(changes) else None
        after = before[following] if following is not None else final
        until = moments[following] if following is not None else float("inf")
        previous = changes[index - 1][0] if index else "settled"
        print(f" {move} ({who}):")
        report_moves(values, {"settled": moments[previous], "change": moments[move]}, before[move], after,
                     partitions, until)
    print(f"  logs in {work}")


def report_moves(values: list[dict[str, Any]], moments: Mapping[str, float], before: Holding, after: Holding,
                 partitions: int, until: float = float("inf")) -> None:
    """Per partition: its owner before and after the change, its longest gap in the baseline before the
    change and from the change on (until `until`: the next change); then the partitions that stayed and
    those that moved, summarised."""
    change = moments["change"]
    since = max(moments["settled"], change - BASELINE)
    baseline = longest_gaps(values, since, change, partitions)
    during = longest_gaps(values, change, until, partitions)
    print(f"  baseline: the {change - since:.0f} s before the change; during: from the change on"
          + ("" if until == float("inf") else f", for {until - change:.0f} s"))
    stayed: list[int] = []
    moved: list[int] = []
    for p in range(partitions):
        was, now = before.owner[p], after.owner[p]
        kind = "stayed" if was == now else "moved"
        if kind == "moved" and now in before.standbys[p]:
            kind += " to its standby"
        (stayed if was == now else moved).append(p)
        print(f"  p{p:<2} {was}->{now} {kind}: baseline {baseline[p]:.3f} s, during {during[p]:.3f} s "
              f"({during[p] / baseline[p]:.1f}x)")
    for kind, group in (("stayed", stayed), ("moved", moved)):
        if group:
            gaps = [during[p] for p in group]
            ratios = [during[p] / baseline[p] for p in group]
            print(f"  {kind} ({len(group)}): during max {max(gaps):.3f} s, median {median(gaps):.3f} s; "
                  f"baseline max {max(baseline[p] for p in group):.3f} s; during/baseline max "
                  f"{max(ratios):.1f}x, median {median(ratios):.1f}x")
        else:
            print(f"  {kind}: none")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rate", type=float, default=2000)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--guarantee", choices=["at_least_once", "exactly_once", "both"], default="both")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--scenario", nargs="+", choices=["join-leave", "restart", *MOVES, "sequence"],
                   default=["join-leave"],
                   help="one or more, run in turn on the same broker")
    p.add_argument("--static", action="store_true", help="static members (restart scenario)")
    p.add_argument("--workers", type=int, default=3, help="the group's size with the moving worker (join, "
                   "leave, kill; join-leave and restart always run two)")
    p.add_argument("--standbys", type=int, default=0, help="standby_replicas (join, leave, kill)")
    p.add_argument("--protocol", choices=["classic", "streams"], default="classic",
                   help="the group protocol of the workers (join, leave, kill)")
    p.add_argument("--commit-interval", type=float, default=0.5, help="the workers' (sequence)")
    args = p.parse_args()
    guarantees = ["at_least_once", "exactly_once"] if args.guarantee == "both" else [args.guarantee]
    with broker(args.broker) as bootstrap:
        for scenario in args.scenario:
            for guarantee in guarantees:
                if scenario == "sequence":
                    asyncio.run(run_changes(bootstrap, "sequence", ("a", "b"), SEQUENCE, args.partitions,
                                            args.rate, args.seconds, guarantee, args.delay, args.standbys,
                                            args.protocol, args.commit_interval))
                elif scenario in MOVES:
                    asyncio.run(run_move(bootstrap, scenario, args.workers, args.partitions, args.rate,
                                         args.seconds, guarantee, args.delay, args.standbys, args.protocol))
                elif scenario == "restart":
                    asyncio.run(run_restart(bootstrap, args.rate, args.seconds, guarantee, args.delay,
                                            args.static, args.partitions))
                else:
                    asyncio.run(run(bootstrap, args.rate, args.seconds, guarantee, args.delay,
                                    args.partitions))


if __name__ == "__main__":
    main()
