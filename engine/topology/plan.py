"""The topology: every topic an app reads, writes and keeps, with its partition count and config, and which
topics must be co-partitioned; known before anything connects.

Pure: built from an App and its Settings, no I/O. The worker creates what is missing from it, checks it
against the broker (`check`) and subscribes once, before its first fetch; `engine topics` prints the same one.

An agent's pipeline (`group_by`, `through`, `join`) is learnt by the declaration run
(engine.topology.declaration), a step of its own; the topology consumes its result. The one change to a
topology at run time is `declare_late`, for what an agent that awaited something before its first event
declares when it gets there.

Partition counts (Kafka Streams' rules, see docs/topology.md): a topic declared with `partitions=` must have
that many; a table has its changelog's count. An internal topic engine creates without a declared count
takes the count of the topics whose events write it, which only the broker knows: `resolve` settles them
from its counts before the worker creates anything (engine.topology.partitions); until then, and for the
topics with nothing to follow, they have `topic_partitions`. Topics that must be co-partitioned (a stream
and the non-global table it joins, a table and every topic whose events write it) must have equal counts,
or keys would be looked up in, or written to, partitions that do not hold them.

Which topics write a table, and which topics the app writes besides its declared sinks, `through` and
`group_by`: its agents' and timers' code says (engine.topology.uses, read from their bytecode).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from engine.errors import TopologyError
from engine.topics import Topic, planned_partitions
from engine.topology.declaration import Declaration, declare
from engine.topology.partitions import followed_counts
from engine.topology.writers import Writer, find_writers
from engine.transport.base import TopicSpec
from engine.windows import History

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
MIN_LAG = "min.compaction.lag.ms"
# Records in transit between two of the app's agents (repartitioned, a foreign-key join's requests) keep the
# event's time. Reprocessing old events, time retention would delete them before they are read, at the
# broker's next retention check: they are kept until the app reads them (Kafka Streams' repartition topics
# likewise have no time retention).
IN_TRANSIT = {"retention.ms": "-1"}
ROLE_CONFIG: dict[str, Mapping[str, str]] = {"repartition": IN_TRANSIT}
# The roles of the topics engine makes for the app, whichever Topic object names them (a table's changelog,
# closed and late topics; a repartition topic; the replies; the dead letters); with every topic declared
# Topic.internal (`through`, a join's requests), those are the app's internal topics (TopicPlan.internal).
# Of them, those whose partition count follows the topics whose events write them, when engine creates them.
FOLLOWING_ROLES: tuple[Role, ...] = ("changelog", "repartition", "closed", "late")
INTERNAL_ROLES: tuple[Role, ...] = (*FOLLOWING_ROLES, "replies", "dlq")


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
    follows: tuple[str, ...] = ()  # the topics whose count it takes when created, unless a group says

    @property
    def internal(self) -> bool:
        """A topic engine makes for the app (by its role, or declared `Topic.internal`)."""
        return self.role in INTERNAL_ROLES or self.topic.internal

    @property
    def follower(self) -> bool:
        """An internal topic whose count engine chooses when it creates it (none is declared)."""
        return self.internal and not self.pinned and self.role not in ("dlq", "replies")

    @property
    def name(self) -> str:
        return self.topic.name

    @property
    def spec(self) -> TopicSpec:
        return TopicSpec(self.name, self.partitions, self.replication, self.config)


@dataclass(frozen=True)
class CoPartitioned:
    """Topics whose partition counts must be equal, and why. `settles`: whether a count the broker has for
    one of them settles the others' (a window's closed or late topic follows its table, never leads it: it
    is checked, not followed)."""

    topics: tuple[str, ...]
    why: str
    settles: bool = True


@dataclass
class Topology:
    app_id: str
    settings: Settings
    topics: dict[str, TopicPlan] = field(default_factory=dict)
    reads: dict[str, list[str]] = field(default_factory=dict)  # agent -> topics it reads, channel first
    merged: dict[str, list[str]] = field(default_factory=dict)  # agent -> of those, read into its own stream
    copartitioned: list[CoPartitioned] = field(default_factory=list)
    undeclared: dict[str, str] = field(default_factory=dict)  # agent -> why its pipeline is not known
    writes: dict[str, list[Writer]] = field(default_factory=dict)  # topic -> who in the app writes it
    table_users: dict[str, list[str]] = field(default_factory=dict)  # table -> agents using it by key
    joins: dict[str, list[str]] = field(default_factory=dict)  # agent -> tables its stream joins
    # Topics whose events several agents use one table from: within a task, in timestamp order, one agent at
    # a time (engine.fetch.conductor), as one Kafka Streams task processes every input of its store.
    serial: set[str] = field(default_factory=set)
    unresolved: list[str] = field(default_factory=list)  # sends in the app's code to a topic not known

    # -- building -----------------------------------------------------------------------------------

    def add(self, topic: Topic, role: Role, *, user: str | None = None, partitions: int | None = None,
            config: Mapping[str, str] | None = None, follows: tuple[str, ...] = ()) -> TopicPlan:
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
            users=(user,) if user else (), follows=follows,
        )
        self.topics[topic.name] = plan
        return plan

    def declare_late(self, topic: Topic, role: Role) -> TopicPlan:
        """The one change a topology takes at run time: a topic that an agent which awaited something before
        its first event declares when it gets there (a topic it reads, or an internal topic it writes);
        a topic the topology has already is returned as it is."""
        return self.add(topic, role)

    def resolve(self, counts: Mapping[str, int]) -> None:
        """Settle the partition count of every internal topic that the broker does not have (`counts`: the
        partitions of the topics it has) and that declares none: that of the topics whose events write it
        (engine.topology.partitions). Run before the worker creates its topics."""
        fixed = {name: counts.get(name, plan.partitions) for name, plan in self.topics.items()
                 if name in counts or not plan.follower}
        open_ = {name: plan.follows for name, plan in self.topics.items() if name not in fixed}
        groups = [group.topics for group in self.copartitioned if group.settles]
        for name, count in followed_counts(fixed, open_, groups).items():
            self.topics[name] = replace(self.topics[name], partitions=count)

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
        configs of the topics tables read as their changelog); raise one TopologyError naming every problem,
        its topics and counts, and what to do. (Run before the worker creates its topics too: a topic not
        there yet is as planned, and a table's source topic engine creates is compacted.)"""
        problems: list[str] = []
        for plan in self.topics.values():
            found = counts.get(plan.name)
            if plan.pinned and found is not None and found != plan.partitions:
                problems.append(
                    f"topic {plan.name!r} has {found} partitions, but the app declares partitions="
                    f"{plan.partitions}: change the declaration, or recreate the topic with "
                    f"{plan.partitions} partitions")
            if plan.role == "table-source" and plan.name in counts:
                policy = configs.get(plan.name, {}).get("cleanup.policy", "")
                if "compact" not in policy.split(","):
                    tables = ", ".join(map(repr, plan.users))
                    problems.append(
                        f"topic {plan.name!r} is the source of table {tables} but its "
                        f"cleanup.policy is {policy or 'unknown'!r}, not compact: old keys would be deleted "
                        "by retention and the table would lose them on recovery; set cleanup.policy=compact "
                        "on the topic")
                history = int(plan.config.get(MIN_LAG, "0"))
                lag = int(configs.get(plan.name, {}).get(MIN_LAG, "0") or "0")
                if lag < history:
                    tables = ", ".join(map(repr, plan.users))
                    problems.append(
                        f"topic {plan.name!r} is the source of versioned table {tables}, whose history is "
                        f"{history / 1000:g} s, but its {MIN_LAG} is {lag}: compaction may remove versions "
                        f"within the history, and a restore would not find them; set {MIN_LAG}={history} "
                        "(or more) on the topic, or declare the table without source_topic and write the "
                        "topic's records into it from an agent (its own changelog keeps every version)")
        for group in self.copartitioned:
            found_counts = {name: counts.get(name, self.topics[name].partitions) for name in group.topics}
            if len(set(found_counts.values())) > 1:
                # (A topic not made yet whose count follows the others is not named: it has none of its own.)
                fixed = {name: n for name, n in found_counts.items()
                         if name in counts or not self.topics[name].follower}
                shown = fixed if len(set(fixed.values())) > 1 else found_counts
                listed = ", ".join(f"{name!r} has {n}" for name, n in shown.items())
                problems.append(f"{group.why}, so their topics must have the same number of partitions, but "
                                f"{listed}; {self._mend(group, found_counts, counts)}")
        if problems:
            raise TopologyError("the topology does not fit the broker: " + "; ".join(problems))


    def _mend(self, group: CoPartitioned, found: Mapping[str, int], existing: Mapping[str, int]) -> str:
        """What fixes a group whose counts differ: an internal topic engine made with another count than its
        writers' goes with a reset (engine creates it again, following them); otherwise declarations."""
        made = sorted(name for name in group.topics if name in existing and self.topics[name].follower)
        others = {found[name] for name in group.topics if name not in made}
        if made and len(others) == 1:
            return (f"{', '.join(map(repr, made))} {'was' if len(made) == 1 else 'were'} created by engine "
                    f"before, with another count: `engine reset -A <module>:app --execute` (app "
                    f"{self.app_id!r}) deletes the app's internal topics and local state, and the next start "
                    f"creates them with {others.pop()} partitions and processes the input again")
        return ("declare the same partitions= on both, or recreate the smaller one (and re-key with group_by "
                "if the source cannot change)")


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
                source = pipeline.sources.get(topic.name)
                topology.add(topic, "repartition", follows=(source,) if source else ())
            for topic in pipeline.reads:
                topology.add(topic, "source", user=agent.name)
                topology.reads[agent.name].append(topic.name)
            for topic in pipeline.merged:
                topology.add(topic, "source", user=agent.name)
                topology.reads[agent.name].append(topic.name)
                topology.merged.setdefault(agent.name, []).append(topic.name)
            for topic, other, tables in pipeline.stream_joins:
                topology.joins.setdefault(agent.name, []).extend(table.name for table in tables)
                topology.copartitioned.append(CoPartitioned(
                    (topic.name, other.name, *(table.changelog_topic.name for table in tables)),
                    f"agent {agent.name!r} joins stream {topic.name!r} with stream {other.name!r}"))
            for topic, table in pipeline.joins:
                topology.joins.setdefault(agent.name, []).append(table.name)
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
    writers = find_writers(app, declared)
    topology.writes, topology.unresolved = writers.topics, writers.unresolved
    for name, written in writers.tables.items():
        topology.table_users[name] = list(dict.fromkeys(written.agents))
        if len(set(written.agents)) > 1:
            topology.serial.update(written.topics)
        group = (app.tables[name].changelog_topic.name, *written.topics)
        if not any(set(known.topics) == set(group) for known in topology.copartitioned):
            topics = ", ".join(map(repr, written.topics))
            topology.copartitioned.append(CoPartitioned(group, (
                f"table {name!r} is used by key in {', '.join(written.uses)}, which process"
                f"{'es' if len(written.uses) == 1 else ''} the events of {topics}")))
    return topology


