"""engine's topology as one subtopology of a streams group (KIP-1071): engine's task p is partition p of every
topic the group reads (engine.assignor's rule), so the protocol's task ("0", p) is engine's task p. Its
declaration to the broker, the check that an app fits it, and the groups' tasks read as engine's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.assignor import Assignment
from engine.transport.base import GroupDescription, GroupMember
from engine.transport.kafka_streams_group import Subtopology, TopicInfo, Topology

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.transport.base import GroupTopology
    from engine.transport.kafka_streams_describe import DescribedGroup, DescribedMember

SUBTOPOLOGY = "0"  # engine's one subtopology: the protocol's task ("0", p) is engine's task p
TOPOLOGY_EPOCH = 0  # the broker refuses any change of a live group's topology, whatever its epoch

TaskSet = frozenset[int]  # partition numbers of subtopology "0"


def declared_topology(topology: GroupTopology) -> Topology:
    """engine's topology as the protocol declares it: one subtopology, its source and repartition topics and
    its tables' changelogs, with the configs engine creates them with (the broker creates a missing internal
    topic exactly as declared). The same on every worker of one app: sorted, the epoch constant."""
    return Topology(epoch=TOPOLOGY_EPOCH, subtopologies=(Subtopology(
        SUBTOPOLOGY,
        source_topics=tuple(sorted(topology.sources)),
        state_changelog_topics=tuple(TopicInfo(spec.name, 0, spec.replication or 0, dict(spec.config))
                                     for spec in sorted(topology.changelogs, key=lambda s: s.name)),
        repartition_sink_topics=tuple(sorted(spec.name for spec in topology.repartition)),
        repartition_source_topics=tuple(
            TopicInfo(spec.name, spec.partitions, spec.replication or 0, dict(spec.config))
            for spec in sorted(topology.repartition, key=lambda s: s.name)),
    ),))


def check_topology(topology: GroupTopology) -> str | None:
    """Why this app cannot be one subtopology of a streams group, or None. The broker gives a subtopology as
    many tasks as its largest source topic has partitions, and refuses a changelog with another count."""
    counts = topology.read
    if not counts:
        return "the app reads no topic through the group"
    tasks = max(counts.values())
    other = sorted(f"{spec.name!r} ({spec.partitions})" for spec in topology.changelogs
                   if spec.partitions != tasks)
    if other:
        return (f"the changelogs {', '.join(other)} have another partition count than the {tasks} tasks of "
                "the topics the app reads, which a streams group refuses")
    return None


def streams_group_description(group: DescribedGroup) -> GroupDescription:
    """A streams group as engine's tools read a group (`engine status`, the reset's check for members): each
    member's endpoint, engine's tasks (subtopology "0") and its stores' changelog positions per task."""
    owners = {p: _address(m) for m in group.members for p in task_set(m.assignment.active)}
    members = [GroupMember(
        m.member_id, _address(m),
        Assignment(active=task_set(m.assignment.active),
                   standby=task_set(m.assignment.standby) | task_set(m.assignment.warmup), owners=owners,
                   warming=task_set(m.assignment.warmup)),
        {o.partition: o.offset for o in m.task_offsets if o.subtopology_id == SUBTOPOLOGY})
        for m in group.members]
    return GroupDescription(group.state, members)


def _address(member: DescribedMember) -> str:
    endpoint = member.user_endpoint
    return f"{endpoint.host}:{endpoint.port}" if endpoint is not None else member.client_host


def task_map(tasks: TaskSet) -> dict[str, list[int]]:
    return {SUBTOPOLOGY: sorted(tasks)} if tasks else {}


def task_set(tasks: Mapping[str, list[int]] | None) -> TaskSet:
    return frozenset(p for subtopology, parts in (tasks or {}).items() if subtopology == SUBTOPOLOGY
                     for p in parts)
