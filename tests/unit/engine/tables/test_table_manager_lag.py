"""The table manager's measure of its warm-up replicas' lag while the broker restarts: skipped and taken
again later, never ending the follower (which would stop the worker)."""

from __future__ import annotations

from typing import Any

import engine
from engine.errors import BrokerUnavailable
from engine.events import TP
from engine.tables.manager import LAG_EVERY, TableManager


class RestartingReader:
    """The follower's consumer while its broker restarts."""

    def __init__(self) -> None:
        self.asked = 0

    async def offsets(self, tps: Any) -> Any:
        self.asked += 1
        raise BrokerUnavailable("cannot read offsets of [c[0]]: NodeNotReadyError (retriable)")


async def test_the_warm_up_lag_is_not_measured_while_no_broker_answers_and_the_follower_goes_on() -> None:
    app = engine.App("lag", broker="memory://unused")
    rebalances: list[bool] = []
    manager = TableManager([], transport=None, settings=app.settings(),  # type: ignore[arg-type]
                           admin_factory=lambda: None,  # type: ignore[arg-type, return-value]
                           request_rebalance=lambda: rebalances.append(True))
    manager.warming = frozenset({0})
    reader = RestartingReader()
    await manager._measure_lag(reader, {TP("lag-counts-changelog", 0)})  # (raised before: the follower died)
    assert reader.asked == 1
    assert manager.warming == frozenset({0}), "still warming: measured again later"
    assert rebalances == []
    await manager._measure_lag(reader, {TP("lag-counts-changelog", 0)})
    assert reader.asked == 1, f"not asked again before {LAG_EVERY} s"
