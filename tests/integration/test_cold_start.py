"""A cold start of a group with big state: three workers started at once on machines without a data dir,
each restoring its partitions of a table built by a first run, while the group rebalances around them (the
first to join takes every partition and starts restoring; the later joins take some away mid-restore).
Every worker reaches running, the table read through them is exactly what the input says, and the time
to ready is printed. The suite runs it with KEYS keys; `benchmarks/cold_start.py` runs it with 1M."""

from __future__ import annotations

import pytest

from tests.integration.cold_start_run import cold_start

pytestmark = pytest.mark.kafka

KEYS = 150_000


async def test_three_workers_cold_started_at_once_restore_while_rebalancing_and_all_reach_running(
        kafka, tmp_path):
    result = await cold_start(kafka.bootstrap, kafka.url, tmp_path, KEYS)
    print(f"\ncold start, {result.keys} keys: first run {result.first_run:.1f}s; three fresh workers ready "
          f"in {result.ready:.1f}s; replayed {result.replayed}; rebalanced while restoring: "
          f"{result.rebalanced_while_restoring}")
    assert result.rebalanced_while_restoring, "the group rebalanced while they restored"
