"""engine counting keyed events with event time, into a plain table or (BENCH_MODE=windowed) a tumbling
1-minute windowed table that expires windows after 10 minutes, (session) 30-second sessions or (sliding)
1-minute sliding windows, the last two as pipelines (`app.stream(...).session(30).count(...)`). Reports,
besides the rate, the live windows sampled as the run goes and the keys left in the stores at the end:
bounded state shows as a plateau."""

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import engine
from benchmarks.peers.harness import Job, engine_worker

job = Job()
MODE = os.environ.get("BENCH_MODE", "plain")
WINDOWED = MODE == "windowed"
SAMPLE_EVERY = 100_000


def add_to_report(extra: dict[str, object]) -> None:
    """tick() reported the rate at the last record; the state sizes are added to that report."""
    path = Path(job.out)
    path.write_text(json.dumps({**json.loads(path.read_text()), **extra}))


def live_windows(table: Any) -> int:
    """The windows (or sessions) the table's active partitions keep in memory."""
    total = 0
    for part in table.active.values():
        state = part.windows
        if state is None:
            continue
        keyed = getattr(state, "windows", None) or getattr(state, "keys", None)  # (sessions; sliding windows)
        total += (sum(len(w) for w in keyed.values()) if keyed is not None
                  else sum(len(keys) for keys in state.live.values()))
    return total


async def main() -> None:
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir,
                     commit_interval=1.0)
    events = app.topic(job.topic, key_type=str, value_type=int, timestamp=lambda at: at)
    samples: list[int] = []
    done = asyncio.Event()
    if MODE in ("session", "sliding"):
        def counted(value: int) -> int:  # a step of the pipeline: the job counts the events it takes
            if job.seen % SAMPLE_EVERY == 0:
                samples.append(live_windows(table))
            if job.tick():
                done.set()
            return value

        pipeline = app.stream(events).map(counted, value_type=int)
        windowed = (pipeline.session(30) if MODE == "session" else pipeline.sliding(60)).count("counts")
        table = windowed.table
    else:
        table = app.Table("counts", default=int, key_type=str, value_type=int)
        counts = table.tumbling(60, expires=600) if WINDOWED else table

        @app.agent(events)
        async def count(stream):
            async for key, _ in stream.items():
                counts[key] += 1
                if job.seen % SAMPLE_EVERY == 0:
                    samples.append(live_windows(table))
                if job.tick():
                    done.set()

    async with engine_worker(app) as worker:
        await done.wait()
        await worker.checkpoint()
        stored = sum(1 for part in table.active.values() for _ in part.store.items())
        add_to_report({"live_windows": samples, "stored_keys": stored})


asyncio.run(main())
