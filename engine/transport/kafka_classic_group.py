"""A worker as a classic group's member (aiokafka's membership): the group's callbacks handed to the worker
(`GroupListener`, a lost partition told apart from a revoked one), and engine's assignor inside aiokafka's
(`EngineAssignor`: engine.assignor's placement, standbys and stickiness carried in the members' user data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiokafka import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from engine.assignor import (
    VERSION,
    decode_assignment,
    decode_member,
    encode_assignment,
    encode_member,
)
from engine.events import TP
from engine.transport import aiokafka_private as private

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from aiokafka import AIOKafkaConsumer, TopicPartition

    from engine.assignor import Placement
    from engine.transport.base import PartitionsCallback


class GroupListener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka's base is untyped
    """aiokafka has no on_partitions_lost: it calls on_partitions_revoked before every re-join, also when the
    coordinator no longer knew this member. In that case it has already reset the member's generation
    (reset_generation) when the callback runs: that is how lost is told apart from revoked."""

    def __init__(self, on_assigned: PartitionsCallback | None, on_revoked: PartitionsCallback | None,
                 on_lost: PartitionsCallback | None) -> None:
        self.assigned = on_assigned
        self.revoked = on_revoked
        self.lost = on_lost
        self.consumer: AIOKafkaConsumer | None = None

    async def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        if not revoked:
            return
        tps = {TP(tp.topic, tp.partition) for tp in revoked}
        if self.lost is not None and private.session_expired(private.group_coordinator(self.consumer)):
            await self.lost(tps)
        elif self.revoked is not None:
            await self.revoked(tps)

    async def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        if self.assigned is not None:
            await self.assigned({TP(tp.topic, tp.partition) for tp in assigned})


class EngineAssignor(AbstractPartitionAssignor):  # type: ignore[misc]  # aiokafka's base is untyped
    """engine.assignor through aiokafka's assignor interface. aiokafka declares the methods as class
    methods; an instance serves as well (it calls them on the objects it is given) and carries the worker's
    Placement. Tasks are partition numbers: the task count is the largest partition count subscribed."""

    name = "engine"

    def __init__(self, placement: Placement) -> None:
        self.placement = placement

    def metadata(self, topics: Collection[str]) -> ConsumerProtocolMemberMetadata:
        user_data = encode_member(self.placement.member(""))
        return ConsumerProtocolMemberMetadata(VERSION, sorted(topics), user_data)

    def assign(self, cluster: Any, members: Mapping[str, Any]) -> dict[str, ConsumerProtocolMemberAssignment]:
        counts: dict[str, int] = {}
        for metadata in members.values():
            for topic in metadata.subscription:
                partitions = cluster.partitions_for_topic(topic)
                if partitions:
                    counts[topic] = len(partitions)
        placed = self.placement.assign(
            [decode_member(member_id, metadata.user_data) for member_id, metadata in members.items()],
            max(counts.values(), default=0))
        out = {}
        for member_id, metadata in members.items():
            share = placed[member_id]
            topics = [(topic, sorted(p for p in share.active if p < counts[topic]))
                      for topic in sorted(metadata.subscription) if topic in counts]
            out[member_id] = ConsumerProtocolMemberAssignment(VERSION, topics, encode_assignment(share))
        return out

    def on_assignment(self, assignment: Any) -> None:
        active = frozenset(p for _, partitions in assignment.assignment for p in partitions)
        self.placement.assignment_received(decode_assignment(active, assignment.user_data))
