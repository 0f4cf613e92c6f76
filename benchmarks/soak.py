"""A day-long run compressed: does a worker stay flat (memory, file descriptors, store size, event-loop lag,
latency) under steady input with windows expiring, standbys following and a worker restarting, and are its
outputs exact at the end?

    .venv/bin/python -m benchmarks.soak [--minutes 60] [--rate 2000] [--keys 2000] [--restart-every 10]
                                        [--warmup 10] [--guarantee exactly_once] [--protocol streams]
                                        [--store rocksdb://] [--store-memory 64] [--plot benchmarks/soak.png]

The app (benchmarks/peers/engine_soak_app.py) joins each event with its key's profile (a table over a
compacted topic), counts it per key into a table and per key and 10-second tumbling window, and a pipeline
counts it per key and session (gap 5 s); the windows expire after 60 s of event time, their final results go
to their `closed()` topics. Two `engine worker`s, A and B, each with one standby of the other's tasks; B is
restarted every `--restart-every` minutes, by SIGTERM and by SIGKILL alternately (A runs throughout: its
figures are the drift's).

The input is a function of the event's number (`key_of`, `at_ms_of`): `rate` events per second of event
time, paced at `rate` per second of wall time, each key active for 20 s out of every `keys / 100 * 20` (a
session each time). Sampled every 10 s from worker A: anonymous RSS (/proc), open file descriptors, the size
of its data dir, the event loop's lag (its `/metrics` histogram); per minute: those, and the p99 latency of
the events sent in that minute (from the sending to the agent's output). At the end, one far-future event
per partition closes every window, and the outputs are checked against the input: every event joined and sent
exactly once with its key's profile, every tumbling window's and session's final count, every key's count
(asked of A over HTTP, routed), no late event. Then growth from the end of warm-up to the end: RSS and file
descriptors (goal: under 10%), the store's size, the latency and loop lag per minute, and the workers' WARNING
and ERROR lines. `--plot` draws the per-minute curves with the restarts marked.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import re
import signal
import statistics
import tempfile
import time
import uuid
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from benchmarks.common import address_of, broker, create_topics, parser
from benchmarks.plots import Panel, draw
from benchmarks.rebalance import start_worker
from engine.partitioner import partition_for
from engine.tables.keys import split_window_key, window_bounds
from tests.integration.rebalance_run import paced_produce

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterator, Mapping

APP = "benchmarks.peers.engine_soak_app:app"
PARTITIONS = 4
START_MS = 1_790_000_000_000  # event time of event 0 (2026-09-21): the input's own clock, not the wall's
ACTIVE = 100  # keys active at a time
BURST_S = 20  # seconds of event time a key stays active
WINDOW_MS = 10_000  # the app's tumbling windows
GAP_MS = 5_000  # the app's session gap
ALL_CORES = os.sched_getaffinity(0)  # before benchmarks.common.broker pins this process
SAMPLE_EVERY = 10.0  # seconds between two samples of worker A
FLUSH_AFTER_MS = 3_600_000  # the closing events' event time past the last event's


def key_of(index: int, rate: int, keys: int) -> str:
    """Event `index`'s key: one of the ACTIVE keys of its BURST_S-second slot of event time."""
    slot = index // rate // BURST_S
    return f"u{(slot * ACTIVE + index % ACTIVE) % keys}"


def at_ms_of(index: int, rate: int) -> int:
    """Event `index`'s event time in ms: `rate` events per second from START_MS."""
    return START_MS + index * 1000 // rate


def profile_of(key: str) -> str:
    return f"profile-of-{key}"


def flush_keys(partitions: int) -> list[str]:
    """A key per partition (in order), none of the input's: their far-future events close every window."""
    found: dict[int, str] = {}
    for n in range(10_000):
        key = f"flush-{n}"
        found.setdefault(partition_for(key.encode(), partitions), key)
        if len(found) == partitions:
            return [found[p] for p in range(partitions)]
    raise RuntimeError("no flush key for some partition")


