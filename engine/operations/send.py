"""Sending records to a topic from outside a worker (`engine send`, a script): a producer of its own on the
broker the app's settings name, attached to the topic for as long as the sending lasts.

Which topic may be created first: one the app's topology declares is created as a worker would create it
(its planned partitions and config), since the worker would make it anyway; any other missing name is
refused (most likely misspelled) unless `create` says to make it, with the settings' topic_partitions and
topic_replication. An in-memory broker is refused: it lives inside one process, so the records would be
gone when the tool exits.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from engine.errors import ConfigError
from engine.operations.schemas import connect_schemas
from engine.topology.plan import build_topology
from engine.transport import shared_transport_for
from engine.transport.base import TopicSpec

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from engine.app import App
    from engine.settings import Settings
    from engine.topics import Topic
    from engine.topology.plan import Topology
    from engine.transport.base import Admin


@contextlib.asynccontextmanager
async def sending(app: App, settings: Settings, topic: Topic, *, create: bool = False,
                  ) -> AsyncIterator[TopicSpec | None]:
    """`topic` attached to a producer of its own while inside (`await topic.send(...)`), the topic created
    first if the policy above allows it; gives the spec of the topic created, or None if it existed."""
    transport = shared_transport_for(settings, "send", otherwise=", or send from inside the app (a timer, "
                                     "or engine.testing in a test)")
    created = await ensure_topic(transport.admin(), build_topology(app, settings), topic, create)
    registry = await connect_schemas([topic], settings)  # a registry format's schema registered first
    producer = transport.producer()
    await producer.start()
    try:
        topic.attach(producer)
        yield created
    finally:
        topic.attach(None)
        await producer.stop()
        if registry is not None:
            await registry.close()


async def ensure_topic(admin: Admin, topology: Topology, topic: Topic, create: bool) -> TopicSpec | None:
    """Create `topic` if it is missing and the policy above allows it (ConfigError if not): the spec it was
    created with, or None if it existed. Closes `admin`."""
    try:
        if topic.name in await admin.describe_topics():
            return None
        plan = topology.topics.get(topic.name)
        if plan is None and not create:
            declared = ", ".join(sorted(p.name for p in topology.topics.values() if not p.internal))
            raise ConfigError(
                f"topic {topic.name!r} does not exist on {topology.settings.broker} and app "
                f"{topology.app_id!r} does not declare it (it declares {declared or 'no topics'}); check the "
                "name, or pass --create to create it")
        spec = plan.spec if plan is not None else TopicSpec(
            topic.name, topology.settings.topic_partitions, topology.settings.topic_replication)
        await admin.create_topics([spec])
        return spec
    finally:
        await admin.close()
