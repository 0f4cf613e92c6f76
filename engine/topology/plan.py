"""The topology: every topic an app reads, writes and keeps, with its partition count and config, and which
topics must be co-partitioned; known before anything connects.

Pure: built from an App and its Settings, no I/O. The worker creates what is missing from it, checks it
against the broker (`check`) and subscribes once, before its first fetch; `engine topics` prints the same one.

An agent's pipeline (`group_by`, `through`, `join`) is learnt by the declaration run
(engine.topology.declaration), a step of its own; the topology consumes its result. The one change to a
topology at run time is `declare_late`, for what an agent that awaited something before its first event
declares when it gets there.

Partition counts (Kafka Streams' rules, see README "Topology"): a topic declared with `partitions=` must have
that many; a table has its changelog's count; a repartition topic has its source's declared count (else
`topic_partitions`); closed and late topics have their table's. Topics that must be co-partitioned (a
stream and the non-global table it joins, a table and every topic whose events write it) must have equal
counts, or keys would be looked up in, or written to, partitions that do not hold them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from engine.errors import TopologyError
from engine.topics import Topic, planned_partitions
from engine.topology.declaration import Declaration, declare
from engine.transport.base import TopicSpec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.agent import Agent
    from engine.app import App
    from engine.settings import Settings
    from engine.tables.base import BaseTable

log = logging.getLogger(__name__)

Role = Literal["source", "sink", "repartition", "changelog", "table-source", "closed", "late", "dlq",
               "replies"]
COMPACTED = {"cleanup.policy": "compact"}
# Records in transit between two of the app's agents (repartitioned, a foreign-key join's requests) keep the
# event's time. Reprocessing old events, time retention would delete them before they are read, at the
# broker's next retention check: they are kept until the app reads them (Kafka Streams' repartition topics
# likewise have no time retention).
IN_TRANSIT = {"retention.ms": "-1"}
ROLE_CONFIG: dict[str, Mapping[str, str]] = {"repartition": IN_TRANSIT}


@dataclass(frozen=True)
class TopicPlan:
    """One topic of the topology: what it is for, and what it must look like."""

    topic: Topic
    role: Role
    partitions: int
    pinned: bool  # the count was declared (partitions=): an existing topic with another count is an error
    replication: int | None
    config: Mapping[str, str]
    users: tuple[str, ...] = ()  # agents or tables, for messages

    @property
    def name(self) -> str:
        return self.topic.name

    @property
    def spec(self) -> TopicSpec:
        return TopicSpec(self.name, self.partitions, self.replication, self.config)


@dataclass(frozen=True)
class CoPartitioned:
    """Topics whose partition counts must be equal, and why."""

    topics: tuple[str, ...]
    why: str


@dataclass
class Topology:
    app_id: str
    settings: Settings
    topics: dict[str, TopicPlan] = field(default_factory=dict)
    reads: dict[str, list[str]] = field(default_factory=dict)  # agent -> topics it reads, channel first
    merged: dict[str, list[str]] = field(default_factory=dict)  # agent -> of those, read into its own stream
    copartitioned: list[CoPartitioned] = field(default_factory=list)
    undeclared: dict[str, str] = field(default_factory=dict)  # agent -> why its pipeline is not known

    # -- building -----------------------------------------------------------------------------------

    def add(self, topic: Topic, role: Role, *, user: str | None = None, partitions: int | None = None,
            config: Mapping[str, str] | None = None) -> TopicPlan:
        """Record `topic` in `role` (the first role a topic gets is kept: a source is not also a sink)."""
        existing = self.topics.get(topic.name)
        if existing is not None:
            if user is not None and user not in existing.users:
                self.topics[topic.name] = existing = replace(existing, users=(*existing.users, user))
            return existing
        count = planned_partitions(topic, self.settings, partitions)
        plan = TopicPlan(
            topic, role, count, pinned=topic.partitions is not None,
            replication=topic.replication or self.settings.topic_replication,
            config={**ROLE_CONFIG.get(role, {}), **(config or {}), **topic.config},
            users=(user,) if user else (),
        )
        self.topics[topic.name] = plan
        return plan

    def declare_late(self, topic: Topic, role: Role) -> TopicPlan:
        """The one change a topology takes at run time: a topic that an agent which awaited something before
        its first event declares when it gets there (a topic it reads, or an internal topic it writes);
        a topic the topology has already is returned as it is."""
        return self.add(topic, role)

    def dlq(self, agent: Agent) -> Topic:
        return self.topics[dlq_name(self.app_id, agent)].topic

    @property
    def replies(self) -> Topic:
        return self.topics[f"{self.app_id}-replies"].topic

    # -- reading ------------------------------------------------------------------------------------

    def specs(self) -> list[TopicSpec]:
        return [plan.spec for plan in self.topics.values()]

    def ordered(self) -> set[str]:
        """The topics whose records reach agents in timestamp order within a task (engine.tasks.inputs):
        those of stream-stream joins, read into one stream."""
        return {name for agent, merged in self.merged.items() if merged
                for name in (self.reads[agent][0], *merged)}

    def subscribed(self) -> list[str]:
        """Every topic some agent reads (its channel and its declared pipeline)."""
        return sorted({name for names in self.reads.values() for name in names})

    def check(self, counts: Mapping[str, int], configs: Mapping[str, Mapping[str, str]]) -> None:
        """Compare the topology with what the broker has (`counts`: partitions per topic, `configs`: the
        configs of the topics tables read as their changelog); raise one TopologyError naming every
        problem, its topics and counts, and what to do."""
        problems: list[str] = []
        for plan in self.topics.values():
            found = counts.get(plan.name)
            if plan.pinned and found is not None and found != plan.partitions:
                problems.append(
                    f"topic {plan.name!r} has {found} partitions, but the app declares partitions="
                    f"{plan.partitions}: change the declaration, or recreate the topic with "
                    f"{plan.partitions} partitions")
            if plan.role == "table-source":
                policy = configs.get(plan.name, {}).get("cleanup.policy", "")
                if "compact" not in policy.split(","):
                    tables = ", ".join(map(repr, plan.users))
                    problems.append(
                        f"topic {plan.name!r} is the source of table {tables} but its "
                        f"cleanup.policy is {policy or 'unknown'!r}, not compact: old keys would be deleted "
                        "by retention and the table would lose them on recovery; set cleanup.policy=compact "
                        "on the topic")
        for group in self.copartitioned:
            found_counts = {name: counts.get(name, self.topics[name].partitions) for name in group.topics}
            if len(set(found_counts.values())) > 1:
                listed = ", ".join(f"{name!r} has {n}" for name, n in found_counts.items())
                problems.append(
                    f"{group.why}, so their topics must have the same number of partitions, but {listed}; "
                    "declare the same partitions= on both, or recreate the smaller one (and re-key with "
                    "group_by if the source cannot change)")
        if problems:
            raise TopologyError("the topology does not fit the broker: " + "; ".join(problems))


def dlq_name(app_id: str, agent: Agent) -> str:
    return f"{app_id}-{agent.dlq_suffix}"


def build_topology(app: App, settings: Settings, declaration: Declaration | None = None) -> Topology:
    """The topology of `app` under `settings`, from what its agents declared (`declaration`; the declaration
    run, engine.topology.declaration, if none is given): pure, no I/O."""
    declared = declaration if declaration is not None else declare(app)
    topology = Topology(app.id, settings)
    for table in app.tables.values():
        _add_table(topology, table)
    for agent in app.agents.values():
        topology.add(agent.channel, "source", user=agent.name)
        topology.reads[agent.name] = [agent.channel.name]
    for agent in app.agents.values():
        pipeline = declared.agents.get(agent.name)
        if pipeline is not None:
            for topic in pipeline.internal:
                topology.add(topic, "repartition")
            for topic in pipeline.reads:
                topology.add(topic, "source", user=agent.name)
                topology.reads[agent.name].append(topic.name)
            for topic in pipeline.merged:
                topology.add(topic, "source", user=agent.name)
                topology.reads[agent.name].append(topic.name)
                topology.merged.setdefault(agent.name, []).append(topic.name)
            for topic, other, tables in pipeline.stream_joins:
                topology.copartitioned.append(CoPartitioned(
                    (topic.name, other.name, *(table.changelog_topic.name for table in tables)),
                    f"agent {agent.name!r} joins stream {topic.name!r} with stream {other.name!r}"))
            for topic, table in pipeline.joins:
                topology.copartitioned.append(CoPartitioned(
                    (topic.name, table.changelog_topic.name),  # its changelog, or the topic it is a table of
                    f"agent {agent.name!r} joins stream {topic.name!r} with table {table.name!r}"))
            if pipeline.undeclared is not None:
                topology.undeclared[agent.name] = pipeline.undeclared
        for sink in agent.sinks:
            target = sink if isinstance(sink, Topic) else getattr(sink, "channel", None)
            if isinstance(target, Topic):
                topology.add(target, "sink", user=agent.name)
        dlq = Topic(dlq_name(app.id, agent), key_serializer="raw", value_serializer="raw", internal=True)
        topology.add(dlq, "dlq", user=agent.name)
    for topic in app.topics.values():
        topology.add(topic, "sink")
    topology.add(Topic(f"{app.id}-replies", internal=True), "replies")
    return topology


def _add_table(topology: Topology, table: BaseTable) -> None:
    count = table.changelog_topic.partitions  # closed and late topics are partitioned like the table
    role: Role = "changelog" if table.has_own_changelog else "table-source"
    topology.add(table.changelog_topic, role, user=table.name, config=COMPACTED)
    windowed = table.windowed
    if windowed is not None:
        if windowed.closed_topic is not None:
            topology.add(windowed.closed_topic, "closed", user=table.name, partitions=count)
        if windowed.late_topic is not None:
            topology.add(windowed.late_topic, "late", user=table.name, partitions=count)
