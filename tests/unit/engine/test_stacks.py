"""Where a suspended coroutine waits (engine.stacks): the chain it awaits through, down to its own line."""

import asyncio

from engine.stacks import awaiting


async def innermost(gate: asyncio.Event) -> None:
    await gate.wait()  # the line the chain ends on


async def middle(gate: asyncio.Event) -> None:
    await innermost(gate)


async def generator(gate: asyncio.Event):  # type: ignore[no-untyped-def]
    await middle(gate)
    yield 1


async def outer(gate: asyncio.Event) -> None:
    async for _ in generator(gate):
        pass


async def test_a_suspended_task_is_followed_through_coroutines_and_async_generators_to_its_line():
    gate = asyncio.Event()
    task = asyncio.ensure_future(outer(gate))
    await asyncio.sleep(0)
    lines = awaiting(task.get_coro())
    functions = [line.split(", in ")[1].split("\n")[0] for line in lines]
    assert functions[:4] == ["outer", "generator", "middle", "innermost"]
    assert "await gate.wait()  # the line the chain ends on" in lines[3]
    gate.set()
    await task
    assert awaiting(task.get_coro()) == []  # done: nothing awaited
