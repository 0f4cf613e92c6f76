"""Internal topics take the partition count of the topics whose events write them, on the real broker: over
an input topic of 12 partitions made beforehand (as a team makes its input topics) and the default
`topic_partitions` (4), the table's changelog, the group_by's repartition topic and the table it counts
into get 12; topics with nothing to follow keep 4. Two workers share the partitions, and both tables equal
ground truth computed from the input."""

from __future__ import annotations

from collections import Counter

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.helpers import (
    WorkerProcess,
    committed_to_end,
    create_topics,
    latest,
    placed_over,
    produce,
    read_all,
    unique,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 12


async def partition_counts(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(names)}
    finally:
        await admin.close()


async def test_internal_topics_follow_a_twelve_partition_input_with_two_workers(kafka, tmp_path):
    app_id, prefix = unique("parts"), unique("pc") + "-"
    events = f"{prefix}events"
    await create_topics(kafka.bootstrap, [events], partitions=PARTITIONS)
    env = {"ITEST_APP": app_id, "ITEST_PREFIX": prefix}
    workers = [WorkerProcess("tests.integration.partition_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / f"data-{n}")}, tmp_path / f"w{n}.log")
               for n in range(2)]
    try:
        for worker in workers:
            await worker.wait_for_output(f"worker {app_id} running", 120)
        await placed_over(workers, PARTITIONS)
        records = [(f"k{n % 50}", n) for n in range(1200)]
        await produce(kafka.bootstrap, events, records)
        repartition = f"{app_id}-per-parity-0-repartition"
        await committed_to_end(kafka.bootstrap, app_id, events, PARTITIONS, workers=workers)
        await committed_to_end(kafka.bootstrap, app_id, repartition, PARTITIONS, workers=workers)
    finally:
        codes = [worker.terminate(timeout=60) for worker in workers]
    assert codes == [0, 0], "".join(w.output()[-3000:] for w in workers)

    counts = f"{app_id}-counts-changelog"
    parity = f"{app_id}-per-parity-changelog"
    assert await partition_counts(kafka.bootstrap, [counts, repartition, parity, f"{app_id}-replies",
                                                    f"{app_id}-count-dlq"]) == {
        counts: PARTITIONS, repartition: PARTITIONS, parity: PARTITIONS,
        f"{app_id}-replies": 4, f"{app_id}-count-dlq": 4}  # nothing to follow: topic_partitions
    truth: Counter[str] = Counter()
    for key, n in records:
        truth[key] += n
    assert latest(await read_all(kafka.bootstrap, counts)) == truth
    assert latest(await read_all(kafka.bootstrap, parity)) == Counter(
        "even" if n % 2 == 0 else "odd" for _, n in records)
