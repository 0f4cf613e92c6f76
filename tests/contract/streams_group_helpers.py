"""A member of a streams group speaking the protocol by hand on the real broker, and the app topology it
declares (the streams group contract tests share them)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import GroupCoordinatorNotAvailableError

from engine.transport.kafka_protocol import (
    MemberOffsetCommitRequest,
    commit_errors,
)
from engine.transport.kafka_streams_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    CopartitionGroup,
    Endpoint,
    EndpointPartitions,
    Heartbeat,
    HeartbeatAnswer,
    StreamsGroupHeartbeatRequest,
    Subtopology,
    Tasks,
    TopicInfo,
    Topology,
    heartbeat_answer,
)

if TYPE_CHECKING:
    from collections.abc import Callable


PARTITIONS = 4


COMPACTED = {"cleanup.policy": "compact"}


IN_TRANSIT = {"retention.ms": "-1"}


TIMEOUT = 60.0


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: a new broker's coordinator is not
# ready yet (the test broker is a single node: the coordinator stays that node). Retriable.
# UNKNOWN_SERVER_ERROR (-1): a new broker's first streams heartbeats were seen answered so while its
# coordinator was still starting (engine's member tries its first heartbeat again on it too).
COORDINATOR_NOT_READY = (14, 15, 16, -1)


def app_topology(app: str, source: str) -> Topology:
    """An engine app's shape: a table over `source` (its changelog) that re-keys into a repartition topic
    read by a second subtopology with a table of its own. A changelog's 0 partitions: "as many as the
    subtopology has tasks". The second changelog declares no config: what the broker adds of its own shows."""
    repartition = f"{app}-by-user-repartition"
    return Topology(epoch=1, subtopologies=(
        Subtopology("0", source_topics=(source,),
                    state_changelog_topics=(TopicInfo(f"{app}-counts-changelog", configs=COMPACTED),),
                    repartition_sink_topics=(repartition,),
                    copartition_groups=(CopartitionGroup(source_topics=(0,)),)),
        Subtopology("1", repartition_source_topics=(TopicInfo(repartition, PARTITIONS, configs=IN_TRANSIT),),
                    state_changelog_topics=(TopicInfo(f"{app}-per-user-changelog"),)),
    ))


def every_task() -> set[tuple[str, int]]:
    return {(subtopology, p) for subtopology in ("0", "1") for p in range(PARTITIONS)}


def flat(tasks: Tasks | None) -> set[tuple[str, int]]:
    return {(subtopology, p) for subtopology, parts in (tasks or {}).items() for p in parts}


@dataclass
class Member:
    """One streams-group member as a client would run it: the epoch and tasks the broker gave it, the tasks it
    owns (what it reports), and what it reported last (a field is sent only when it changed)."""

    client: AIOKafkaClient
    coordinator: int
    group: str
    topology: Topology
    port: int
    member_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch: int = JOIN_EPOCH
    assigned: Tasks | None = None
    owned: Tasks = field(default_factory=dict)
    reported: Tasks | None = None
    endpoints: tuple[EndpointPartitions, ...] = ()

    async def beat(self, *, leave: bool = False) -> HeartbeatAnswer:
        answer = await self.attempt(leave=leave)
        assert answer.error_code == 0, f"heartbeat refused: {answer.error_code} {answer.error_message}"
        self.epoch = answer.member_epoch
        if answer.active_tasks is not None:
            self.assigned = answer.active_tasks
        if answer.partitions_by_user_endpoint is not None:
            self.endpoints = answer.partitions_by_user_endpoint
        return answer

    async def attempt(self, *, leave: bool = False) -> HeartbeatAnswer:
        """One heartbeat, whatever the broker answers (but for a coordinator not ready yet)."""
        joining = self.epoch == JOIN_EPOCH
        changed = self.owned if joining or self.owned != self.reported else None
        request = Heartbeat(
            group_id=self.group, member_id=self.member_id, member_epoch=LEAVE_EPOCH if leave else self.epoch,
            topology=self.topology if joining else None,
            rebalance_timeout_ms=30_000 if joining else -1,
            process_id=self.member_id if joining else None,
            user_endpoint=Endpoint("127.0.0.1", self.port) if joining else None,
            client_tags={} if joining else None, task_offsets=[] if joining else None,
            task_end_offsets=[] if joining else None,
            # The three task kinds go together (the broker refuses one without the others).
            active_tasks=changed, standby_tasks=None if changed is None else {},
            warmup_tasks=None if changed is None else {},
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while True:
            response = await self.client.send(self.coordinator, StreamsGroupHeartbeatRequest(request))
            answer = heartbeat_answer(response)
            if answer.error_code not in COORDINATOR_NOT_READY:
                break
            assert loop.time() < deadline, "the coordinator was never ready"
            await asyncio.sleep(0.2)
        if changed is not None and answer.error_code == 0:
            self.reported = dict(changed)
        return answer

    def acknowledge(self) -> None:
        """Own exactly what the broker assigned (revoking what it took away): reported on the next beat."""
        self.owned = dict(self.assigned or {})

    async def commit(self, offsets: dict[tuple[str, int], int], epoch: int | None = None) -> dict[Any, int]:
        request = MemberOffsetCommitRequest(self.group, self.member_id,
                                            self.epoch if epoch is None else epoch, offsets)
        return commit_errors(await self.client.send(self.coordinator, request))

    async def beat_until(self, condition: Callable[[HeartbeatAnswer], bool]) -> HeartbeatAnswer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while not condition(answer := await self.beat()):
            assert loop.time() < deadline, f"member {self.member_id}: condition not met; last answer {answer}"
            await asyncio.sleep(0.1)
        return answer


async def find_coordinator(client: AIOKafkaClient, group: str) -> int:
    """The group's coordinator, once the broker has one (a new broker first creates its offsets topic)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while True:
        try:
            return int(await client.coordinator_lookup(CoordinationType.GROUP, group))
        except GroupCoordinatorNotAvailableError:
            assert loop.time() < deadline, "no group coordinator"
            await asyncio.sleep(0.2)
