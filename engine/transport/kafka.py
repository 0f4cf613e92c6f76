"""kafka://host:port[,host:port]: the transport on Apache Kafka through aiokafka.

aiokafka lives here and only here; its errors are translated into engine's at this edge. Consumer records
and topic partitions pass through unconverted: the records of aiokafka's batch parser satisfy RawRecord
(`aiokafka_private_fetch.bare_records`: no ConsumerRecord made of each) and its TopicPartition is a (topic,
partition) tuple equal to our TP, so the hot path copies nothing.
The security settings (security_protocol, sasl_*, ssl_* files) become aiokafka's options (`client_options`),
and `broker_options` (any of aiokafka's client options) are passed to every aiokafka client as they are.

No client of engine's lets the broker auto-create a topic: aiokafka asks for it in every metadata request
(`allow_auto_topic_creation`, true unless told), and a topic the broker creates gets the broker's partition
count and no config (a repartition topic with 1 partition, a changelog that is not compacted). The worker
creates every topic of its topology itself; each engine client's metadata requests say no
(`aiokafka_private.refuse_auto_create`), while other aiokafka clients in the process keep aiokafka's ways.

Every use of aiokafka's private parts goes through engine.transport.aiokafka_private.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from engine.transport.kafka_admin import KafkaAdmin
from engine.transport.kafka_classic_group import GroupListener
from engine.transport.kafka_connect import client_options
from engine.transport.kafka_consumer import KafkaConsumer
from engine.transport.kafka_producer import KafkaProducer

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.assignor import (
        Placement,
    )
    from engine.transport.base import GroupTopology, PartitionsCallback
    from engine.transport.kafka_streams_member import (
        StreamsMember,
    )
from engine.transport.base import ClientTuning

log = logging.getLogger(__name__)


TRANSACTIONAL_LINGER = 0.005  # seconds; see KafkaTransport.producer


class KafkaTransport:
    def __init__(self, url: str, options: Mapping[str, Any], tuning: ClientTuning | None = None) -> None:
        self.url = url
        self.servers = url.split("://", 1)[1]
        self.options = client_options(options)
        self.tuning = tuning or ClientTuning()
        # The streams groups' members of this transport's consumers, by group id: what its producers'
        # transactions commit offsets as.
        self.members: dict[str, StreamsMember] = {}

    def consumer(
        self,
        *,
        group_id: str | None,
        on_assigned: PartitionsCallback | None = None,
        on_revoked: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
        max_poll_records: int = 1000,
        auto_offset_reset: str = "earliest",
        placement: Placement | None = None,
        instance_id: str | None = None,
        group_protocol: str = "classic",
        group_topology: Callable[[], GroupTopology] | None = None,
    ) -> KafkaConsumer:
        listener = GroupListener(on_assigned, on_revoked, on_lost)
        return KafkaConsumer(self.servers, self.options, group_id, listener, max_poll_records,
                             auto_offset_reset, placement, instance_id, self.tuning, group_protocol,
                             group_topology, self.members)

    def producer(self, transactional_id: str | None = None) -> KafkaProducer:
        # A transactional producer's records are visible only when its transaction commits: waiting to fill
        # its batches costs no latency, and its bursts (changelogs at checkpoints) take fewer requests.
        linger = self.tuning.linger if transactional_id is None else TRANSACTIONAL_LINGER
        return KafkaProducer(self.servers, self.options, transactional_id, linger,
                             self.tuning.transaction_timeout, self.members)

    def admin(self) -> KafkaAdmin:
        return KafkaAdmin(self.servers, self.options)
