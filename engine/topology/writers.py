"""Who in the app writes which topic, and from the events of which topics each table is written: what its
agents declare (sinks, `through`, `group_by`, from the declaration run) and what their code and its timers'
code does (engine.topology.uses). Plain data, which the topology (engine.topology.plan) consumes: a reset
tells the topics the app writes and reads again (intermediate) from its inputs by it, and the worker gives a
table it creates the partition count of the topics whose events write it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from engine.topics import Topic
from engine.topology.uses import scan

if TYPE_CHECKING:
    from engine.agent import Agent
    from engine.app import App
    from engine.topology.declaration import AgentDeclaration, Declaration


@dataclass
class TableWriters:
    """The topics whose events reach the code of the agents that use a table by key, and where they do."""

    topics: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)  # "agent 'count' (wordcount.py:26)"


@dataclass(frozen=True)
class Writer:
    """Who in the app writes a topic (an agent or a timer, by name), and how (for messages)."""

    kind: Literal["agent", "timer"]
    name: str
    how: str  # ", whose sink it is"; ": `out.send` (app.py:12)"

    def __str__(self) -> str:
        return f"{self.kind} {self.name}{self.how}"


@dataclass
class Writers:
    topics: dict[str, list[Writer]] = field(default_factory=dict)  # topic -> who writes it, and how
    unresolved: list[str] = field(default_factory=list)  # sends whose topic the code does not name
    tables: dict[str, TableWriters] = field(default_factory=dict)  # by table name (non-global tables)

    def add(self, topic: str, by: Writer) -> None:
        self.topics.setdefault(topic, []).append(by)


def find_writers(app: App, declared: Declaration) -> Writers:
    """Every writer of `app`'s topics and tables that its declaration and its code show."""
    writers = Writers()
    for agent in app.agents.values():
        pipeline = declared.agents.get(agent.name)
        for topic in pipeline.reads if pipeline is not None else ():
            writers.add(topic.name, Writer("agent", agent.name, ", which forwards its stream to it"))
        for sink in agent.sinks:
            target = sink if isinstance(sink, Topic) else getattr(sink, "channel", None)
            if isinstance(target, Topic):
                writers.add(target.name, Writer("agent", agent.name, ", whose sink it is"))
        _agent_code(writers, app, agent, pipeline)
    for timer in app.timers.values():
        uses = scan(timer.fun)
        for name, where in uses.sends.items():
            writers.add(name, Writer("timer", timer.name, f": {', '.join(where)}"))
        writers.unresolved.extend(f"timer {timer.name}: {where}" for where in uses.unresolved)
    return writers


def _agent_code(writers: Writers, app: App, agent: Agent, pipeline: AgentDeclaration | None) -> None:
    """What the agent's code sends to, and the tables it uses by key: those are written (and read) from the
    events that reach its body: its channel's, or those of the topic its stream was last forwarded to, and
    those of the streams it joins."""
    uses = scan(agent.fun)
    for name, where in uses.sends.items():
        writers.add(name, Writer("agent", agent.name, f": {', '.join(where)}"))
    writers.unresolved.extend(f"agent {agent.name}: {where}" for where in uses.unresolved)
    forwarded = pipeline.reads if pipeline is not None else []
    body = [forwarded[-1].name if forwarded else agent.channel.name,
            *(topic.name for topic in (pipeline.merged if pipeline is not None else []))]
    for name, where in uses.tables.items():
        table = app.tables.get(name)
        if table is None or table.changelog_topic.name in body:
            continue  # a table of another app; an agent over the table's own changes
        found = writers.tables.setdefault(name, TableWriters())
        found.topics.extend(topic for topic in body if topic not in found.topics)
        found.agents.append(agent.name)
        found.uses.append(f"agent {agent.name!r} {where[0]}")
