"""Recovery: replay a 1M-key changelog into an empty store, engine vs faust-streaming.

    bash benchmarks/setup.sh && .venv-bench/bin/python -m benchmarks.recovery [--messages 1000000]

For each framework, a changelog topic named as that framework names it is filled with the same records
(distinct keys, JSON int values), then a worker starts with an empty data dir and we time it until its table
is recovered. The same start on a changelog of one record per partition is timed too and subtracted, so
the rate is the replay's. (Not an empty changelog: faust-streaming's recovery waits forever on an empty
changelog partition, faust-streaming/faust#597.)
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks.common import available, broker, create_topics, parser, run_job

TIMEOUT = 180.0  # faust's recovery can hang for good (faust-streaming/faust#155, #597): don't wait forever

JOBS = {  # name: (job module, framework that must be importable)
    "engine": ("benchmarks.peers.engine_recover", "engine"),
    "faust": ("benchmarks.peers.faust_recover", "faust"),
}


async def fill(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1024 * 1024)
    await producer.start()
    try:
        for i in range(count):
            key = f"key-{i}".encode()
            await producer.send(topic, str(i % 1000).encode(), key=key, partition=i % 4)
        await producer.flush()
    finally:
        await producer.stop()


async def measure(name: str, bootstrap: str, partitions: int, count: int) -> dict[str, Any] | None:
    """Fill `<group>-counts-changelog` with `count` records, then time a worker's start until recovered."""
    group = f"recover-{name}-{uuid.uuid4().hex[:6]}"
    source, changelog = f"{group}-source", f"{group}-counts-changelog"
    await create_topics(bootstrap, [source, changelog], partitions)
    if count:
        await fill(bootstrap, changelog, count)
    return await asyncio.to_thread(run_job, JOBS[name][0], bootstrap, source, count, group=group,
                                   timeout=TIMEOUT)


async def main() -> None:
    p = parser(__doc__ or "")
    p.set_defaults(messages=1_000_000)
    p.add_argument("--frameworks", default=",".join(JOBS), help="comma-separated: engine,faust")
    args = p.parse_args()
    wanted = args.frameworks.split(",")
    names = [name for name, (_, framework) in JOBS.items() if name in wanted and available(framework)]
    with broker(args.broker) as bootstrap:
        results = {}
        for name in names:
            empty = await measure(name, bootstrap, args.partitions, args.partitions)
            full = await measure(name, bootstrap, args.partitions, args.messages)
            if empty is None or full is None:
                print(f"{name}: did not finish recovering within {TIMEOUT:g}s")
                continue
            replay = full["seconds"] - empty["seconds"]
            results[name] = (args.messages - args.partitions) / replay
            print(f"{name}: start {empty['seconds']:.1f}s, start + recover {args.messages:,} records "
                  f"{full['seconds']:.1f}s -> {results[name]:,.0f} records/s"
                  + (f" (replayed {full['replayed']:,})" if "replayed" in full else ""))
        if "engine" in results and "faust" in results:
            print(f"engine / faust: {results['engine'] / results['faust']:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
