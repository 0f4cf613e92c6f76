"""The declaration run: what each agent's pipeline declares (`group_by`, `through`, `join`), learnt by running
the agent's own code once, without events and without a loop, up to its first pull.

Each agent function gets a stream that records what the pipeline declares and stops the function at its
first pull. So the code of an agent before its `async for` must be free of side effects (it normally is:
building the pipeline). An agent that awaits something else before iterating cannot be declared that way:
its declaration says why (`undeclared`), and what it reads is subscribed when it gets there, at run time.

The result is plain data (`Declaration`) that the topology (engine.topology.plan) consumes: declaring is a
step of its own, and building the topology from it stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents import Mailbox
from engine.errors import ConfigError
from engine.streams.stream import Stream
from engine.tables.base import BaseTable
from engine.tables.event_time import EventTimeTable
from engine.tables.grace_joins import GraceJoin, grace_join
from engine.tables.stream_joins import StreamJoin, as_how, stream_join
from engine.topics import Topic
from engine.windows import JoinWindows

if TYPE_CHECKING:
    from engine.agent import Agent
    from engine.app import App
    from engine.events import Event
    from engine.stats import Histogram
    from engine.streams.quiesce import Quiesce
    from engine.tracing import AgentSpans
    from engine.windows import Seconds


def internal_topic(app_id: str, name: str, like: Topic | None, key_type: type | None = None,
                   value_type: type | None = None) -> Topic:
    """The internal topic `<app>-<name>` (a repartition or `through` topic): partitioned like the topic it
    repartitions and typed like it unless `key_type`/`value_type` say. The one rule for such a topic."""
    return Topic(
        f"{app_id}-{name}",
        key_type=key_type or (like.key_type if like else None),
        value_type=value_type or (like.value_type if like else None),
        partitions=like.partitions if like else None,
        internal=True,
    )


@dataclass
class AgentDeclaration:
    """What one agent's pipeline declared before its first pull."""

    internal: list[Topic] = field(default_factory=list)  # repartition and `through` topics it writes
    sources: dict[str, str] = field(default_factory=dict)  # internal topic -> the topic whose events it gets
    reads: list[Topic] = field(default_factory=list)  # topics it reads besides its channel, in order
    joins: list[tuple[Topic, BaseTable]] = field(default_factory=list)  # (stream topic, non-global table)
    # Topics read into the agent's own stream, in timestamp order with its channel (a stream-stream join's
    # other stream), with the tables of the join.
    merged: list[Topic] = field(default_factory=list)
    stream_joins: list[tuple[Topic, Topic, list[BaseTable]]] = field(default_factory=list)
    undeclared: str | None = None  # why its pipeline is not known yet, if it is not


@dataclass
class Declaration:
    app_id: str
    agents: dict[str, AgentDeclaration] = field(default_factory=dict)
    internal: dict[str, Topic] = field(default_factory=dict)  # by name: one Topic per internal topic

    def internal_topic(self, name: str, like: Topic | None, key_type: type | None = None,
                       value_type: type | None = None) -> Topic:
        """The internal topic of that name, the same object for every agent that names it."""
        full = f"{self.app_id}-{name}"
        topic = self.internal.get(full)
        if topic is None:
            topic = self.internal[full] = internal_topic(self.app_id, name, like, key_type, value_type)
        return topic


def declare(app: App) -> Declaration:
    """Run each agent of `app` up to its first pull and record what its pipeline declares (a stream-stream
    join also declares its buffers as tables of the app, the first time)."""
    declaration = Declaration(app.id)
    writers: dict[str, str] = {}  # internal topic -> the agent that repartitions through it
    for agent in app.agents.values():
        declared = declaration.agents[agent.name] = _declare(app, declaration, agent)
        for topic in declared.internal:
            other = writers.setdefault(topic.name, agent.name)
            if other != agent.name:  # both would read what either writes there: each the other's records
                raise ConfigError(f"agents {other!r} and {agent.name!r} both re-route through the internal "
                                  f"topic {topic.name!r}: give their group_by (or through) different names")
    return declaration


class _Declared(BaseException):  # a signal, not an error; BaseException: agents do not catch it
    """Raised at an agent's first pull during the declaration run: its pipeline is declared."""


class _Declaring:
    """The StreamContext of the declaration run: records what the pipeline declares."""

    quiesce: Quiesce | None = None
    timings: Histogram | None = None
    tracing: AgentSpans | None = None

    def __init__(self, app: App, declaration: Declaration, agent: Agent, declared: AgentDeclaration) -> None:
        self.app = app
        self.declaration = declaration
        self.agent = agent
        self.declared = declared
        self.grace_joins = 0  # (numbering its joins with a grace, as the worker's run numbers them)

    @property
    def agent_name(self) -> str:
        return self.agent.name

    def subscribe(self, topic: Topic) -> Mailbox[Event]:
        if topic.name != self.agent.channel.name and all(t.name != topic.name for t in self.declared.reads):
            self.declared.reads.append(topic)
        return Mailbox(1)

    def repartition_topic(self, name: str, like: Topic | None, key_type: type | None = None,
                          value_type: type | None = None) -> Topic:
        topic = self.declaration.internal_topic(name, like, key_type, value_type)
        self.declared.internal.append(topic)
        if like is not None:
            self.declared.sources[topic.name] = like.name
        return topic

    def opened(self, stream: Stream) -> None:
        return None

    def pulling(self) -> None:
        raise _Declared

    def joined(self, topic: Topic | None, table: Any) -> None:
        if isinstance(table, EventTimeTable):  # (a table's face: a versioned table's)
            table = table.table
        if isinstance(table, BaseTable) and not table.is_global and topic is not None:
            self.declared.joins.append((topic, table))

    def grace_join(self, topic: Topic, table: Any, grace: Seconds, how: str) -> GraceJoin:
        joined = grace_join(self.app, self.agent.name, self.grace_joins, topic, table, grace, how,
                            declaring=True)
        self.grace_joins += 1
        self.declared.joins.append((topic, joined.buffer.table))
        return joined

    def stream_join(self, topic: Topic, other: Topic, within: Seconds, grace: Seconds,
                    how: str) -> StreamJoin:
        joined = stream_join(self.app, self.agent.name, len(self.declared.stream_joins), topic, other,
                             JoinWindows(within, grace), as_how(how), declaring=True)
        if other.name != self.agent.channel.name and other not in self.declared.merged:
            self.declared.merged.append(other)
        tables = [buffer.table for buffer in [*joined.buffers, *joined.pending] if buffer is not None]
        self.declared.stream_joins.append((topic, other, tables))
        return joined


def _declare(app: App, declaration: Declaration, agent: Agent) -> AgentDeclaration:
    declared = AgentDeclaration()
    stream = Stream(Mailbox(1), _Declaring(app, declaration, agent, declared), agent.channel)
    started = agent.fun(stream)
    step = started.__anext__() if agent.is_generator else started
    try:
        step.send(None)
    except _Declared:
        return declared
    except (StopIteration, StopAsyncIteration):
        return declared  # returned (or ended) before iterating: nothing more to declare
    except Exception as exc:  # user code that needs a running worker: declared later
        declared.undeclared = f"{type(exc).__name__}: {exc}"
    else:
        declared.undeclared = "it awaits something before its first event"
        step.close()
    return declared
