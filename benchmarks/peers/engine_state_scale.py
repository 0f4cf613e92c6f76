"""The job of benchmarks/state_scale.py, one key count at a time, in a process of its own (its RSS is the
table's, not an earlier size's). BENCH_MODE=count: BENCH_COUNT events counted per key into a RocksDB table
with a changelog, then every key's count read back; reports events/s and CPU per event, the checkpoints
run meanwhile (how many, their mean seconds, the changelog records they wrote), the final checkpoint, the
process's anonymous RSS and the store's size on disk. BENCH_MODE=restore: the same table started with an
empty data dir, rebuilt from its changelog; reports the seconds from the worker's start until its stores
are restored, the records replayed, and the RSS then. BENCH_STORE_MEMORY: the stores' budget in bytes."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import engine
from benchmarks.peers.harness import Job, engine_worker

job = Job()
started = time.perf_counter()


def rss_mb() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["RssAnon"].split()[0]) / 1024


def disk_mb(directory: str) -> float:
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file()) / 2**20


def make_app(done: asyncio.Event) -> tuple[engine.App, Any]:
    """The app of both modes (a restore's tasks are its agent's: it reads from the committed end, nothing)."""
    app = engine.App(job.group, broker=f"kafka://{job.bootstrap}", data_dir=job.state_dir,
                     store_memory=int(os.environ.get("BENCH_STORE_MEMORY", 64 << 20)))
    events = app.topic(job.topic, key_type=str, value_type=dict)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(events)
    async def count_keys(stream: Any) -> None:
        async for key, _ in stream.items():
            counts[key] += 1
            if job.tick():  # (the report written; rewritten with the rest once the count is checked)
                done.set()

    return app, counts


async def count() -> None:
    done = asyncio.Event()
    app, counts = make_app(done)
    async with engine_worker(app) as worker:
        await done.wait()
        seconds, cpu = time.perf_counter() - job.first, time.process_time() - job.cpu  # type: ignore[operator]
        checkpoints = worker.tasks.checkpoints.durations
        during = (checkpoints.count, checkpoints.sum, counts.changelog_records)
        rss = rss_mb()  # (before the counts are read back into a dict of every key, the check's own memory)
        final = time.perf_counter()
        await worker.checkpoint()
        final = time.perf_counter() - final
        read = time.perf_counter()
        found = dict(counts.items())
        read = time.perf_counter() - read
        job.extra.update({
            "mode": "count", "cpu_us": cpu / job.count * 1e6, "rss_mb": rss,
            "disk_mb": disk_mb(job.state_dir), "checkpoints": during[0],
            "checkpoint_mean_s": during[1] / during[0] if during[0] else None,
            "changelog_records": during[2], "final_checkpoint_s": final, "keys": len(found),
            "total": sum(found.values()), "read_all_s": read})
        job.report(seconds)


async def restore() -> None:
    app, _ = make_app(asyncio.Event())
    async with engine_worker(app) as worker:
        tables = worker.tables
        assert tables is not None
        first = last = None  # when the first record was replayed, and when none was left
        deadline = time.perf_counter() + 3600
        while tables.progress.remaining > 0 or not worker.assigned() or not all(worker.assigned().values()):
            progress = tables.progress
            if first is None and progress.applied:
                first = time.perf_counter()
            if last is None and progress.applied and progress.remaining <= 0:
                last = time.perf_counter()
            assert time.perf_counter() < deadline, "not restored within an hour"
            await asyncio.sleep(0.001)
        done = time.perf_counter()
        replay_s = (last or done) - (first or done)
        job.extra.update({"mode": "restore", "replayed": sum(tables.replayed.values()),
                          "replay_s": replay_s, "rss_mb": rss_mb(),
                          "disk_mb": disk_mb(job.state_dir)})
        job.first = started
        job.report(done - started)


if __name__ == "__main__":
    asyncio.run(count() if os.environ.get("BENCH_MODE", "count") == "count" else restore())
