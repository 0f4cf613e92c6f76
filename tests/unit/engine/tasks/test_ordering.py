"""A task's inputs released in timestamp order (engine.tasks.inputs), without Kafka: the oldest head first,
runs up to the next head of another input, table records first on equal timestamps; an empty input that is
behind holds the others until it is fetched, however long that takes (Kafka Streams' KIP-695), one that is
caught up for `idle` seconds, and none does with a negative `idle`."""

from __future__ import annotations

from dataclasses import dataclass

from engine.events import TP
from engine.tasks.inputs import TaskInputs

STREAM, TABLE = TP("payments", 0), TP("profiles", 0)


@dataclass
class Record:
    offset: int
    timestamp: int


def records(*timestamps: int, start: int = 0) -> list[Record]:
    return [Record(start + i, ts) for i, ts in enumerate(timestamps)]


def drain(inputs: TaskInputs, lags: dict[TP, int | None] | None = None, now: float = 0.0
          ) -> list[tuple[str, list[int]]]:
    out = []
    while (run := inputs.next_run(lags or {STREAM: 0, TABLE: 0}, now=now)) is not None:
        tp, got = run
        out.append((tp.topic, [r.timestamp for r in got]))
    return out


def test_records_come_out_by_timestamp_in_runs_up_to_the_other_inputs_head():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=0.0)
    inputs.add(STREAM, records(1, 2, 5, 6, 9))  # type: ignore[arg-type]
    inputs.add(TABLE, records(3, 7, 8))  # type: ignore[arg-type]
    assert drain(inputs) == [("payments", [1, 2]), ("profiles", [3]), ("payments", [5, 6]),
                             ("profiles", [7, 8]), ("payments", [9])]


def test_on_equal_timestamps_the_table_goes_first():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=0.0)
    inputs.add(STREAM, records(4, 4, 5))  # type: ignore[arg-type]
    inputs.add(TABLE, records(4, 5))  # type: ignore[arg-type]
    assert drain(inputs) == [("profiles", [4]), ("payments", [4, 4]), ("profiles", [5]), ("payments", [5])]


def test_an_empty_input_behind_on_the_broker_holds_the_others_until_it_is_fetched():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=1.0)
    inputs.add(STREAM, records(1, 2))  # type: ignore[arg-type]
    assert inputs.next_run({TABLE: 3}, now=10.0) is None, "the table has 3 records not fetched yet"
    assert inputs.next_run({TABLE: None}, now=10.5) is None, "lag not known yet: wait too"
    assert inputs.next_run({TABLE: 3}, now=1000.0) is None, "however long the fetch takes (a busy loop)"
    assert inputs.overdue(now=1000.0, after=30.0) == [TABLE], "a long wait is told"
    assert inputs.overdue(now=2000.0, after=30.0) == [], "once"
    inputs.add(TABLE, records(0))  # type: ignore[arg-type]
    assert drain(inputs, now=1000.0) == [("profiles", [0])], "fetched: the older record first..."
    assert drain(inputs, now=1001.0) == [("payments", [1, 2])], "...the others after idle"
    assert inputs.overdue(now=3000.0, after=30.0) == [], "no wait now"


def test_an_empty_input_that_is_caught_up_holds_the_others_for_idle_seconds_from_when_it_emptied():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=1.0)
    inputs.add(STREAM, records(1))  # type: ignore[arg-type]
    assert inputs.next_run({TABLE: 0}, now=10.0) is None, "caught up: its producers may still send older ones"
    assert inputs.next_run({TABLE: 0}, now=10.9) is None
    run = inputs.next_run({TABLE: 0}, now=11.0)
    assert run is not None, "idle passed: go on without it"
    assert run[0] == STREAM
    inputs.add(STREAM, records(2))  # type: ignore[arg-type]
    assert inputs.next_run({TABLE: 0}, now=11.1) is not None, "the same wait: over already"
    inputs.add(TABLE, records(3))  # type: ignore[arg-type]
    inputs.add(STREAM, records(4))  # type: ignore[arg-type]
    assert drain(inputs, now=19.0) == [("profiles", [3])], "the table has records again..."
    assert inputs.next_run({TABLE: 0}, now=19.5) is None, "...so its next wait starts anew"
    assert inputs.next_run({TABLE: 0}, now=20.0) is not None


