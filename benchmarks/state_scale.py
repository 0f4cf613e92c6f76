"""State that grows (issue 55): one table counted per key as its key count grows tenfold, and the same table
rebuilt from its changelog.

    .venv/bin/python -m benchmarks.state_scale [--keys 1000 100000 1000000 10000000] [--events 1000000]
        [--store-memory 64] [--plot PNG]

For each key count K, on a topic of its own (4 partitions): max(--events, K) JSON events (~57 B, as
stateful_json's) over K keys, every key at least once, preloaded. Then, each in a process of its own
(benchmarks.peers.engine_state_scale), so that its memory is that size's alone:

1. **count**: an agent counts each event into a RocksDB table with a changelog (`store_memory` MiB for the
   stores, commits every second): events/s and the process's CPU µs an event; the checkpoints run meanwhile
   (mean seconds, changelog records each: the dirty keys they wrote); the final checkpoint; the anonymous
   RSS and the store's bytes on disk at the end. Checked: K keys, whose counts add up to the events.
2. **restore**: the same app on an empty data dir, its table rebuilt from the changelog: records/s over the
   replay (first record to last), seconds from the process's start to its tasks ready, RSS and store on disk.

The per-event CPU and the RSS are also given relative to the smallest K: the goals are within 1.5x at 10M
keys of 1k, and RSS bounded by the stores' budget rather than by K.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import broker, create_topics, json_event, parser, run_job, send_records
from benchmarks.plots import Panel, draw

JOB = "benchmarks.peers.engine_state_scale"


def one_size(bootstrap: str, topic: str, events: int, keys: int, store_memory: int) -> dict[str, Any]:
    group = f"state-scale-{uuid.uuid4().hex[:8]}"
    env = {"BENCH_STORE_MEMORY": str(store_memory)}
    counted = run_job(JOB, bootstrap, topic, events, group=group, timeout=7200,
                      env={**env, "BENCH_MODE": "count"})
    assert counted is not None, f"the count of {keys:,} keys failed"
    assert (counted["keys"], counted["total"]) == (keys, events), counted
    restored = run_job(JOB, bootstrap, topic, events, group=group, timeout=7200,
                       env={**env, "BENCH_MODE": "restore"})
    assert restored is not None, f"the restore of {keys:,} keys failed"
    assert restored["replayed"] >= keys, restored  # (at least one record per key: its latest count)
    return {"keys": keys, "events": events, "count": counted, "restore": restored}


def report(rows: list[dict[str, Any]], plot: Path | None, store_memory: int) -> None:
    base = rows[0]["count"]
    print(f"{'keys':>10}  {'events/s':>9}  {'CPU µs/ev':>9}  {'x base':>6}  {'RSS MB':>7}  {'x base':>6}  "
          f"{'disk MB':>8}  {'ckpts':>5}  {'ckpt s':>7}  {'recs/ckpt':>9}  {'final ckpt s':>12}  "
          f"{'replayed':>10}  {'restore rec/s':>13}  {'ready s':>7}  {'RSS MB':>7}")
    for row in rows:
        c, r = row["count"], row["restore"]
        rate = row["events"] / c["seconds"]
        per = c["changelog_records"] / c["checkpoints"] if c["checkpoints"] else 0
        replay = r["replayed"] / r["replay_s"] if r["replay_s"] else float("nan")
        mean = c["checkpoint_mean_s"] or 0.0
        print(f"{row['keys']:>10,}  {rate:>9,.0f}  {c['cpu_us']:>9.1f}  "
              f"{c['cpu_us'] / base['cpu_us']:>6.2f}  "
              f"{c['rss_mb']:>7.1f}  {c['rss_mb'] / base['rss_mb']:>6.2f}  {c['disk_mb']:>8.1f}  "
              f"{c['checkpoints']:>5}  {mean:>7.3f}  {per:>9,.0f}  {c['final_checkpoint_s']:>12.3f}  "
              f"{r['replayed']:>10,}  {replay:>13,.0f}  {r['seconds']:>7.1f}  {r['rss_mb']:>7.1f}")
    if plot is not None:
        xs = [row["keys"] for row in rows]
        title = f"benchmarks.state_scale: one table counted per key, store_memory {store_memory >> 20} MiB"
        draw(plot, title, "keys", [
                 Panel("the count: CPU per event", "µs",
                       [("CPU an event", xs, [r["count"]["cpu_us"] for r in rows])]),
                 Panel("anonymous RSS at the end", "MB", [
                     ("count", xs, [r["count"]["rss_mb"] for r in rows]),
                     ("restore", xs, [r["restore"]["rss_mb"] for r in rows])]),
                 Panel("restore from the changelog", "records/s", [
                     ("replay", xs, [r["restore"]["replayed"] / r["restore"]["replay_s"]
                                     if r["restore"]["replay_s"] else 0 for r in rows])]),
             ], x_log=True)
        print(f"plot: {plot}")


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--keys", type=int, nargs="+", default=[1000, 100_000, 1_000_000, 10_000_000])
    p.add_argument("--events", type=int, default=1_000_000, help="at least; more where keys are more")
    p.add_argument("--store-memory", type=int, default=64, help="MiB of the RocksDB budget (store_memory)")
    p.add_argument("--plot", type=Path)
    args = p.parse_args()
    store_memory = args.store_memory << 20
    rows = []
    with broker(args.broker) as bootstrap:
        for keys in sorted(args.keys):
            events = max(args.events, keys)
            topic = f"state-scale-{keys}-{uuid.uuid4().hex[:6]}"
            await create_topics(bootstrap, [topic], args.partitions)
            await send_records(bootstrap, topic, (json_event(i, keys) for i in range(events)))
            row = await asyncio.to_thread(one_size, bootstrap, topic, events, keys, store_memory)
            rows.append(row)
            c, r = row["count"], row["restore"]
            print(f"{keys:,} keys, {events:,} events: {events / c['seconds']:,.0f} events/s, "
                  f"{c['cpu_us']:.1f} µs CPU an event, RSS {c['rss_mb']:.0f} MB; restored {r['replayed']:,} "
                  f"records in {r['replay_s']:.1f} s", flush=True)
    report(rows, args.plot, store_memory)


if __name__ == "__main__":
    asyncio.run(main())
