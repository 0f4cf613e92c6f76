"""Cold start of a group with big state: three `engine worker`s started at once with empty data dirs, each
restoring its partitions of a table (1M keys by default) while the group rebalances around them.

    .venv/bin/python -m benchmarks.cold_start [--keys 1000000] [--rounds 1]

The scenario of tests/integration/test_cold_start.py (tests/integration/cold_start_run.py), at full size: a
first run of the counting app builds the table and its changelog over `keys` keys (6 partitions), then the
three fresh workers start. Reported per round: the first run's time (produce to committed), the seconds
from spawning the three to the group settled (every worker running, every partition active, none
recovering), the assignments each heard, the changelog records each replayed as an active task, which
restored as warm-up replicas first and whose restore a rebalance interrupted. The table is
read back through the workers and checked against the input, as in the test.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from tests.integration.cold_start_run import cold_start
from tests.kafka.broker import KafkaCluster


async def rounds(bootstrap: str, keys: int, count: int) -> None:
    for round_ in range(1, count + 1):
        with tempfile.TemporaryDirectory(prefix="engine-cold-") as tmp:
            result = await cold_start(bootstrap, f"kafka://{bootstrap}", Path(tmp), keys)
        print(f"round {round_}: {keys} keys; first run {result.first_run:.1f}s; three fresh workers ready in "
              f"{result.ready:.1f}s; assignments heard {result.assignments}; replayed by active restores "
              f"{result.replayed}; warmed up first: {result.warmed_up}; restore interrupted by a rebalance: "
              f"{result.rebalanced_while_restoring}; table exact", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--broker", help="host:port of a running Kafka (default: start one)")
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args()
    if args.broker:
        asyncio.run(rounds(args.broker, args.keys, args.rounds))
        return
    # Not benchmarks.common.broker, which pins this process to one core: the three workers it spawns share
    # the machine with the broker, as the test's do.
    with KafkaCluster(1, heap="1g", peak=True) as cluster:
        asyncio.run(rounds(cluster.bootstrap, args.keys, args.rounds))


if __name__ == "__main__":
    main()
