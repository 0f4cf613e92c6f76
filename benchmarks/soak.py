"""Memory over a long run: does a worker's RSS level off, with a table of many keys and periodic rebalances?

    .venv/bin/python -m benchmarks.soak [--minutes 20] [--rate 1000] [--keys 100000] [--every 60]
                                        [--warmup 2] [--store rocksdb://] [--store-memory 64]

A producer sends `rate` events/s over `keys` keys for `minutes`. Worker A (`engine worker`, the app of
benchmarks/rebalance.py: each event counted into a RocksDB table and sent on) runs throughout; every
`every` seconds worker B joins, and leaves half-way to the next (two rebalances per period, partitions
and their stores moving both ways). A's anonymous RSS (its heaps; file-backed pages are
printed apart) is sampled every 5 s; after `warmup` minutes the least-squares
slope is printed (MB per minute), with the RSS at the end of warm-up, at the end and its maximum. Every event
is read back from the output topic: none may be missing (at-least-once), duplicates are counted.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.common import broker, create_topics, parser
from benchmarks.rebalance import read_outputs, start_worker
from tests.integration.rebalance_run import paced_produce

SAMPLE_EVERY = 5.0


def rss_mb(pid: int) -> tuple[float, float]:
    """The process's resident anonymous memory (heaps: what a leak grows) and file-backed memory (mapped
    libraries and files, which the kernel may drop), in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["RssAnon"].split()[0]) / 1024, int(fields["RssFile"].split()[0]) / 1024


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per minute."""
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return cov / var * 60 if var else 0.0


async def soak(bootstrap: str, minutes: float, rate: float, keys: int, every: float, warmup: float,
               store: str, store_memory: int) -> None:
    app_id = f"soak-{uuid.uuid4().hex[:8]}"
    topic, out_topic = f"{app_id}-in", f"{app_id}-out"
    await create_topics(bootstrap, [topic, out_topic], 4)
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    env = {"BENCH_BOOTSTRAP": bootstrap, "BENCH_GROUP": app_id, "BENCH_TOPIC": topic,
           "BENCH_OUT_TOPIC": out_topic, "BENCH_STORE": store, "BENCH_STORE_MEMORY": str(store_memory)}
    a = start_worker(env, work / "a", work / "a.log")
    while "tables ready" not in (work / "a.log").read_text(errors="replace"):  # noqa: ASYNC110  # a log file
        await asyncio.sleep(0.2)
    started = time.monotonic()
    samples: list[tuple[float, float]] = []  # (seconds, anonymous MB)
    files: list[float] = []  # file-backed MB, sampled with them
    b: list = []  # the joining worker while it runs

    async def sample() -> None:
        while True:
            anonymous, file_backed = rss_mb(a.pid)
            samples.append((time.monotonic() - started, anonymous))
            files.append(file_backed)
            await asyncio.sleep(SAMPLE_EVERY)

    async def rebalance() -> None:
        while True:
            await asyncio.sleep(every / 2)
            b.append(start_worker(env, work / "b", work / "b.log"))
            await asyncio.sleep(every / 2)
            b.pop().send_signal(signal.SIGTERM)

    background = [asyncio.ensure_future(sample()), asyncio.ensure_future(rebalance())]
    total = int(rate * minutes * 60)
    events = [(f"k{i % keys}", {"id": i}) for i in range(total)]
    await paced_produce(bootstrap, topic, events, rate=rate)
    for task in background:
        task.cancel()
    for worker in [*b]:
        worker.send_signal(signal.SIGTERM)
    values = await read_outputs(bootstrap, out_topic, total, timeout=300)
    a.send_signal(signal.SIGTERM)
    a.wait(60)
    ids = [v["id"] for v in values]
    missing, twice = total - len(set(ids)), len(ids) - len(set(ids))
    print(f"{total:,} events at {rate:g}/s over {keys:,} keys for {minutes:g} min, worker B joining and "
          f"leaving every {every:g}s: never processed {missing}, processed twice {twice}")
    after = [(t, m) for t, m in samples if t >= warmup * 60]
    if len(after) < 3:
        print(f"too few samples after the {warmup:g} min warm-up: run longer")
        return
    print(f"worker A anonymous RSS: {samples[0][1]:.1f} MB at start, {after[0][1]:.1f} MB after warm-up, "
          f"{after[-1][1]:.1f} MB at the end, max {max(m for _, m in samples):.1f} MB")
    print(f"slope after warm-up: {slope_per_minute(after):+.2f} MB/min over {len(after)} samples "
          f"({(after[-1][0] - after[0][0]) / 60:.1f} min)")
    # Levelling shows at the end: the stores' memtables fill towards their budget (store_memory) at the rate
    # keys are written, which at 1,000 writes/s takes ~15 min with the default 64 MiB.
    last = samples[-max(3, len(samples) // 3):]
    print(f"slope over the last third: {slope_per_minute(last):+.2f} MB/min "
          f"({(last[-1][0] - last[0][0]) / 60:.1f} min)")
    print(f"file-backed RSS (libraries, mapped files): {files[0]:.1f} MB at start, "
          f"{files[-1]:.1f} MB at the end")
    print("samples (min: MB): " + ", ".join(f"{t / 60:.1f}: {m:.1f}" for t, m in samples[::6]))
    print(f"  logs in {work}")


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--minutes", type=float, default=20, help="enough for the stores to fill their budget")
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--every", type=float, default=60, help="seconds between two joins of worker B")
    p.add_argument("--warmup", type=float, default=2, help="minutes before the slope is measured")
    p.add_argument("--store", default="rocksdb://", help="the workers' store (rocksdb:// or memory://)")
    p.add_argument("--store-memory", type=int, default=64, help="MiB of the RocksDB budget (store_memory)")
    args = p.parse_args()
    with broker(args.broker) as bootstrap:
        asyncio.run(soak(bootstrap, args.minutes, args.rate, args.keys, args.every, args.warmup,
                         args.store, args.store_memory << 20))


if __name__ == "__main__":
    main()
