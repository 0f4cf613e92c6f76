"""Messages that are not 57 bytes (issue 55): the keyed JSON count of benchmarks.stateful_json on values of
57 B, 1 KB and 10 KB, a raw aiokafka loop against engine's agent and engine's count pipeline.

    .venv/bin/python -m benchmarks.message_size [--sizes 57 1024 10240] [--messages 500000]
        [--megabytes 300] [--rounds 3]

For each size, a topic of its own (1,000 keys) preloaded with min(--messages, --megabytes / size) JSON
values of that size (stateful_json's fields, and a padding string to the size), then in each round the three
jobs in turn over it (the order rotating), each in its own consumer group: events/s and CPU µs an event from
the first event to the last, and MB/s of values. The figures are engine/raw, median over rounds; the goal at
10 KB is a pipeline at 0.9 of the raw loop or better (the cost should be Kafka's and JSON's, not engine's).
Checked: every job counts every event of every key.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import orjson

from benchmarks.common import broker, create_topics, json_event, median, parser, send_records
from benchmarks.stateful_json import engine_count, pipeline_count, raw_count

KEYS = 1000


def value_of(i: int, size: int) -> bytes:
    """stateful_json's value of event `i` (`json_event`), padded to `size` bytes (none below its own ~57)."""
    bare = json_event(i, KEYS)[1]
    if size <= len(bare):
        return bare
    value = orjson.loads(bare)
    value["pad"] = "x" * max(0, size - len(bare) - len(',"pad":""'))
    return orjson.dumps(value)


async def one_size(bootstrap: str, size: int, messages: int, megabytes: float, partitions: int,
                   rounds: int) -> tuple[int, float, float]:
    """The three jobs over a topic of `size`-byte values, `rounds` times: (value bytes, agent/raw,
    pipeline/raw), medians."""
    count = max(1000, min(messages, int(megabytes * 2**20 / size)))
    source = f"message-size-{size}-{uuid.uuid4().hex[:6]}"
    await create_topics(bootstrap, [source], partitions)
    took = await send_records(bootstrap, source, ((str(i % KEYS).encode(), value_of(i, size))
                                                  for i in range(count)))
    actual = len(value_of(0, size))
    print(f"{size} B: preloaded {count:,} values of {actual} B in {took:.1f} s", flush=True)
    jobs = {
        "raw": lambda: raw_count(bootstrap, source, count),
        "agent": lambda: engine_count(bootstrap, source, count),
        "pipeline": lambda: pipeline_count(bootstrap, source, count, "count"),
    }
    ratios: dict[str, list[float]] = {"agent": [], "pipeline": []}
    truth = None
    for round_ in range(rounds):
        names = list(jobs)
        names = names[round_ % 3:] + names[:round_ % 3]
        rates: dict[str, tuple[float, float]] = {}
        for name in names:
            rate, cpu, counts = await jobs[name]()
            truth = truth or counts
            assert counts == truth, f"{name} counts every event of every key"
            rates[name] = (rate, cpu)
        for name in ratios:
            ratios[name].append(rates[name][0] / rates["raw"][0])
        print(f"  round {round_ + 1}: " + ", ".join(
            f"{name} {rate:,.0f} events/s ({rate * actual / 2**20:.1f} MB/s, {cpu:.1f} µs CPU an event)"
            for name, (rate, cpu) in rates.items()), flush=True)
    agent, pipeline = median(ratios["agent"]), median(ratios["pipeline"])
    print(f"  median of {rounds}: agent/raw {agent:.2f}, pipeline/raw {pipeline:.2f}", flush=True)
    return actual, agent, pipeline


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--sizes", type=int, nargs="+", default=[57, 1024, 10240])
    p.add_argument("--megabytes", type=float, default=300, help="at most this many MB of values per size")
    p.add_argument("--rounds", type=int, default=3)
    p.set_defaults(messages=500_000)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with broker(args.broker) as bootstrap:
        summary = [(size, *await one_size(bootstrap, size, args.messages, args.megabytes, args.partitions,
                                          args.rounds)) for size in args.sizes]
    print("size  value B  agent/raw  pipeline/raw")
    for size, actual, agent, pipeline in summary:
        print(f"{size:>5}  {actual:>7}  {agent:>9.2f}  {pipeline:>12.2f}")


if __name__ == "__main__":
    asyncio.run(main())
