import asyncio

import pytest

from agents import Mailbox, MailboxClosed


async def test_put_waits_while_full_and_resumes_when_drained():
    mailbox: Mailbox[int] = Mailbox(maxsize=2)
    await mailbox.put(1)
    await mailbox.put(2)
    blocked = asyncio.ensure_future(mailbox.put(3))
    await asyncio.sleep(0.01)
    assert not blocked.done(), "a full mailbox must make its producer wait"
    assert await mailbox.get() == 1
    await asyncio.wait_for(blocked, 1)
    assert [await mailbox.get(), await mailbox.get()] == [2, 3]


async def test_put_many_is_bounded_by_one_batch():
    mailbox: Mailbox[int] = Mailbox(maxsize=3)
    await mailbox.put_many(range(5))
    assert len(mailbox) == 5
    blocked = asyncio.ensure_future(mailbox.put_many([9]))
    await asyncio.sleep(0.01)
    assert not blocked.done()
    for expected in range(3):
        assert mailbox.get_nowait() == expected
    await asyncio.wait_for(blocked, 1)
    assert [mailbox.get_nowait() for _ in range(3)] == [3, 4, 9]
    assert mailbox.get_nowait() is None


async def test_close_lets_getters_drain_then_raises():
    mailbox: Mailbox[str] = Mailbox()
    await mailbox.put("a")
    mailbox.close()
    assert await mailbox.get() == "a"
    with pytest.raises(MailboxClosed):
        await mailbox.get()
    with pytest.raises(MailboxClosed):
        await mailbox.put("b")


async def test_close_wakes_a_waiting_getter_and_drop_pending_discards():
    mailbox: Mailbox[str] = Mailbox()
    getter = asyncio.ensure_future(mailbox.get())
    await asyncio.sleep(0)
    mailbox.close()
    with pytest.raises(MailboxClosed):
        await asyncio.wait_for(getter, 1)
    other: Mailbox[str] = Mailbox()
    await other.put_many(["x", "y"])
    assert other.close(drop_pending=True) == 2
    assert [m async for m in other] == []


async def test_purge_drops_matching_messages_only():
    mailbox: Mailbox[int] = Mailbox()
    await mailbox.put_many(range(6))
    assert mailbox.purge(lambda n: n % 2 == 0) == 3
    mailbox.close()
    assert [m async for m in mailbox] == [1, 3, 5]


async def test_cancelled_getter_does_not_swallow_a_wake_up():
    mailbox: Mailbox[int] = Mailbox()
    first = asyncio.ensure_future(mailbox.get())
    second = asyncio.ensure_future(mailbox.get())
    await asyncio.sleep(0)
    await mailbox.put(1)
    first.cancel()
    assert await asyncio.wait_for(second, 1) == 1


def test_maxsize_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        Mailbox(0)


async def test_take_all_hands_over_everything_in_order_and_frees_every_waiting_putter():
    box: Mailbox[int] = Mailbox(2)
    await box.put_many([1, 2])
    putters = [asyncio.ensure_future(box.put(n)) for n in (3, 4)]
    await asyncio.sleep(0)
    assert not any(p.done() for p in putters)
    assert box.take_all_nowait() == [1, 2]
    await asyncio.wait_for(asyncio.gather(*putters), 1)
    assert box.take_all_nowait() == [3, 4]
    assert box.take_all_nowait() == []
