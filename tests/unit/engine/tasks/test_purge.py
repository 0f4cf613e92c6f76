"""Which repartition records a worker deletes: those its ready tasks committed, past what it deleted."""

from engine.events import TP
from engine.tasks.active import ActiveTask
from engine.tasks.leases import Lease
from engine.tasks.purge import purgeable


def task(number: int, committed: dict[str, int | None], ready: bool = True) -> ActiveTask:
    made = ActiveTask(number)
    for topic, offset in committed.items():
        lease = Lease(TP(topic, number), 1)
        lease.committed = offset
        made.leases[lease.tp] = lease
    if ready:
        made.restoring()
        made.open()
    return made


def test_only_committed_repartition_partitions_of_ready_tasks_past_what_was_purged():
    tasks = {
        0: task(0, {"app-by-customer-repartition": 40, "orders": 90}),
        1: task(1, {"app-by-customer-repartition": 12}),
        2: task(2, {"app-by-customer-repartition": None}),  # nothing committed yet
        3: task(3, {"app-by-customer-repartition": 70}, ready=False),  # being set up
    }
    topics = {"app-by-customer-repartition"}
    assert purgeable(tasks, topics, {}) == {TP("app-by-customer-repartition", 0): 40,
                                            TP("app-by-customer-repartition", 1): 12}
    done = {TP("app-by-customer-repartition", 0): 40}
    assert purgeable(tasks, topics, done) == {TP("app-by-customer-repartition", 1): 12}
