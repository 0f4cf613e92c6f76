"""A KafkaConsumer over a stand-in for aiokafka's, for the consumer's unit tests."""

from __future__ import annotations

from engine.transport.kafka_consumer import KafkaConsumer


def consumer_over(client: object) -> KafkaConsumer:
    """engine's consumer over a fake aiokafka client (the real one is never built), of a classic group."""
    consumer = KafkaConsumer.__new__(KafkaConsumer)
    consumer._client = client
    consumer._member = None
    return consumer
