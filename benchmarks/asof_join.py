"""A stream joined with a versioned table on event time (as of each event's time) against the same join with
a plain table (its latest value), same broker, same run.

    .venv/bin/python -m benchmarks.asof_join [--messages 200000] [--rounds 3] [--keys 1000] [--grace 0]

`--messages` orders (event time 1,000 a second, keys spread over `--keys`) and a price update for every
tenth order, interleaved in time; an agent keeps the prices in the table, another left-joins the orders with
it and sends each result on. Rates are orders/s from the first result to the last; each round gives
versioned/plain, the median of the rounds is the figure. With `--grace`, the versioned join waits that many
seconds of stream time (its events kept in a buffer table). Then, with `--store-keys` (0: skipped), the
size on disk of a versioned table's RocksDB store holding 10 versions of each of that many keys, against a
plain table of the same keys.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaProducer

from benchmarks.common import broker, create_topics, median, parser, run_job

JOB = "benchmarks.peers.engine_asof_join"
START_MS = 1_700_000_000_000


async def produce(bootstrap: str, topic: str, items: list[tuple[str, int, int]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        for key, value, at in items:
            await producer.send(topic, str(value).encode(), key=key.encode(), timestamp_ms=at)
        await producer.flush()
    finally:
        await producer.stop()


def store_sizes(keys: int, versions: int = 10) -> tuple[int, int]:
    """(bytes on disk of a versioned table's store with `versions` versions of each of `keys` keys, bytes of
    a plain table's store of the same keys with their last value), each written through a worker on the
    in-memory broker and checkpointed."""
    return _store_size(True, keys, versions), _store_size(False, keys, versions)


def _store_size(versioned: bool, keys: int, versions: int) -> int:
    data = Path(tempfile.mkdtemp(prefix="bench-asof-store-"))
    asyncio.run(_fill(data, versioned, keys, versions))
    store = next(p for p in data.rglob("prices") if p.is_dir())
    size = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    shutil.rmtree(data, ignore_errors=True)
    return size


async def _fill(data: Path, versioned: bool, keys: int, versions: int) -> None:
    import engine
    from engine import testing

    app = engine.App(f"store-{uuid.uuid4().hex[:6]}", broker=testing.memory_url(), data_dir=str(data),
                     store="rocksdb://", topic_partitions=1, commit_interval=5.0)
    updates = app.topic("updates", key_type=str, value_type=int)
    table = app.Table("prices", key_type=str, value_type=int)
    prices = table.versioned(history=10 * versions) if versioned else table
    written = asyncio.Event()
    total = keys * versions

    @app.agent(updates)
    async def keep(stream):  # type: ignore[no-untyped-def]
        seen = 0
        async for key, value in stream.items():
            prices[key] = value
            seen += 1
            if seen == total:
                written.set()

    async with testing.running(app) as worker:
        for version in range(versions):
            for n in range(keys):
                await updates.send(key=f"key-{n}", value=version * 1000 + n,
                                   timestamp_ms=START_MS + version * 1000 + n % 1000)
                if n % 1000 == 0:
                    await asyncio.sleep(0)  # (the in-memory broker's send never waits: let the worker run)
        await written.wait()
        await worker.checkpoint()


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--grace", type=float, default=0.0)
    p.add_argument("--store-keys", type=int, default=0)
    args = p.parse_args()
    orders = [(f"key-{(n * 7) % args.keys}", n, START_MS + n) for n in range(args.messages)]
    prices = [(f"key-{n % args.keys}", n, START_MS + n * 10 + 3) for n in range(args.messages // 10)]
    with broker(args.broker) as bootstrap:
        suffix = uuid.uuid4().hex[:6]
        names = {side: f"asof-{side}-{suffix}" for side in ("orders", "prices")}
        await create_topics(bootstrap, list(names.values()), args.partitions)
        await produce(bootstrap, names["orders"], orders)
        await produce(bootstrap, names["prices"], prices)
        print(f"preloaded {len(orders):,} orders and {len(prices):,} prices over {args.keys} keys, "
              f"{args.partitions} partitions")
        ratios: list[float] = []
        # (a versioned join with grace holds the last grace's orders back: fewer results than orders)
        count = len(orders) - (round(args.grace * 1000) + 1 if args.grace else 0)
        for round_ in range(args.rounds):
            rates: dict[str, float] = {}
            for mode in ("plain", "versioned") if round_ % 2 == 0 else ("versioned", "plain"):
                env = {"BENCH_MODE": mode, "BENCH_PRICES": names["prices"],
                       "BENCH_GRACE": str(args.grace if mode == "versioned" else 0)}
                result = await asyncio.to_thread(run_job, JOB, bootstrap, names["orders"],
                                                 count if mode == "versioned" else len(orders), env=env)
                if result is None:
                    continue
                rates[mode] = result["records"] / result["seconds"]
                busy = result["cpu"] / result["seconds"]
                print(f"round {round_ + 1}: {mode:9} {rates[mode]:,.0f} orders/s (CPU {busy:.0%})",
                      flush=True)
            if len(rates) == 2:
                ratios.append(rates["versioned"] / rates["plain"])
                print(f"round {round_ + 1}: versioned/plain = {ratios[-1]:.2f}", flush=True)
        if ratios:
            print(f"\nversioned/plain: median {median(ratios):.2f} over {len(ratios)} rounds "
                  f"({', '.join(f'{r:.2f}' for r in ratios)})")
    if args.store_keys:
        started = time.perf_counter()
        versioned, plain = await asyncio.to_thread(store_sizes, args.store_keys)
        took = time.perf_counter() - started
        print(f"\nstore of {args.store_keys:,} keys: versioned with 10 versions each "
              f"{versioned / 1e6:,.1f} MB, plain {plain / 1e6:,.1f} MB ({versioned / plain:.1f}x; "
              f"{took:.0f} s)")

if __name__ == "__main__":
    asyncio.run(main())