@dataclass
class Truth:
    """The outputs the input must give, computed from it alone."""

    counts: Counter[str] = field(default_factory=Counter)
    windows: Counter[tuple[str, int]] = field(default_factory=Counter)  # (key, start ms) -> count
    sessions: Counter[tuple[str, int, int]] = field(default_factory=Counter)  # (key, start, end) -> count


def truth_of(total: int, rate: int, keys: int) -> Truth:
    """Counts per key, per key and tumbling window, and per key and session (events of a key less than the
    gap apart, in event-time order: each key's events are in order here)."""
    truth = Truth()
    open_sessions: dict[str, list[int]] = {}  # key -> [start, end, count]
    for index in range(total):
        key, at = key_of(index, rate, keys), at_ms_of(index, rate)
        truth.counts[key] += 1
        truth.windows[(key, at - at % WINDOW_MS)] += 1
        session = open_sessions.get(key)
        if session is not None and at - session[1] <= GAP_MS:
            session[1], session[2] = at, session[2] + 1
        else:
            if session is not None:
                truth.sessions[(key, session[0], session[1])] = session[2]
            open_sessions[key] = [at, at, 1]
    for key, (start, end, count) in open_sessions.items():
        truth.sessions[(key, start, end)] = count
    return truth


def events(total: int, rate: int, keys: int) -> Iterator[tuple[str, dict[str, Any]]]:
    for index in range(total):
        yield key_of(index, rate, keys), {"id": index, "at": at_ms_of(index, rate) / 1000}


async def send_all(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value, key=key.encode())
        await producer.flush()
    finally:
        await producer.stop()


# -- samples ----------------------------------------------------------------------------------------------


def rss_mb(pid: int) -> tuple[float, float]:
    """The process's resident anonymous memory (heaps: what a leak grows) and file-backed memory (mapped
    libraries and files, which the kernel may drop), in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["RssAnon"].split()[0]) / 1024, int(fields["RssFile"].split()[0]) / 1024


def open_files(pid: int) -> tuple[int, int]:
    """The process's open file descriptors, and how many of them are sockets (the rest: files and pipes)."""
    total = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            sockets += int(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))
            total += 1
    return total, sockets


def store_files(directory: Path) -> tuple[float, float, int]:
    """MB under `directory` of the stores' data (all but RocksDB's info logs), MB of those logs (files that
    vanish meanwhile, as RocksDB's do, are skipped), and how many SST files there are (RocksDB keeps each
    one open: most of a worker's file descriptors)."""
    data = logs = tables = 0
    for root, _, names in os.walk(directory):
        for name in names:
            tables += int(name.endswith(".sst"))
            with contextlib.suppress(OSError):
                size = os.stat(os.path.join(root, name)).st_size
                if name.startswith("LOG"):
                    logs += size
                else:
                    data += size
    return data / 2**20, logs / 2**20, tables


BUCKET = re.compile(r'^engine_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)$', re.MULTILINE)
STORE_MEMORY = re.compile(r'^engine_store_memory_bytes\{part="total"\} (\S+)$', re.MULTILINE)
PYTHON_BLOCKS = re.compile(r'^engine_python_allocated_blocks (\S+)$', re.MULTILINE)


def python_kblocks(metrics: str) -> float:
    """The interpreter's allocated blocks (Python objects), in thousands."""
    found = PYTHON_BLOCKS.search(metrics)
    return float(found.group(1)) / 1000 if found else math.nan


def store_memory_mb(metrics: str) -> float:
    """What the worker's RocksDB stores hold of their memory budget (memtables and block cache), in MB."""
    found = STORE_MEMORY.search(metrics)
    return float(found.group(1)) / 2**20 if found else math.nan


def lag_buckets(metrics: str) -> list[tuple[float, float]]:
    """The event loop's lag histogram in Prometheus' text: (upper bound s, cumulative count), in order."""
    return sorted((float(bound), float(count)) for bound, count in BUCKET.findall(metrics))


