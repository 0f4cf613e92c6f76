"""What an open page costs a busy worker: the agent's keyed JSON count of benchmarks.stateful_json, with its
web server on, run with nobody asking and with the page's polls (`GET /ui/app` every `--every` seconds, as
an open page asks: 2 s; 0.5 s is four pages open), from another process, as a browser is.

    .venv/bin/python -m benchmarks.page_cost [--messages 1000000] [--rounds 3] [--every 2 0.5]

Each round runs the count once without polls and once with each interval, in turn (the order rotates from
round to round), over the same preloaded topic; events/s, and the worker's CPU an event (its process's),
from the first event to the last. The figure is with polls / without (median over rounds); the goal is at
least 0.98 at 2 s. The CPU ratio tells the page's own work from a slower run for other reasons (the machine's
other processes: the broker, the poller). Checked: every run counts every
event of every key, and each polled run's page answered (200) at least once per interval it ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.common import broker, create_topics, median, parser, preload
from benchmarks.stateful_json import engine_count

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

    import engine

# The page's polls, from a process of their own: GET /ui/app every INTERVAL seconds (a LIMIT of them, if
# given), the answers counted into the file it is given when it stops (SIGTERM, or the limit reached).
POLLER = """
import signal, sys, time, urllib.request
url, every, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
limit = int(sys.argv[4]) if len(sys.argv) > 4 else None
answered = []
def stop(*_):
    open(out, "w").write(str(len(answered)))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while limit is None or len(answered) < limit:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            reply.read()
            answered.append(reply.status)
    except OSError:
        pass
    time.sleep(max(0.0, every - (time.monotonic() - started)))
stop()
"""
BURST = 200  # polls of an idle worker, to measure its CPU per poll


def polling(every: float, answered: list[int], cpu_per_poll: list[float]
            ) -> Callable[[engine.Worker], AbstractAsyncContextManager[object]]:
    """What runs beside the worker (`engine_count(beside=...)`): the page's polls while the count runs, how
    many were answered appended to `answered` at the end; then, the count done and the worker idle, the CPU
    seconds this process (the worker's) spends per poll, over BURST polls as fast as they are answered,
    appended to `cpu_per_poll`."""

    @contextlib.asynccontextmanager
    async def beside(worker: engine.Worker) -> AsyncIterator[object]:
        assert worker.web is not None
        url = f"http://{worker.web.endpoint}/ui/app"
        out = Path(f"/tmp/page-cost-{uuid.uuid4().hex[:8]}")
        poller = await asyncio.create_subprocess_exec(sys.executable, "-c", POLLER, url, str(every), str(out))
        try:
            yield poller
        finally:
            poller.terminate()
            await poller.wait()
            answered.append(await asyncio.to_thread(_answered, out))
        burst = await asyncio.create_subprocess_exec(sys.executable, "-c", POLLER, url, "0", str(out),
                                                     str(BURST))
        started = time.process_time()
        await burst.wait()
        cpu_per_poll.append((time.process_time() - started) / BURST)
        await asyncio.to_thread(_answered, out)

    return beside


def _answered(out: Path) -> int:
    """How many polls a poller counted into `out` (the file then gone)."""
    count = int(out.read_text()) if out.exists() else 0
    out.unlink(missing_ok=True)
    return count


async def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--every", type=float, nargs="+", default=[2.0, 0.5], help="seconds between two polls")
    p.set_defaults(messages=1_000_000)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with broker(args.broker) as bootstrap:
        source = f"page-cost-{uuid.uuid4().hex[:6]}"
        await create_topics(bootstrap, [source], args.partitions)
        took = await preload(bootstrap, source, args.messages)
        print(f"preloaded {args.messages:,} messages on {args.partitions} partitions in {took:.1f}s")
        kinds: list[float | None] = [None, *args.every]
        ratios: dict[float, list[float]] = {every: [] for every in args.every}
        cpu_ratios: dict[float, list[float]] = {every: [] for every in args.every}
        truth = None
        cpu_per_poll: list[float] = []
        for round_ in range(args.rounds):
            shift = round_ % len(kinds)
            rates: dict[float | None, float] = {}
            cpus: dict[float | None, float] = {}
            for every in kinds[shift:] + kinds[:shift]:
                answered: list[int] = []
                rate, cpus[every], counts = await engine_count(
                    bootstrap, source, args.messages, web_enabled=True, web_port=0,
                    beside=polling(every, answered, cpu_per_poll) if every is not None else None)
                truth = truth or counts
                assert counts == truth, "every run counts every event of every key"
                rates[every] = rate
                if every is not None:
                    seconds = args.messages / rate
                    assert answered[0] >= int(seconds / every), f"the page answered {answered[0]} polls"
            line = ", ".join(f"polled every {every:g} s {rates[every]:,.0f} "
                             f"({rates[every] / rates[None]:.3f}; {cpus[every]:.1f} µs CPU an event)"
                             for every in args.every)
            print(f"round {round_ + 1}: no page {rates[None]:,.0f} events/s "
                  f"({cpus[None]:.1f} µs CPU an event), {line}")
            for every in args.every:
                ratios[every].append(rates[every] / rates[None])
                cpu_ratios[every].append(cpus[every] / cpus[None])
        for every in args.every:
            print(f"median of {args.rounds}: polled every {every:g} s / no page: events/s "
                  f"{median(ratios[every]):.3f}, the worker's CPU an event {median(cpu_ratios[every]):.3f}")
        per_poll = median(cpu_per_poll)
        print(f"CPU of the worker per poll of /ui/app (idle, {BURST} polls, median of {len(cpu_per_poll)}): "
              f"{per_poll * 1000:.2f} ms, {per_poll / 2:.2%} of a core for one page open (a poll every 2 s)")


if __name__ == "__main__":
    asyncio.run(main())
