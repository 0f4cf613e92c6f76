import asyncio
from datetime import timedelta

import pytest

from agents import (
    ActorGroup,
    Fatal,
    Mailbox,
    MaxRestartsExceeded,
    RestartPolicy,
    Service,
    ServiceState,
)

FAST = timedelta(0)


async def test_crashed_instance_is_restarted_and_keeps_its_queued_messages():
    seen: list[int] = []

    async def behaviour(mailbox: Mailbox[int]) -> None:
        async for message in mailbox:
            if message == 2 and 2 not in seen:
                seen.append(2)
                raise RuntimeError("boom")
            seen.append(message)

    group = ActorGroup("counter", behaviour, policy=RestartPolicy(backoff=FAST))
    async with group:
        for n in range(5):
            await group.tell(n)
        for _ in range(100):
            if len(seen) == 5:
                break
            await asyncio.sleep(0.01)
    assert seen == [0, 1, 2, 3, 4]
    assert group.supervisor.restarts == 1
    assert not group.failed.is_set()


async def test_past_max_restarts_the_group_fails_with_a_clear_error():
    async def always_crashes(mailbox: Mailbox[int]) -> None:
        await mailbox.get()
        raise ValueError("bad state")

    policy = RestartPolicy(max_restarts=2, within=timedelta(minutes=1), backoff=FAST)
    group = ActorGroup("fragile", always_crashes, policy=policy)
    async with group:
        for n in range(5):
            await group.tell(n)
        await asyncio.wait_for(group.failed.wait(), 2)
    assert isinstance(group.failure, MaxRestartsExceeded)
    assert "fragile[0]" in str(group.failure)
    assert "more than 2 times" in str(group.failure)
    assert "ValueError: bad state" in str(group.failure)


async def test_crashes_outside_the_window_are_forgiven():
    now = [0.0]
    from agents import Supervisor

    attempts = 0

    async def child() -> None:
        nonlocal attempts
        attempts += 1
        now[0] += 120.0  # each crash happens two minutes after the last
        if attempts < 5:
            raise RuntimeError("transient")

    supervisor = Supervisor(
        "s", RestartPolicy(max_restarts=1, within=timedelta(minutes=1), backoff=FAST),
        clock=lambda: now[0],
    )
    supervisor.supervise("child", child)
    async with supervisor:
        assert await supervisor.wait_children(2)
    assert attempts == 5
    assert not supervisor.failed.is_set()


async def test_fatal_escalates_without_restart():
    async def gives_up(mailbox: Mailbox[int]) -> None:
        raise Fatal("cannot continue")

    group = ActorGroup("quitter", gives_up, policy=RestartPolicy(backoff=FAST))
    async with group:
        await asyncio.wait_for(group.failed.wait(), 1)
    assert group.supervisor.restarts == 0
    assert str(group.failure) == "cannot continue"


async def test_instances_run_concurrently():
    started = asyncio.Event()
    running = 0
    peak = 0

    async def slow(mailbox: Mailbox[int]) -> None:
        nonlocal running, peak
        async for _ in mailbox:
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.05)
            running -= 1
            started.set()

    group = ActorGroup("slow", slow, concurrency=4)
    async with group:
        for n in range(4):
            await group.tell(n, instance=n)
        await asyncio.sleep(0.03)
    assert peak == 4


async def test_stop_waits_for_in_flight_work_then_stops_children_in_reverse():
    order: list[str] = []

    class Named(Service):
        async def on_stop(self) -> None:
            order.append(self.name)

    finished = asyncio.Event()

    async def worker(mailbox: Mailbox[int]) -> None:
        async for _ in mailbox:
            await asyncio.sleep(0.05)
            finished.set()

    root = Named("root")
    root.add_child(Named("first"))
    group = root.add_child(ActorGroup("work", worker))
    root.add_child(Named("last"))
    await root.start()
    await group.tell(1)
    await asyncio.sleep(0.01)
    await root.stop()
    assert finished.is_set(), "stop must let the in-flight message finish"
    assert order == ["root", "last", "first"]
    assert root.state is group.state is ServiceState.STOPPED
    await root.stop()  # safe twice


def test_the_backoff_is_fixed_or_doubles_with_each_crash_up_to_its_cap():
    assert [RestartPolicy(backoff=timedelta(seconds=1)).delay(n) for n in (1, 2, 5)] == [1, 1, 1]
    doubling = RestartPolicy(backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=30))
    assert [doubling.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_invalid_policy_and_concurrency_are_refused():
    with pytest.raises(ValueError, match="max_restarts"):
        RestartPolicy(max_restarts=-1)
    with pytest.raises(ValueError, match="max_backoff"):
        RestartPolicy(backoff=timedelta(seconds=2), max_backoff=timedelta(seconds=1))

    async def noop(mailbox: Mailbox[int]) -> None:
        return None

    with pytest.raises(ValueError, match="concurrency"):
        ActorGroup("x", noop, concurrency=0)


async def test_a_crashed_background_task_fails_its_service_and_the_root():
    class Child(Service):
        async def on_start(self) -> None:
            self.spawn(self._work(), "work")

        async def _work(self) -> None:
            await asyncio.sleep(0)
            raise RuntimeError("follower died")

    root = Service("root")
    child = root.add_child(Child("child"))
    async with root:
        await asyncio.wait_for(root.failed.wait(), 1)
    assert str(child.failure) == "follower died"
    assert root.failure is child.failure