def _add_table(topology: Topology, table: BaseTable) -> None:
    count = table.changelog_topic.partitions  # closed and late topics are partitioned like the table
    role: Role = "changelog" if table.has_own_changelog else "table-source"
    config = COMPACTED
    if role == "table-source" and isinstance(table.window, History):
        # A versioned table's versions are the topic's records of one key: compaction must leave those of its
        # history, or a restore would not find them.
        config = {**COMPACTED, MIN_LAG: str(table.window.retention_ms)}
    changelog = topology.add(table.changelog_topic, role, user=table.name, config=config)
    if table.key_join_of is not None:
        left, right = table.key_join_of
        topology.copartitioned.append(CoPartitioned(  # (the result too: its partition p is theirs)
            (left.changelog_topic.name, right.changelog_topic.name, changelog.name),
            f"tables {left.name!r} and {right.name!r} are joined by key (into table {table.name!r})"))
    windowed = table.windowed
    if windowed is not None:
        kinds: tuple[tuple[Topic | None, Role], ...] = ((windowed.closed_topic, "closed"),
                                                        (windowed.late_topic, "late"))
        for topic, kind in kinds:
            if topic is not None:
                topology.add(topic, kind, user=table.name, partitions=count, follows=(changelog.name,))
                # Partition p of the table sends its closed windows (late events) to partition p of the
                # topic: one made beforehand with fewer partitions (a reader that had the broker create it)
                # would fail the first checkpoint that sends there.
                what = "final results" if kind == "closed" else "late events"
                topology.copartitioned.append(CoPartitioned(
                    (changelog.name, topic.name),
                    f"table {table.name!r} sends the {what} of its partition p to partition p of "
                    f"{topic.name!r}", settles=False))
