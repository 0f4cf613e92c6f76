"""A cold start of a group with big state: three workers started at once on machines without a data dir,
each restoring its partitions of a table built by a first run, while the group rebalances around them (the
first to join takes every partition and starts restoring; each later join rebalances the group, and the
newcomers restore their share as warm-up replicas before they take it: KIP-441).
Every worker reaches running, the table read through them is exactly what the input says, and the time
to ready is printed. The suite runs it with KEYS keys; `benchmarks/cold_start.py` runs it with 1M."""

from __future__ import annotations

import pytest

from tests.integration.cold_start_run import WORKERS, cold_start

pytestmark = pytest.mark.kafka

KEYS = 150_000


@pytest.mark.parametrize("group_protocol", ["classic"])  # (see below)
async def test_three_workers_cold_started_at_once_restore_while_rebalancing_and_all_reach_running(
        kafka, tmp_path, group_protocol):
    """Under the classic protocol, where each worker joining is a rebalance of everyone (the storm users of
    other libraries met): the streams protocol's joins stop only the tasks that move, which the suite's
    other tests cover."""
    result = await cold_start(kafka.bootstrap, kafka.url, tmp_path, KEYS)
    print(f"\ncold start, {result.keys} keys: first run {result.first_run:.1f}s; three fresh workers ready "
          f"in {result.ready:.1f}s; assignments heard {result.assignments}; replayed by active restores "
          f"{result.replayed}; warmed up first: {result.warmed_up}; restore interrupted by a rebalance: "
          f"{result.rebalanced_while_restoring}")
    assert max(result.assignments.values()) >= WORKERS, "the group rebalanced as each worker joined"
