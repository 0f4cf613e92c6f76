"""A stream-stream join against a passthrough of as many records, same broker, same run.

    .venv/bin/python -m benchmarks.stream_join [--messages 200000] [--rounds 3] [--keys 1000]

Two topics of `--messages` records each (event time 100 records/s, keys spread over `--keys`, the right
stream 5 ms after the left), joined within 5 s by an agent that sends each result on; against an agent
passing a third topic holding both streams' records through. The join's results are counted beforehand from
the input (each left record with every right record of its key at most 5 s away), so the job knows when it
is done. Rates are input records/s; each round gives join/passthrough, the median of the rounds is the
figure.
"""

from __future__ import annotations

import asyncio
import bisect
import uuid
from collections import defaultdict

from aiokafka import AIOKafkaProducer

from benchmarks.common import broker, create_topics, median, parser, run_job

JOB = "benchmarks.peers.engine_stream_join"
START_MS = 1_700_000_000_000
WITHIN_MS = 5_000


def records(count: int, keys: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    left = [(f"key-{i % keys}", START_MS + i * 10) for i in range(count)]
    right = [(f"key-{(i * 7) % keys}", START_MS + i * 10 + 5) for i in range(count)]
    return left, right


def join_results(left: list[tuple[str, int]], right: list[tuple[str, int]]) -> int:
    times: dict[str, list[int]] = defaultdict(list)
    for key, at in right:
        times[key].append(at)
    for found in times.values():
        found.sort()
    return sum(bisect.bisect_right(times[key], at + WITHIN_MS)
               - bisect.bisect_left(times[key], at - WITHIN_MS) for key, at in left)


async def produce(bootstrap: str, topic: str, items: list[tuple[str, int]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        for n, (key, at) in enumerate(items):
            await producer.send(topic, str(n).encode(), key=key.encode(), timestamp_ms=at)
        await producer.flush()
    finally:
        await producer.stop()


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keys", type=int, default=1000)
    args = p.parse_args()
    left, right = records(args.messages, args.keys)
    results = join_results(left, right)
    with broker(args.broker) as bootstrap:
        suffix = uuid.uuid4().hex[:6]
        names = {side: f"join-{side}-{suffix}" for side in ("left", "right", "both")}
        await create_topics(bootstrap, list(names.values()), args.partitions)
        await produce(bootstrap, names["left"], left)
        await produce(bootstrap, names["right"], right)
        await produce(bootstrap, names["both"], sorted(left + right, key=lambda r: r[1]))
        inputs = 2 * args.messages
        print(f"preloaded {args.messages:,} records per stream over {args.keys} keys, {args.partitions} "
              f"partitions; {results:,} join results")
        ratios: list[float] = []
        for round_ in range(args.rounds):
            rates: dict[str, float] = {}
            for mode in ("passthrough", "join") if round_ % 2 == 0 else ("join", "passthrough"):
                topic, count = (names["left"], results) if mode == "join" else (names["both"], inputs)
                result = await asyncio.to_thread(run_job, JOB, bootstrap, topic, count,
                                                 env={"BENCH_MODE": mode, "BENCH_RIGHT": names["right"]})
                if result is None:
                    continue
                rates[mode] = inputs / result["seconds"]
                busy = result["cpu"] / result["seconds"]
                print(f"round {round_ + 1}: {mode:11} {rates[mode]:,.0f} input records/s (CPU {busy:.0%})",
                      flush=True)
            if len(rates) == 2:
                ratios.append(rates["join"] / rates["passthrough"])
                print(f"round {round_ + 1}: join/passthrough = {ratios[-1]:.2f}", flush=True)
        if ratios:
            print(f"\njoin/passthrough: median {median(ratios):.2f} over {len(ratios)} rounds "
                  f"({', '.join(f'{r:.2f}' for r in ratios)})")

if __name__ == "__main__":
    asyncio.run(main())
