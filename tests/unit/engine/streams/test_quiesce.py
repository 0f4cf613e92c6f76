"""The exactly-once checkpoint's gate between events, on its own."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.streams.quiesce import Quiesce


class Inside:
    """An agent instance's stream, as the gate sees it."""

    def __init__(self, agent_name: str = "count", event: Any = "an event") -> None:
        self.agent_name, self.current_event = agent_name, event


AGENT = Inside()


async def test_pause_waits_for_the_event_in_progress_then_holds_the_next():
    gate = Quiesce()
    gate.started(AGENT)  # an agent is inside an event
    pausing = asyncio.create_task(gate.pause(5))
    await asyncio.sleep(0.01)
    assert not pausing.done()
    gate.finished(AGENT)
    assert await pausing is True
    waiting = asyncio.create_task(gate.wait_open())  # the agent asks for its next event
    await asyncio.sleep(0.01)
    assert not waiting.done()
    gate.resume()
    await asyncio.wait_for(waiting, 1)


async def test_pause_of_idle_agents_is_immediate_and_a_stuck_one_times_out():
    gate = Quiesce()
    assert await gate.pause(0) is True
    gate.resume()
    gate.started(AGENT)
    assert await gate.pause(0.05) is False  # never finishes: the checkpoint goes on without it


async def test_an_ask_from_inside_an_event_holds_the_gate_open_until_it_is_answered():
    gate = Quiesce()
    gate.started(AGENT)  # the asker is inside an event
    gate.ask_started()  # ... and waits for another agent's answer
    pausing = asyncio.create_task(gate.pause(5))
    await asyncio.sleep(0.01)
    assert not gate.closed  # the replier can still take the request
    await asyncio.wait_for(gate.wait_open(), 1)
    gate.ask_finished()  # answered
    await asyncio.sleep(0.01)
    assert gate.closed
    assert not pausing.done()  # the asker is still inside its event
    gate.finished(AGENT)
    assert await pausing is True


async def test_an_ask_starting_while_the_gate_is_closed_reopens_it():
    gate = Quiesce()
    gate.started(AGENT)
    pausing = asyncio.create_task(gate.pause(5))
    await asyncio.sleep(0.01)
    assert gate.closed
    gate.ask_started()  # the agent inside its event asks another, which is held at the gate
    await asyncio.sleep(0.01)
    assert not gate.closed
    await asyncio.wait_for(gate.wait_open(), 1)
    gate.ask_finished()
    gate.finished(AGENT)
    assert await pausing is True
    assert gate.closed  # the cut is taken with the gate closed and nobody inside an event
    gate.resume()


async def test_an_unanswered_ask_times_out_the_pause_with_the_gate_closed():
    gate = Quiesce()
    gate.started(AGENT)
    gate.ask_started()
    assert await gate.pause(0.05) is False
    assert gate.closed


async def test_an_agent_asking_event_after_event_does_not_starve_the_checkpoint():
    """The answer closes the gate at once: the asker's next event waits for the cut instead of asking
    again before the pause even woke up."""
    gate = Quiesce()

    async def asker() -> None:
        for _ in range(100):
            await gate.wait_open()
            gate.started(AGENT)
            gate.ask_started()
            await asyncio.sleep(0.001)  # the answer comes
            gate.ask_finished()
            gate.finished(AGENT)  # on to the next event, right away

    asking = asyncio.create_task(asker())
    await asyncio.sleep(0.005)
    assert await gate.pause(1) is True
    assert gate.busy == 0
    assert not asking.done()  # held at the gate, between two events
    gate.resume()
    await asyncio.wait_for(asking, 5)


def test_the_gate_names_the_events_agents_are_inside():
    """What a checkpoint that goes on without them leaves out: each stream between its event's start and
    end, with its agent; once finished (or between events), none."""
    gate = Quiesce()
    first, second, idle = Inside("count", "e1"), Inside("echo", "e2"), Inside("count", None)
    for stream in (first, second, idle):
        gate.started(stream)
    assert sorted(gate.events_inside()) == [("count", "e1"), ("echo", "e2")]
    assert gate.busy == 3
    gate.finished(first)
    gate.finished(first)  # (said twice: still one event fewer)
    assert gate.events_inside() == [("echo", "e2")]
    assert gate.busy == 2