def p99_between(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> float:
    """The 99th percentile (a bucket's upper bound) of what a cumulative histogram counted between two
    readings of it; nan if it counted nothing (or was reset: the process restarted)."""
    if not before or not after or len(before) != len(after):
        return math.nan
    counts = [(bound, b - a) for (bound, b), (_, a) in zip(after, before, strict=True)]
    total = counts[-1][1]
    if total <= 0:
        return math.nan
    return next(bound for bound, count in counts if count >= 0.99 * total)


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, per minute."""
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 60 if var else 0.0


@dataclass
class Sample:
    seconds: float
    rss_mb: float
    file_mb: float
    files: int
    store_mb: float
    sst_files: int
    lag: list[tuple[float, float]]
    store_memory_mb: float
    sockets: int
    info_logs_mb: float
    python_kblocks: float


async def sample_forever(pid: int, data_dir: Path, address: str, started: float, into: list[Sample]) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            try:
                async with session.get(f"http://{address}/metrics") as reply:
                    metrics = await reply.text()
            except (aiohttp.ClientError, TimeoutError):
                metrics = ""
            anonymous, file_backed = rss_mb(pid)
            files, sockets = open_files(pid)
            store, logs, tables = await asyncio.to_thread(store_files, data_dir)
            into.append(Sample(time.monotonic() - started, anonymous, file_backed, files, store, tables,
                               lag_buckets(metrics), store_memory_mb(metrics), sockets, logs,
                               python_kblocks(metrics)))
            await asyncio.sleep(SAMPLE_EVERY)


# -- the outputs --------------------------------------------------------------------------------------------


@dataclass
class Outputs:
    """The joined events read back: each id's times seen, the profiles that were wrong, the latencies of the
    events sent in each minute."""

    total: int
    rate: int
    keys: int
    seen: bytearray = field(init=False)
    count: int = 0
    wrong_profile: int = 0
    latency: dict[int, array[float]] = field(default_factory=lambda: defaultdict(lambda: array("d")))

    def __post_init__(self) -> None:
        self.seen = bytearray(self.total)

    def see(self, record: Any) -> None:
        value = orjson.loads(record.value)
        index = value["id"]
        if index >= self.total:  # a closing event
            return
        self.seen[index] = min(self.seen[index] + 1, 255)
        self.count += 1
        if value["profile"] != profile_of(key_of(index, self.rate, self.keys)):
            self.wrong_profile += 1
        self.latency[index // self.rate // 60].append(value["latency"])

    def complete(self) -> bool:
        return self.count >= self.total


@dataclass
class Finals:
    """A `closed()` topic's final results read back: (key, start, end) -> count, and how many came twice."""

    expected: int
    size_ms: int | None
    found: dict[tuple[str, int, int], int] = field(default_factory=dict)
    twice: int = 0

    def see(self, record: Any) -> None:
        key, _ = split_window_key(record.key)
        start, end = window_bounds(record.key, self.size_ms)
        result = (key.decode(), start, end)
        if result in self.found:
            self.twice += 1
        self.found[result] = int(record.value)

    def complete(self) -> bool:
        return len(self.found) >= self.expected


async def read_through(bootstrap: str, topic: str, reader: Any, timeout: float) -> None:
    """Every record of `topic` (read_committed) handed to `reader.see` as it comes, none kept (the hour's
    7.2M outputs would not fit the way tests.integration.helpers.read_all keeps them), until
    `reader.complete()` or `timeout`, then 3 s more, for a record that should not be there (a duplicate)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        settle_until: float | None = None
        while settle_until is None or time.monotonic() < settle_until:
            for batch in (await consumer.getmany(timeout_ms=500, max_records=20_000)).values():
                for record in batch:
                    reader.see(record)
            if settle_until is None and (reader.complete() or time.monotonic() > deadline):
                settle_until = time.monotonic() + 3.0  # a record that should not be there: a duplicate
    finally:
        await consumer.stop()


async def table_counts(address: str) -> dict[str, int]:
    """Every key of the table `counts`, asked of one worker (which asks the owners of the others)."""
    found: dict[str, int] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        start: str | None = ""
        while start is not None:
            query = {"limit": "10000", **({"from": start} if start else {})}
            for _ in range(60):
                async with session.get(f"http://{address}/tables/counts", params=query) as reply:
                    body = await reply.json()
                if reply.status == 200:
                    break
                await asyncio.sleep(1)  # a partition moving or recovering
            else:
                raise RuntimeError(f"the counts were never all readable: {body}")
            found.update((entry["key"], entry["value"]) for entry in body["entries"])
            start = body["next"]
    return found


def log_lines(logs: list[Path]) -> Counter[str]:
    """The workers' WARNING and ERROR lines, by level and message (numbers masked), over every log."""
    found: Counter[str] = Counter()
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            level = next((lv for lv in (" ERROR ", " WARNING ", " CRITICAL ") if lv in line), None)
            if level is not None:
                message = re.sub(r"\d+(\.\d+)?", "N", line.split(level, 1)[1])[:140]
                found[f"{level.strip()}: {message}"] += 1
    return found


# -- the run ------------------------------------------------------------------------------------------------


@dataclass
class Minute:
    minute: int
    rss_mb: float
    store_memory_mb: float
    python_kblocks: float
    files: float
    sockets: float
    store_mb: float
    info_logs_mb: float
    sst_files: float
    loop_lag_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[int(fraction * (len(ordered) - 1))]


def per_minute(samples: list[Sample], outputs: Outputs, minutes: int) -> list[Minute]:
    rows = []
    for minute in range(minutes):
        within = [s for s in samples if minute * 60 <= s.seconds < (minute + 1) * 60]
        if not within:
            continue
        lag = p99_between(within[0].lag, within[-1].lag)
        latencies = sorted(outputs.latency.get(minute, ()))
        p50, p99 = ((percentile(latencies, 0.5), percentile(latencies, 0.99)) if latencies
                    else (math.nan, math.nan))
        rows.append(Minute(minute, statistics.fmean(s.rss_mb for s in within),
                           statistics.fmean(s.store_memory_mb for s in within),
                           statistics.fmean(s.python_kblocks for s in within),
                           statistics.fmean(s.files for s in within),
                           statistics.fmean(s.sockets for s in within),
                           statistics.fmean(s.store_mb for s in within),
                           statistics.fmean(s.info_logs_mb for s in within),
                           statistics.fmean(s.sst_files for s in within), lag * 1000, p50 * 1000, p99 * 1000))
    return rows


@dataclass(frozen=True)
class Options:
    minutes: float
    rate: int
    keys: int
    restart_every: float
    warmup: float
    guarantee: str
    protocol: str
    store: str
    store_memory: int  # MiB
    plot: Path | None

    @property
    def total(self) -> int:
        return int(self.rate * self.minutes * 60)


@dataclass
class Workers:
    """Worker A (runs throughout) and B (restarted), each an `engine worker` of the soak app, with its log."""

    env: dict[str, str]
    work: Path
    logs: list[Path] = field(default_factory=list)
    a: subprocess.Popen[bytes] | None = None
    b: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.a = self._start("a", "a.log")
        self.b = self._start("b", "b-0.log")

    def _start(self, name: str, log: str) -> subprocess.Popen[bytes]:
        self.logs.append(self.work / log)
        return start_worker(self.env, self.work / name, self.logs[-1], APP)

    async def restart_b(self, how: signal.Signals, n: int) -> None:
        assert self.b is not None
        self.b.send_signal(how)
        await asyncio.to_thread(self.b.wait, 120)
        self.b = self._start("b", f"b-{n}.log")

    async def stop(self) -> list[int]:
        """Both stopped by SIGTERM: their exit codes."""
        running = [w for w in (self.a, self.b) if w is not None]
        for worker in running:
            worker.send_signal(signal.SIGTERM)
        return [await asyncio.to_thread(worker.wait, 120) for worker in running]

    def kill(self) -> None:
        for worker in (self.a, self.b):
            if worker is not None and worker.poll() is None:
                worker.kill()


async def soak(bootstrap: str, options: Options) -> None:
    app_id = f"soak-{uuid.uuid4().hex[:8]}"
    topic, profiles, out = f"{app_id}-in", f"{app_id}-profiles", f"{app_id}-out"
    await create_topics(bootstrap, [topic, out], PARTITIONS)
    await create_topics(bootstrap, [profiles], PARTITIONS, {"cleanup.policy": "compact"})
    closing = flush_keys(PARTITIONS)
    all_keys = [f"u{n}" for n in range(options.keys)] + closing
    await send_all(bootstrap, profiles, [(key, profile_of(key).encode()) for key in all_keys])  # (str: text)
    env = {"SOAK_APP": app_id, "SOAK_BOOTSTRAP": bootstrap, "SOAK_TOPIC": topic,
           "SOAK_PROFILES_TOPIC": profiles, "SOAK_OUT_TOPIC": out, "SOAK_GUARANTEE": options.guarantee,
           "SOAK_PROTOCOL": options.protocol, "SOAK_STORE": options.store,
           "SOAK_STORE_MEMORY": str(options.store_memory << 20), "ENGINE_WEB_PORT": "0"}
    workers = Workers(env, Path(tempfile.mkdtemp(prefix="bench-soak-")))
    # Not pinned (the broker has its own core, see benchmarks.common.broker): the workers and the producer
    # share the machine as a deployment's processes would.
    os.sched_setaffinity(0, ALL_CORES)
    workers.start()
    try:
        await run(bootstrap, options, app_id, workers, closing)
    finally:
        workers.kill()


async def run(bootstrap: str, options: Options, app_id: str, workers: Workers, closing: list[str]) -> None:
    """The run, once both workers are started."""
    assert workers.a is not None
    address = await address_of(workers.logs[0])
    total, rate, minutes = options.total, options.rate, options.minutes
    print(f"soak {app_id}: {total:,} events at {rate}/s over {options.keys:,} keys for {minutes:g} min, "
          f"{options.guarantee}, {options.protocol} protocol; worker B restarted every "
          f"{options.restart_every:g} min; logs in {workers.work}", flush=True)
    samples: list[Sample] = []
    marks: list[tuple[float, str]] = []
    started = time.monotonic()
    inputs = events(total, rate, options.keys)
    sending = asyncio.ensure_future(paced_produce(bootstrap, f"{app_id}-in", inputs, rate=rate, stamp="sent"))

    async def restart() -> None:
        """Restart B every `restart_every` minutes while the input is sent (one that would fall in its last
        half minute is not done: B is up and settled when the outputs are checked)."""
        period = options.restart_every * 60
        for n in itertools.count(1):
            if n * period > minutes * 60 - 30:
                return
            await asyncio.sleep(started + n * period - time.monotonic())
            how = signal.SIGTERM if n % 2 else signal.SIGKILL
            await workers.restart_b(how, n)
            marks.append(((time.monotonic() - started) / 60, how.name))
            print(f"  {(time.monotonic() - started) / 60:5.1f} min: B restarted after {how.name}", flush=True)

    sampling = asyncio.ensure_future(sample_forever(workers.a.pid, workers.work / "a", address, started,
                                                    samples))
    try:
        await restart()
        await sending
    finally:
        sending.cancel()
        sampling.cancel()
    sent_for = time.monotonic() - started
    flush_at = (at_ms_of(total - 1, rate) + FLUSH_AFTER_MS) / 1000
    closing_events = [(key, {"id": total + p, "at": flush_at, "sent": time.time()})
                      for p, key in enumerate(closing)]
    await send_all(bootstrap, f"{app_id}-in", [(key, orjson.dumps(value)) for key, value in closing_events])
    truth = await asyncio.to_thread(truth_of, total, rate, options.keys)
    outputs = Outputs(total, rate, options.keys)
    windows = Finals(len(truth.windows), WINDOW_MS)
    sessions = Finals(len(truth.sessions), None)
    await read_through(bootstrap, f"{app_id}-out", outputs, timeout=600)
    await read_through(bootstrap, f"{app_id}-per-window-closed", windows, timeout=300)
    await read_through(bootstrap, f"{app_id}-sessions-closed", sessions, timeout=300)
    counts = {k: v for k, v in (await table_counts(address)).items() if k not in closing}
    late = 0
    async with aiohttp.ClientSession() as session:
        for worker_address in {address, await address_of(workers.logs[-1])}:
            async with session.get(f"http://{worker_address}/status") as reply:
                late += sum((await reply.json())["late_events"].values())
    codes = await workers.stop()
    report(options, sent_for, truth, outputs, windows, sessions, counts, late, samples, codes,
           log_lines(workers.logs), marks)


def report(options: Options, sent_for: float, truth: Truth, outputs: Outputs, windows: Finals,
           sessions: Finals, counts: Mapping[str, int], late: int, samples: list[Sample], codes: list[int],
           lines: Counter[str], marks: list[tuple[float, str]]) -> None:
    total, minutes, warmup, plot = options.total, options.minutes, options.warmup, options.plot
    what = f"{options.guarantee}, {options.protocol} protocol, {options.rate}/s"
    never = outputs.seen.count(0)
    twice = total - never - outputs.seen.count(1)
    print(f"sent {total:,} events in {sent_for / 60:.1f} min; outputs: never {never}, more than once "
          f"{twice}, wrong profile {outputs.wrong_profile}")
    for name, finals, expected in (("tumbling windows", windows, truth.windows), ("sessions", sessions,
                                                                                  truth.sessions)):
        want = ({(k, s, s + WINDOW_MS): n for (k, s), n in expected.items()} if finals.size_ms
                else dict(expected))
        found = {r: n for r, n in finals.found.items() if not r[0].startswith("flush-")}
        wrong = sum(1 for r, n in want.items() if found.get(r) != n)
        extra = len(set(found) - set(want))
        print(f"{name}: {len(want):,} expected, {wrong} missing or wrong, {extra} not expected, "
              f"{finals.twice} closed twice")
    wrong_counts = sum(1 for k, n in truth.counts.items() if counts.get(k) != n)
    print(f"table counts: {len(truth.counts):,} keys, {wrong_counts} wrong; late events {late}; "
          f"exit codes {codes}")
    rows = per_minute(samples, outputs, math.ceil(minutes))
    print("minute  RSS MB  stores' memory MB  Python k blocks  files  sockets  SST files  store MB  logs MB  "
          "loop lag p99 ms  latency p50 ms  latency p99 ms")
    for row in rows:
        print(f"{row.minute:6}  {row.rss_mb:6.1f}  {row.store_memory_mb:17.1f}  {row.python_kblocks:15.1f}  "
              f"{row.files:5.0f}  "
              f"{row.sockets:7.0f}  {row.sst_files:9.0f}  {row.store_mb:8.1f}  {row.info_logs_mb:7.2f}  "
              f"{row.loop_lag_p99_ms:15.1f}  {row.latency_p50_ms:14.1f}  {row.latency_p99_ms:14.1f}")
    after = [s for s in samples if s.seconds >= warmup * 60]
    settled = [r for r in rows if r.minute >= warmup]
    if len(settled) >= 2:
        first, last = settled[0], settled[-1]

        def growth(name: str, unit: str, before: float, now: float) -> str:
            change = f"{(now / before - 1) * 100:+.1f}%" if before else "from none"
            return f"{name} {before:.1f} -> {now:.1f}{unit} ({change})"

        print(f"from minute {first.minute} to minute {last.minute} (each a minute's mean): "
              f"{growth('RSS', ' MB', first.rss_mb, last.rss_mb)}, slope "
              f"{slope_per_minute([(s.seconds, s.rss_mb) for s in after]):+.3f} MB/min; "
              f"{growth('store memory', ' MB', first.store_memory_mb, last.store_memory_mb)}; "
              f"{growth('open files', '', first.files, last.files)}, of them "
              f"{growth('SST files', '', first.sst_files, last.sst_files)} and "
              f"{growth('sockets', '', first.sockets, last.sockets)}; "
              f"{growth('store data', ' MB', first.store_mb, last.store_mb)} (max "
              f"{max(r.store_mb for r in settled):.1f}), info logs {last.info_logs_mb:.2f} MB")
        # A minute's mean still swings with the stores' flushes and compactions (each store's SST files
        # go up by one a flush and back down at a compaction): a drift shows as well in windows' means.
        window = max(1, min(10, len(settled) // 2))
        early, late = settled[:window], settled[-window:]

        def means(name: str, unit: str, value: Callable[[Minute], float]) -> str:
            return growth(name, unit, statistics.fmean(map(value, early)), statistics.fmean(map(value, late)))

        print(f"the first {window} minutes from minute {first.minute} against the last {window} (means): "
              f"{means('RSS', ' MB', lambda r: r.rss_mb)}; "
              f"{means('Python k blocks', '', lambda r: r.python_kblocks)}; "
              f"{means('open files', '', lambda r: r.files)}, "
              f"of them {means('SST files', '', lambda r: r.sst_files)}; "
              f"{means('store data', ' MB', lambda r: r.store_mb)}")
        latencies = [r.latency_p99_ms for r in settled if not math.isnan(r.latency_p99_ms)]
        if latencies:
            print(f"latency p99 per minute after warm-up: median {statistics.median(latencies):.1f} ms, "
                  f"max {max(latencies):.1f} ms")
    else:
        print(f"too few samples after the {warmup:g} min warm-up: run longer")
    print(f"WARNING and ERROR lines ({sum(lines.values())}):")
    for line, n in lines.most_common(20):
        print(f"  {n:6} {line}")
    if plot is not None:
        xs = [row.minute for row in rows]
        draw(plot, f"benchmarks.soak: {what}, {total:,} events, worker B restarted (dotted)", "minute", [
            Panel("worker A's anonymous RSS, and what its RocksDB stores hold of their budget", "MB",
                  [("RSS", xs, [r.rss_mb for r in rows]),
                   ("stores' memtables and block cache", xs, [r.store_memory_mb for r in rows])]),
            Panel("worker A's Python objects (the interpreter's allocated blocks)", "thousand blocks",
                  [("blocks", xs, [r.python_kblocks for r in rows])]),
            Panel("worker A's open file descriptors: its stores' SST files (each held open), its sockets",
                  "files", [("open files", xs, [r.files for r in rows]),
                            ("SST files", xs, [r.sst_files for r in rows]),
                            ("sockets", xs, [r.sockets for r in rows])]),
            Panel("worker A's data dir: the stores' data, and RocksDB's info logs", "MB",
                  [("data", xs, [r.store_mb for r in rows]),
                   ("info logs", xs, [r.info_logs_mb for r in rows])]),
            Panel("event latency per minute, from its sending to the agent's output (log scale)", "ms",
                  [("p50", xs, [r.latency_p50_ms for r in rows]),
                   ("p99", xs, [r.latency_p99_ms for r in rows])], log=True),
            Panel("worker A's event-loop lag, p99 per minute (a bucket's bound)", "ms",
                  [("loop lag", xs, [r.loop_lag_p99_ms for r in rows])]),
        ], marks)
        print(f"plot: {plot}")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--rate", type=int, default=2000, help="events per second")
    p.add_argument("--keys", type=int, default=2000, help="a multiple of 100")
    p.add_argument("--restart-every", type=float, default=10, help="minutes between two restarts of B")
    p.add_argument("--warmup", type=float, default=10, help="minutes before growth is measured")
    p.add_argument("--guarantee", default="exactly_once")
    p.add_argument("--protocol", default="streams")
    p.add_argument("--store", default="rocksdb://", help="the workers' store (rocksdb:// or memory://)")
    p.add_argument("--store-memory", type=int, default=64, help="MiB of the RocksDB budget (store_memory)")
    p.add_argument("--plot", type=Path, help="a PNG of the per-minute curves")
    args = p.parse_args()
    with broker(args.broker) as bootstrap:
        asyncio.run(soak(bootstrap, Options(args.minutes, args.rate, args.keys, args.restart_every,
                                            args.warmup, args.guarantee, args.protocol, args.store,
                                            args.store_memory, args.plot)))


if __name__ == "__main__":
    main()
