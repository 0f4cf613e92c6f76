"""A day on the test driver: what `TestDriver.advance(86400)` costs, in wall time and loop steps.

    .venv/bin/python -m benchmarks.driver_day [--rounds 3]

The app: a keyed sum in 1-minute tumbling windows (grace 0) whose final results an agent sends on, and a
timer every hour sending to a topic; three events, then a day advanced. Again with `close_idle_after=30` on
the windows (the commit loop then also wakes when the clock alone closes or expires a window).
The outputs are checked: 24 timer runs, the windows' final sums. No broker.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import engine
from engine.testing import TestDriver

T0 = 1_767_225_600  # the driver's default start
DAY = 86_400


def day_app(close_idle_after: float | None) -> tuple[engine.App, Any, Any, Any]:
    app = engine.App("bench-driver-day", broker="memory://unused", topic_partitions=1)
    source = app.topic("in", key_type=str, value_type=int)
    sums = app.stream(source).tumbling(60, grace=0, close_idle_after=close_idle_after).sum(
        "sums", lambda v: v)
    finals = app.topic("finals", key_type=str, value_type=list)
    ticks = app.topic("ticks", value_type=str)

    @app.agent(sums.closed())
    async def report(stream: Any) -> None:
        async for (key, window), total in stream.items():
            await finals.send(key=key, value=[window.start, total])

    @app.timer(3600)
    async def hourly() -> None:
        await ticks.send(value="tick")

    return app, source, finals, ticks


def one_day(close_idle_after: float | None) -> tuple[float, int]:
    """Seconds of wall time and loop steps that advancing a day took."""
    app, source, finals, ticks = day_app(close_idle_after)
    with TestDriver(app) as driver:
        for value, at in [(1, 5), (2, 30), (4, 70)]:
            driver.send(source, key="k", value=value, timestamp_ms=(T0 + at) * 1000)
        steps = driver.steps
        started = time.perf_counter()
        driver.advance(DAY)
        seconds = time.perf_counter() - started
        steps = driver.steps - steps
        assert len(driver.read(ticks)) == 24
        expected = [[T0, 3]] + ([[T0 + 60, 4]] if close_idle_after is not None else [])
        assert [r.value for r in driver.read(finals)] == expected
    return seconds, steps


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--rounds", type=int, default=3)
    rounds = args.parse_args().rounds
    for idle in (None, 30.0):
        runs = [one_day(idle) for _ in range(rounds)]
        print(f"close_idle_after={idle}: advance({DAY}) "
              + ", ".join(f"{seconds:.3f} s" for seconds, _ in runs) + f"; {runs[0][1]:,} loop steps")


if __name__ == "__main__":
    main()
