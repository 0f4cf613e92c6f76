"""The stuck-event watchdog, with a fake clock and fake busy agents: no loop, no sleeping."""

from engine.events import Event
from engine.monitors.watchdog import Watchdog
from engine.transport.memory import MemoryRecord


def event(offset: int) -> Event:
    return Event(MemoryRecord("words", 2, offset, 0, b"k", b"1", ()), "k", 1, None)


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
