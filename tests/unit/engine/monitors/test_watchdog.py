"""The stuck-event watchdog, with a fake clock and fake busy agents: no loop, no sleeping (but for how it
sleeps while idle)."""

import asyncio

from engine.activity import Activity
from engine.events import TP, Event
from engine.fetch.stalls import PartitionState, TaskState
from engine.monitors.watchdog import Watchdog
from engine.transport.memory_broker import MemoryRecord


def event(offset: int) -> Event:
    return Event(TP("words", 2), MemoryRecord("words", 2, offset, 0, b"k", b"1", ()), "k", 1, None)


def test_names_an_event_held_past_the_threshold_then_again_each_threshold():
    now = [0.0]
    held: list[tuple[str, Event]] = [("count", event(7))]
    dog = Watchdog(lambda: held, threshold=10, clock=lambda: now[0])
    assert dog.sample() == []
    now[0] = 9
    assert dog.sample() == []
    now[0] = 10
    assert dog.sample() == ["agent count has been processing words[2]@7 for 10s; the partitions it serves "
                            "wait behind it (the others keep flowing)"]
    now[0] = 15
    assert dog.sample() == []
    now[0] = 20
    assert len(dog.sample()) == 1


def test_a_new_event_starts_its_own_clock():
    now = [0.0]
    held: list[tuple[str, Event]] = [("count", event(1))]
    dog = Watchdog(lambda: held, threshold=10, clock=lambda: now[0])
    dog.sample()
    now[0] = 8
    held[:] = [("count", event(2))]  # the agent moved on
    dog.sample()
    now[0] = 12
    assert dog.sample() == []  # event 2 is 4 s old
    now[0] = 18
    assert dog.sample() == ["agent count has been processing words[2]@2 for 10s; the partitions it serves "
                            "wait behind it (the others keep flowing)"]


def state(position: int, waiting: bool) -> TaskState:
    """A task whose one partition is at `position`, with records buffered and on the broker if `waiting`."""
    buffered, lag = (12, 300) if waiting else (0, 0)
    partition = PartitionState(TP("orders", 1), position, None, 0, buffered, lag, ("ordering",), None,
                               in_assignment=True)
    return TaskState((position,), (partition,), None, quiesced=False)


def test_names_a_task_with_records_waiting_that_does_not_move_and_why():
    now = [0.0]
    dog = Watchdog(lambda: [], threshold=10, clock=lambda: now[0])  # a task stalls after 30 s
    where = "orders[1] at 40, 0 in flight, 12 buffered, lag 300, paused (ordering)"
    assert dog.stalls({1: state(40, True), 2: state(7, True)}) == []
    now[0] = 20
    assert dog.stalls({1: state(40, True), 2: state(8, True)}) == []  # task 2 moves
    now[0] = 30
    assert dog.stalls({1: state(40, True), 2: state(9, True)}) == [
        f"task 1 has not moved for 30s with records waiting: {where}"]
    now[0] = 45
    assert dog.stalls({1: state(40, True), 2: state(10, True)}) == []  # said again only 30 s later
    now[0] = 60
    assert len(dog.stalls({1: state(40, True), 2: state(11, True)})) == 1
    now[0] = 100  # nothing waits for task 2: still is not stalled
    assert dog.stalls({1: state(41, True), 2: state(11, False)}) == []


def test_the_first_warning_about_an_event_says_where_its_agent_waits_and_the_repeats_do_not():
    now = [0.0]
    held = [("count", event(7))]
    asked: list[Event] = []

    def waiting_at(found: Event) -> list[str]:
        asked.append(found)
        return ['  File "app.py", line 12, in count\n    await slow_call(value)\n']

    dog = Watchdog(lambda: held, threshold=10, clock=lambda: now[0], waiting_at=waiting_at)
    assert dog.sample() == []
    now[0] = 10
    assert dog.sample() == ["agent count has been processing words[2]@7 for 10s; the partitions it serves "
                            "wait behind it (the others keep flowing); it waits at (innermost last):\n"
                            '  File "app.py", line 12, in count\n    await slow_call(value)']
    now[0] = 20
    assert dog.sample() == ["agent count has been processing words[2]@7 for 20s; the partitions it serves "
                            "wait behind it (the others keep flowing)"]
    assert asked == [held[0][1]]


async def test_with_nothing_to_watch_it_sleeps_until_activity_unless_a_fetcher_could_stop_unseen():
    """Idle (no event held, no task waiting) the watchdog looks again only after some activity; but while a
    fetcher that can stop being answered runs, a stop brings no activity, so it keeps looking."""
    for fetching in (False, True):
        looks = 0

        async def states() -> dict[int, tuple[object, bool, str]]:
            nonlocal looks
            looks += 1
            return {}

        dog = Watchdog(list, 0.02, tasks=states, activity=Activity(), fetching=lambda f=fetching: f)
        await dog.start()
        try:
            async with asyncio.timeout(10):
                while looks < (3 if fetching else 1):  # rounds every 0.01 s
                    await asyncio.sleep(0.005)
            if not fetching:
                await asyncio.sleep(0.2)  # twenty rounds' time: it slept through them
                assert looks == 1
        finally:
            await dog.stop()


def test_the_page_is_told_how_long_a_waiting_task_has_not_moved_and_not_about_one_that_moves():
    now = [0.0]
    dog = Watchdog(lambda: [], threshold=10, clock=lambda: now[0])
    dog.stalls({1: state(40, True), 2: state(7, True)})  # the watchdog's look
    now[0] = 4
    assert dog.unmoved({1: state(40, True), 2: state(8, True)}) == {1: 4.0}  # task 2 moved since
    assert dog.unmoved({1: state(40, False)}) == {}  # nothing waits for it
    assert dog.unmoved({3: state(1, True)}) == {}  # not looked at yet
