"""The exactly-once checkpoint's gate between events, on its own."""

from __future__ import annotations

import asyncio

from engine.quiesce import Quiesce


async def test_pause_waits_for_the_event_in_progress_then_holds_the_next():
    gate = Quiesce()
    gate.started()  # an agent is inside an event
    pausing = asyncio.create_task(gate.pause(5))
    await asyncio.sleep(0.01)
    assert not pausing.done()
    gate.finished()
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
    gate.started()
    assert await gate.pause(0.05) is False  # never finishes: the checkpoint goes on without it
