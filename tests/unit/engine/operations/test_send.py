"""Sending from outside a worker (engine.operations.send, `engine send`): which missing topics are created and
how, on the in-memory broker's admin; the in-memory broker itself refused for sending."""

from __future__ import annotations

import re
import uuid

import pytest

import engine
from engine.operations.send import ensure_topic
from engine.tools import build_topology, sending
from engine.transport import transport_for
from engine.transport.base import TopicSpec


def orders_app() -> tuple[engine.App, engine.Topic]:
    app = engine.App(f"send-{uuid.uuid4().hex[:6]}")
    orders = app.topic("orders", key_type=str, partitions=3)

    @app.agent(orders)
    async def handle(stream):
        async for _ in stream:
            pass

    return app, orders


async def test_a_declared_topic_is_created_as_planned_and_another_name_only_when_asked() -> None:
    app, orders = orders_app()
    settings = app.settings({"broker": f"memory://send-{uuid.uuid4().hex[:6]}", "topic_partitions": 2})
    transport = transport_for(settings)
    topology = build_topology(app, settings)

    created = await ensure_topic(transport.admin(), topology, orders, create=False)
    assert created == topology.topics["orders"].spec
    assert (await transport.admin().describe_topics())["orders"] == 3
    assert await ensure_topic(transport.admin(), topology, orders, create=False) is None  # it exists now

    misspelled = engine.Topic("ordres")
    refusal = (f"topic 'ordres' does not exist on {settings.broker} and app '{app.id}' does not declare it "
               "(it declares orders); check the name, or pass --create to create it")
    with pytest.raises(engine.ConfigError, match=re.escape(refusal)):
        await ensure_topic(transport.admin(), topology, misspelled, create=False)
    assert "ordres" not in await transport.admin().describe_topics()

    created = await ensure_topic(transport.admin(), topology, misspelled, create=True)
    assert created == TopicSpec("ordres", 2, settings.topic_replication)
    assert (await transport.admin().describe_topics())["ordres"] == 2


async def test_sending_refuses_an_in_memory_broker_before_touching_it() -> None:
    app, orders = orders_app()
    settings = app.settings({"broker": f"memory://send-{uuid.uuid4().hex[:6]}"})
    with pytest.raises(engine.ConfigError, match="an in-memory broker lives inside one process"):
        async with sending(app, settings, orders):
            pytest.fail("sent on memory://")
    assert await transport_for(settings).admin().describe_topics() == {}
