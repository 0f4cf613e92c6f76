"""A producer's delivery futures: settled ones are dropped as sends go on, their first failure kept."""

import asyncio

from engine.transport import deliveries
from engine.transport.deliveries import Deliveries, DeliveryFailure, first_failure


def test_settled_futures_are_dropped_and_the_first_failure_is_kept(monkeypatch):
    monkeypatch.setattr(deliveries, "PRUNE_AT_LEAST", 4)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        tracked = Deliveries()
        futures = [loop.create_future() for _ in range(12)]
        futures[1].set_exception(RuntimeError("first"))
        futures[2].set_exception(RuntimeError("second"))
        futures[0].set_result(None)
        for future in futures[:4]:
            tracked.add(future)
        # pruned at 4: three settled dropped, the first failure kept, the open one still tracked
        assert tracked.pending == [futures[3]]
        assert str(tracked.failure) == "first"
        for future in futures[4:]:
            future.set_result(None)
            tracked.add(future)
        assert len(tracked.pending) < 8  # pruned again on the way
        pending, failure = tracked.take()
        assert futures[3] in pending
        assert str(failure) == "first"
        futures[3].cancel()
        assert isinstance(first_failure(pending), DeliveryFailure)
        assert tracked.take() == ([], None)

    asyncio.run(scenario())


def test_pending_futures_grow_the_pruning_interval(monkeypatch):
    monkeypatch.setattr(deliveries, "PRUNE_AT_LEAST", 4)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        tracked = Deliveries()
        open_ = [loop.create_future() for _ in range(10)]
        for future in open_:
            tracked.add(future)
        assert tracked.pending == open_  # nothing settled: nothing dropped
        assert tracked._prune_at >= 2 * 8  # amortised: no pruning per send while they wait
        for future in open_:
            future.cancel()
        assert first_failure(tracked.take()[0]) is not None

    asyncio.run(scenario())