def test_an_empty_input_that_is_caught_up_never_holds_the_others_with_idle_0():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=0.0)
    inputs.add(STREAM, records(1))  # type: ignore[arg-type]
    run = inputs.next_run({TABLE: 0}, now=0.0)
    assert run is not None
    assert run[0] == STREAM


def test_a_negative_idle_never_waits_even_for_records_on_the_broker():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=-1.0)
    inputs.add(STREAM, records(1))  # type: ignore[arg-type]
    run = inputs.next_run({TABLE: 5}, now=0.0)
    assert run is not None
    assert run[0] == STREAM


def test_a_run_put_back_comes_out_first_again_and_clear_drops_everything():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=0.0)
    inputs.add(TABLE, records(1, 2))  # type: ignore[arg-type]
    inputs.add(STREAM, records(3))  # type: ignore[arg-type]
    run = inputs.next_run({}, now=0.0)
    assert run is not None
    inputs.unread(*run)
    assert drain(inputs)[0] == ("profiles", [1, 2])
    inputs.add(STREAM, records(4))  # type: ignore[arg-type]
    assert inputs.clear() == 1
    assert inputs.next_run({}, now=0.0) is None


def test_next_runs_takes_runs_in_order_while_every_input_has_a_head_and_up_to_a_limit():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=0.0)
    inputs.add(STREAM, records(1, 2, 5, 6, 9))  # type: ignore[arg-type]
    inputs.add(TABLE, records(3, 7, 8))  # type: ignore[arg-type]
    runs = inputs.next_runs({}, now=0.0, limit=100)
    # the table's buffer empties with [7, 8]: what follows depends on its lag, so a call of its own
    assert [(tp.topic, [r.timestamp for r in got]) for tp, got in runs] == [
        ("payments", [1, 2]), ("profiles", [3]), ("payments", [5, 6]), ("profiles", [7, 8])]
    assert inputs.next_runs({TABLE: 2}, now=0.0, limit=100) == [], "the table is behind: wait"
    inputs.add(TABLE, records(10))  # type: ignore[arg-type]
    inputs.add(STREAM, records(11, 12))  # type: ignore[arg-type]
    assert [len(got) for _, got in inputs.next_runs({}, now=0.0, limit=2)] == [1, 1], "9, then 10: limit 2"


def test_next_runs_goes_on_past_an_input_that_was_quiet_at_the_call_but_stops_where_another_empties():
    quiet = TP("settings", 0)
    inputs = TaskInputs([STREAM, TABLE, quiet], first=[TABLE], idle=0.0)
    inputs.add(STREAM, records(1, 3, 5, 7))  # type: ignore[arg-type]
    inputs.add(TABLE, records(2, 4, 6))  # type: ignore[arg-type]
    runs = inputs.next_runs({quiet: 0}, now=0.0, limit=100)
    # the table's buffer empties with [6]: what follows depends on its lag, so a call of its own
    assert [(tp.topic, [r.timestamp for r in got]) for tp, got in runs] == [
        ("payments", [1]), ("profiles", [2]), ("payments", [3]), ("profiles", [4]), ("payments", [5]),
        ("profiles", [6])]
    assert inputs.next_runs({TABLE: 1, quiet: 0}, now=0.0, limit=100) == [], "the table is behind: wait"


def test_runs_of_two_topics_kept_apart_come_one_call_each():
    """Topics from which two agents use one table: a call ends before a run of the other one (what the
    caller could not hand over yet is not taken at all)."""
    shipments, sales = TP("shipments", 0), TP("sales", 0)
    inputs = TaskInputs([shipments, sales], first=[], idle=0.0)
    inputs.add(shipments, records(1, 4, 7))  # type: ignore[arg-type]
    inputs.add(sales, records(2, 3, 5, 8))  # type: ignore[arg-type]
    lags = {shipments: 0, sales: 0}
    calls = []
    while runs := inputs.next_runs(lags, 0.0, 100, apart={"shipments", "sales"}):
        calls.append([(tp.topic, [r.timestamp for r in got]) for tp, got in runs])
    assert calls == [[("shipments", [1])], [("sales", [2, 3])], [("shipments", [4])], [("sales", [5])],
                     [("shipments", [7])], [("sales", [8])]]
    inputs.add(shipments, records(1, 4))  # type: ignore[arg-type]
    inputs.add(sales, records(2, 5))  # type: ignore[arg-type]
    assert len(inputs.next_runs(lags, 0.0, 100)) == 3, "otherwise in one call (while both have records)"
