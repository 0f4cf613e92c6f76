"""A task's inputs released in timestamp order (engine.fetch.ordering), without Kafka: the oldest head first,
runs up to the next head of another input, table records first on equal timestamps, an empty input that is
behind holds the others for at most `idle`, one that is caught up never does."""

from __future__ import annotations

from dataclasses import dataclass

from engine.events import TP
from engine.fetch.ordering import TaskInputs

STREAM, TABLE = TP("payments", 0), TP("profiles", 0)


@dataclass
class Record:
    offset: int
    timestamp: int


def records(*timestamps: int, start: int = 0) -> list[Record]:
    return [Record(start + i, ts) for i, ts in enumerate(timestamps)]


def drain(inputs: TaskInputs, lags: dict[TP, int | None] | None = None) -> list[tuple[str, list[int]]]:
    out = []
    while (run := inputs.next_run(lags or {STREAM: 0, TABLE: 0}, now=0.0)) is not None:
        tp, got = run
        out.append((tp.topic, [r.timestamp for r in got]))
    return out


def test_records_come_out_by_timestamp_in_runs_up_to_the_other_inputs_head():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=1.0)
    inputs.add(STREAM, records(1, 2, 5, 6, 9))  # type: ignore[arg-type]
    inputs.add(TABLE, records(3, 7, 8))  # type: ignore[arg-type]
    assert drain(inputs) == [("payments", [1, 2]), ("profiles", [3]), ("payments", [5, 6]),
                             ("profiles", [7, 8]), ("payments", [9])]


def test_on_equal_timestamps_the_table_goes_first():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=1.0)
    inputs.add(STREAM, records(4, 4, 5))  # type: ignore[arg-type]
    inputs.add(TABLE, records(4, 5))  # type: ignore[arg-type]
    assert drain(inputs) == [("profiles", [4]), ("payments", [4, 4]), ("profiles", [5]), ("payments", [5])]


def test_an_empty_input_behind_on_the_broker_holds_the_others_for_at_most_idle():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=1.0)
    inputs.add(STREAM, records(1, 2))  # type: ignore[arg-type]
    assert inputs.next_run({TABLE: 3}, now=10.0) is None, "the table has 3 records not fetched yet"
    assert inputs.next_run({TABLE: None}, now=10.5) is None, "lag not known yet: wait too"
    run = inputs.next_run({TABLE: 3}, now=11.0)
    assert run is not None, "idle passed: go on without it"
    assert [r.timestamp for r in run[1]] == [1, 2]


def test_an_empty_input_that_is_caught_up_never_holds_the_others():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=60.0)
    inputs.add(STREAM, records(1))  # type: ignore[arg-type]
    run = inputs.next_run({TABLE: 0}, now=0.0)
    assert run is not None
    assert run[0] == STREAM


def test_a_run_put_back_comes_out_first_again_and_clear_drops_everything():
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=1.0)
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
    inputs = TaskInputs([STREAM, TABLE], first=[TABLE], idle=1.0)
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
