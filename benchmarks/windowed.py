"""Windowed counting with expiry against plain counting, 1M events, same broker, same run.

    .venv/bin/python -m benchmarks.windowed [--messages 1000000] [--rounds 2] [--keys 1000]
        [--kinds windowed,session,sliding]

Events are keyed over `--keys` keys and carry their event time as the value: 100 events per second of event
time, so 1M events span about 2.8 hours. Each round runs both jobs back to back (in alternating order) and
gives its ratio; the median of the rounds' ratios is the figure. The windowed table keeps 1-minute tumbling
windows for 10 minutes: without expiry it would hold one entry per key per minute (up to 167k); with it,
the live windows must plateau near keys x 11. Reports each contender's rate, the live-window samples, and the
keys left in the stores at the end. `--kinds` adds 30-second session counts and 1-minute sliding-window counts
(pipelines), each against the same round's plain count.
"""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaProducer

from benchmarks.common import broker, create_topics, median, parser, run_job

JOB = "benchmarks.peers.engine_window_count"


async def preload_timed(bootstrap: str, topic: str, count: int, keys: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, str(1_700_000_000 + i // 100).encode(), key=f"key-{i % keys}".encode())
        await producer.flush()
    finally:
        await producer.stop()


async def main() -> None:
    p = parser(__doc__ or "")
    p.set_defaults(messages=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--kinds", default="windowed", help="windowed, session, sliding: comma-separated")
    args = p.parse_args()
    kinds = [kind for kind in args.kinds.split(",") if kind]
    with broker(args.broker) as bootstrap:
        topic = f"windowed-{uuid.uuid4().hex[:6]}"
        await create_topics(bootstrap, [topic], args.partitions)
        await preload_timed(bootstrap, topic, args.messages, args.keys)
        print(f"preloaded {args.messages:,} events over {args.keys} keys, {args.partitions} partitions, "
              f"{args.messages // 100:,} s of event time")
        ratios: dict[str, list[float]] = {kind: [] for kind in kinds}
        for round_ in range(args.rounds):
            # Each round runs all, in alternating order, and gives its own ratios: the machine's speed drifts
            # over minutes, so a ratio of medians taken far apart measures the drift as much as the table.
            rates: dict[str, float] = {}
            for mode in ["plain", *kinds] if round_ % 2 == 0 else [*kinds, "plain"]:
                result = await asyncio.to_thread(run_job, JOB, bootstrap, topic, args.messages,
                                                 env={"BENCH_MODE": mode})
                if result is None:
                    continue
                rates[mode] = result["records"] / result["seconds"]
                extra = ""
                if mode != "plain":
                    extra = (f"; live windows every 100k events: {result['live_windows']}; "
                             f"keys in the stores at the end: {result['stored_keys']:,}")
                print(f"round {round_ + 1}: {mode:8} {rates[mode]:,.0f} events/s{extra}", flush=True)
            for kind in kinds:
                if kind in rates and "plain" in rates:
                    ratios[kind].append(rates[kind] / rates["plain"])
                    print(f"round {round_ + 1}: {kind}/plain = {ratios[kind][-1]:.2f}", flush=True)
        for kind, found in ratios.items():
            if found:
                print(f"\n{kind}/plain: median {median(found):.2f} over {len(found)} rounds "
                      f"({', '.join(f'{r:.2f}' for r in found)})")

if __name__ == "__main__":
    asyncio.run(main())
