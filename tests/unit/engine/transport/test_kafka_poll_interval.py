"""aiokafka's consumer leaves its group once it has gone `max_poll_interval` without a fetch. engine's fetch
loop, with every partition held back for timestamp order, waits instead of fetching (asking aiokafka for no
partition would ask it for all): that wait is the worker at work, and counts as a fetch."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.unit.engine.consumer_helpers import consumer_over


async def test_a_fetch_with_every_partition_held_back_counts_as_fetching_while_it_waits() -> None:
    client = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")  # (never started: nothing is fetched)
    client.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
    consumer = consumer_over(client)
    consumer._held = set(client.assignment())
    subscription = client._subscription
    subscription._last_fetch_ended -= 60  # (a minute since the last fetch ended)
    waiting = asyncio.ensure_future(consumer.getmany(0.2, 100))
    await asyncio.sleep(0.05)
    assert subscription.fetcher_idle_time == 0, "waiting on the held-back partitions counts as fetching"
    assert await waiting == {}
    assert subscription.fetcher_idle_time < 1, "its idle time counts from the wait's end"
