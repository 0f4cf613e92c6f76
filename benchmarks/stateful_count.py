"""Stateful count: 200k keyed events (1,000 keys) counted into RocksDB-backed state with a changelog.

    bash benchmarks/setup.sh && .venv-bench/bin/python -m benchmarks.stateful_count [--rounds 3]

engine (a Table), faust-streaming (a Table on rocksdict) and quixstreams (stateful update) each run as a
subprocess on the same preloaded topic of the same broker, in the same run, in their own consumer group;
each reports the time from its first to its last record. The raw aiokafka passthrough of
benchmarks/passthrough.py runs in the same rounds as the reference rate.
"""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaProducer

from benchmarks.common import available, broker, create_topics, median, parser, preload, run_job
from benchmarks.passthrough import raw_aiokafka

PEERS = {  # name: (job module, framework that must be importable)
    "engine": ("benchmarks.peers.engine_guarantee_job", "engine"),  # BENCH_MODE=count, at_least_once
    "faust": ("benchmarks.peers.faust_count", "faust"),
    "quixstreams": ("benchmarks.peers.quix_count", "quixstreams"),
}


async def preload_words(bootstrap: str, topic: str, count: int, keys: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, b"1", key=f"word-{i % keys}".encode())
        await producer.flush()
    finally:
        await producer.stop()


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keys", type=int, default=1000)
    args = p.parse_args()
    peers = [name for name, (_, framework) in PEERS.items() if available(framework)]
    with broker(args.broker) as bootstrap:
        words = f"count-words-{uuid.uuid4().hex[:6]}"
        json_in = f"count-json-{uuid.uuid4().hex[:6]}"
        await create_topics(bootstrap, [words, json_in, json_in + "-raw"], args.partitions)
        await preload_words(bootstrap, words, args.messages, args.keys)
        await preload(bootstrap, json_in, args.messages)
        print(f"preloaded {args.messages} records over {args.keys} keys, {args.partitions} partitions")
        rates: dict[str, list[float]] = {name: [] for name in ["raw passthrough", *peers]}
        for round_ in range(args.rounds):
            raw, _ = await raw_aiokafka(bootstrap, json_in, json_in + "-raw", args.messages)
            rates["raw passthrough"].append(raw)
            line = [f"raw passthrough {raw:,.0f}/s"]
            for name in peers:
                result = await asyncio.to_thread(run_job, PEERS[name][0], bootstrap, words, args.messages)
                if result is not None:
                    rates[name].append(result["records"] / result["seconds"])
                    line.append(f"{name} {rates[name][-1]:,.0f}/s")
            print(f"round {round_ + 1}: " + ", ".join(line))
        best = {name: median(values) for name, values in rates.items() if values}
        print("median: " + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in best.items()))
        if "engine" in best:
            for other in best:
                if other != "engine":
                    print(f"  engine / {other}: {best['engine'] / best[other]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
