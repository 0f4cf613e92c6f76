"""The periodic services' rounds (engine.activity), on the test driver's virtual-time loop: a service with
nothing to do sleeps until the next activity, and its rounds keep the times they would have had, computed
here from the interval and the moments of the activity."""

from __future__ import annotations

import asyncio

from engine.activity import Activity
from engine.testing.virtual_time import VirtualTimeLoop


def run_rounds(signals: list[float], *, until: float, work: float = 0.0) -> tuple[list[float], int]:
    """A service with rounds every second, idle after each, that takes `work` seconds per round; the activity
    signalled at each time of `signals` (from the start). Returns the rounds' times and the loop's steps."""
    loop = VirtualTimeLoop(0.0)
    activity = Activity()
    times: list[float] = []

    async def service() -> None:
        rounds = activity.rounds(1.0)
        idle = False
        while True:
            await rounds.next(idle=idle)
            times.append(loop.time())
            await asyncio.sleep(work)
            idle = True

    async def signal() -> None:
        for at in signals:
            await asyncio.sleep(at - loop.time())
            activity.signal()

    tasks = [loop.create_task(service()), loop.create_task(signal())]
    loop.run_until_idle(until)
    for task in tasks:
        task.cancel()
    loop.run_until_idle()
    loop.close()
    return times, loop.steps


def test_an_idle_service_sleeps_until_the_next_activity_then_until_its_next_round_time() -> None:
    times, steps = run_rounds([10.5, 19.6, 19.8], until=100_000)
    # the first round a second after the start; then at the first whole second after each activity, two
    # activities before one round making one round
    assert times == [1.0, 11.0, 20.0]
    assert steps < 50, f"{steps} loop steps for three rounds"


def test_rounds_are_a_whole_number_of_intervals_after_the_end_of_the_last_and_none_is_missed() -> None:
    # rounds of half a second: from 1.0 to 1.5; idle until 3.1, so from 3.5 (1.5 + 2) to 4.0; an activity
    # at 3.7, during it, which that round may have missed: another round at 5.0
    assert run_rounds([3.1], until=60, work=0.5)[0] == [1.0, 3.5]
    assert run_rounds([3.1, 3.7], until=60, work=0.5)[0] == [1.0, 3.5, 5.0]


def test_ordered_inputs_are_due_again_only_at_a_time_still_to_come() -> None:
    """What the fetch loop waits for while a task's ordered inputs wait (engine.tasks.inputs): the end of a
    caught-up input's max_task_idle and the moment a wait for a fetch is told; a moment passed never makes
    the fetch return at once (it would spin while the release cannot run)."""
    from engine.events import TP
    from engine.tasks.inputs import TaskInputs

    table, stream = TP("table", 0), TP("stream", 0)
    inputs = TaskInputs([table, stream], [table], idle=2.0)
    assert inputs.due(0.0, 30.0) is None, "nothing buffered: only records change anything"
    inputs.add(stream, [object()])  # (a record: only counted here)
    assert inputs.next_run({table: 0}, 10.0) is None, "the caught-up table holds the stream back for 2 s"
    assert inputs.due(10.0, 30.0) == 12.0
    assert inputs.due(12.5, 30.0) is None
    assert inputs.next_run({table: 5}, 20.0) is None, "the table has records on the broker: wait for them"
    assert inputs.due(20.0, 30.0) == 50.0, "then tell the wait, 30 s on"
    assert inputs.due(50.0, 30.0) is None
