"""The price of exactly-once: the keyed count and the passthrough under exactly_once against at_least_once,
same broker, same preloaded topics, same run.

    .venv/bin/python -m benchmarks.exactly_once [--messages 1000000] [--rounds 2] [--commit-interval 0.1]

Each contender is `benchmarks.peers.engine_guarantee_job` in its own process and consumer group: the count
(1,000 keys into a RocksDB table with a changelog) and the passthrough (JSON decoded, a field added, sent
on), each under both guarantees, alternating within a round. Runs hold dozens of commits (1M events at the
default 100 ms commit interval, Kafka Streams' default under exactly-once), so the figure prices the
transactions rather than start-up; each job reports how many checkpoints ran while it processed. The ratio
printed is exactly_once / at_least_once by median rate. Then `--asks` events are each handled by an agent
that asks another agent and waits for the answer, under both guarantees: the asks' p50/p99/max latency.
"""

from __future__ import annotations

import asyncio
import uuid

from benchmarks.common import broker, create_topics, median, parser, preload, run_job
from benchmarks.stateful_count import preload_words

JOB = "benchmarks.peers.engine_guarantee_job"
GUARANTEES = ("at_least_once", "exactly_once")


async def main() -> None:
    p = parser(__doc__ or "")
    p.set_defaults(messages=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--commit-interval", type=float, default=0.1)
    p.add_argument("--asks", type=int, default=1000, help="asks, one at a time, under each guarantee")
    args = p.parse_args()
    with broker(args.broker) as bootstrap:
        suffix = uuid.uuid4().hex[:6]
        words, json_in, sink = f"eos-words-{suffix}", f"eos-json-{suffix}", f"eos-out-{suffix}"
        await create_topics(bootstrap, [words, json_in, sink], args.partitions)
        await preload_words(bootstrap, words, args.messages, 1000)
        await preload(bootstrap, json_in, args.messages)
        print(f"preloaded {args.messages:,} records per topic, {args.partitions} partitions; commit interval "
              f"{args.commit_interval:g}s")
        topics = {"count": words, "passthrough": json_in}

        def job_env(mode: str, guarantee: str) -> dict[str, str]:
            return {"BENCH_MODE": mode, "BENCH_GUARANTEE": guarantee, "BENCH_SINK": sink,
                    "BENCH_COMMIT_INTERVAL": str(args.commit_interval)}
        rates: dict[tuple[str, str], list[float]] = {(m, g): [] for m in topics for g in GUARANTEES}
        for round_ in range(args.rounds):
            for mode, topic in topics.items():
                for guarantee in GUARANTEES:
                    result = await asyncio.to_thread(run_job, JOB, bootstrap, topic, args.messages,
                                                     env=job_env(mode, guarantee))
                    if result is None:
                        continue
                    rate = result["records"] / result["seconds"]
                    rates[mode, guarantee].append(rate)
                    print(f"round {round_ + 1}: {mode:<11} {guarantee:<13} {rate:>9,.0f} events/s over "
                          f"{result['seconds']:.1f}s, {result['commits']} commits, "
                          f"{result['cpu'] / result['records'] * 1e6:.1f} CPU µs/event")
        for guarantee in GUARANTEES:
            result = await asyncio.to_thread(run_job, JOB, bootstrap, words, args.asks,
                                             env=job_env("ask", guarantee))
            if result is not None:
                print(f"ask {guarantee:<13}: {args.asks} asks from inside events, one at a time: p50 "
                      f"{result['ask_p50'] * 1000:.1f} ms, p99 {result['ask_p99'] * 1000:.1f} ms, max "
                      f"{result['ask_max'] * 1000:.1f} ms ({result['commits']} commits meanwhile)")
        print()
        for mode in topics:
            at_least, exactly = (median(rates[mode, g]) if rates[mode, g] else 0.0 for g in GUARANTEES)
            if at_least and exactly:
                print(f"median {mode}: at_least_once {at_least:,.0f}/s, exactly_once {exactly:,.0f}/s; "
                      f"exactly_once/at_least_once = {exactly / at_least:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
