"""An app's group as `engine status` reads it (engine.operations.status): the lag per partition number over
the topics the group reads, on the in-memory broker; memory:// itself refused by the command."""

from __future__ import annotations

import uuid

import pytest

import engine
from engine.events import TP
from engine.operations.status import read_status
from engine.tools import group_status
from engine.transport import open_transport


async def test_the_lag_is_the_records_past_the_committed_offsets_summed_per_partition_number() -> None:
    transport = open_transport(f"memory://status-{uuid.uuid4().hex[:6]}")
    broker = transport.broker  # type: ignore[attr-defined]
    for topic in ("clicks", "views", "elsewhere"):
        broker.create_topic(topic, 2)
        for partition, count in ((0, 5), (1, 3)):
            for _ in range(count):
                broker.append(topic, None, b"x", [], partition)
    admin = transport.admin()
    await admin.set_committed("app", {TP("clicks", 0): 4, TP("views", 0): 5, TP("views", 1): 1})

    status = await read_status(transport, "app", ["clicks", "views", "missing"])

    # clicks: 1 and 3 (nothing committed: from the first offset); views: 0 and 2; elsewhere is not read
    assert status.lag == {0: 1, 1: 5}
    assert status.group.members == []


async def test_engine_status_refuses_an_in_memory_broker() -> None:
    app = engine.App("status-app")
    with pytest.raises(engine.ConfigError, match="an in-memory broker lives inside one process"):
        await group_status(app, app.settings({"broker": "memory://status"}))
