"""The topology as a graph to draw: topics, agents (pipelines' included) and tables as nodes, what reads,
writes, keeps and joins what as edges, each node in a column (`rank`) so that data flows left to right.
Pure, from the same Topology `engine topics` prints; `engine topology --format mermaid|dot|json` writes it
out for docs and reviews, and the worker's page draws its JSON (engine.web.page).

Ranks: a node's longest path from a node nothing flows into, once the edges that close a cycle are set aside
(still drawn, back to the left). Writes close a cycle first: an agent that writes a topic read upstream of it
is feedback, not the flow. So the other edges are made acyclic first (a depth-first walk in declaration
order), then each write is kept unless what it writes already leads back to its writer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from engine.windows import History, HoppingWindow, SessionWindow, SlidingWindow, TumblingWindow

if TYPE_CHECKING:
    from engine.app import App
    from engine.tables.base import BaseTable
    from engine.topology.plan import Topology

NodeKind = Literal["topic", "agent", "table", "timer"]
# Topics engine makes for the app that the graph leaves out: every agent's replies go there, and drawing
# them would tie every agent to one node.
LEFT_OUT = ("replies",)


@dataclass(frozen=True)
class Node:
    id: str  # "<kind>:<name>"
    kind: NodeKind
    name: str
    detail: str  # a topic's role and partitions, a table's kind, an agent's concurrency


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str  # reads, writes, uses, joins, changelog, source, closed, late, dead letters


@dataclass
class Graph:
    app_id: str
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    _drawn: set[Edge] = field(default_factory=set, init=False, repr=False)  # (the edges, for look-ups)

    def node(self, kind: NodeKind, name: str, detail: str) -> str:
        key = f"{kind}:{name}"
        self.nodes.setdefault(key, Node(key, kind, name, detail))
        return key

    def edge(self, source: str, target: str, label: str) -> None:
        """An edge between two nodes of the graph (once; one to a node left out is not drawn)."""
        found = Edge(source, target, label)
        if source in self.nodes and target in self.nodes and found not in self._drawn:
            self._drawn.add(found)
            self.edges.append(found)

    def ranks(self) -> dict[str, int]:
        """Each node's column: its longest path from a source, edges closing a cycle set aside."""
        forward = _acyclic(list(self.nodes), self.edges)
        rank = dict.fromkeys(self.nodes, 0)
        outgoing: dict[str, list[str]] = {key: [] for key in self.nodes}
        waiting = dict.fromkeys(self.nodes, 0)  # edges into a node whose source is not ranked yet
        for edge in forward:
            outgoing[edge.source].append(edge.target)
            waiting[edge.target] += 1
        ready = [key for key, count in waiting.items() if count == 0]
        while ready:  # (in topological order: each node once every node before it is ranked)
            key = ready.pop()
            for target in outgoing[key]:
                rank[target] = max(rank[target], rank[key] + 1)
                waiting[target] -= 1
                if waiting[target] == 0:
                    ready.append(target)
        return rank

    def as_json(self) -> dict[str, Any]:
        """Nodes (with their rank) and edges, as the page and `--format json` give them."""
        ranks = self.ranks()
        return {"app": self.app_id,
                "nodes": [{"id": n.id, "kind": n.kind, "name": n.name, "detail": n.detail,
                           "rank": ranks[n.id]} for n in self.nodes.values()],
                "edges": [{"source": e.source, "target": e.target, "label": e.label} for e in self.edges]}


def _acyclic(order: list[str], edges: list[Edge]) -> list[Edge]:
    """`edges` without those that close a cycle: writes that lead back to their writer, and of the others
    those a depth-first walk in `order` finds closing one."""
    kept = set(_walked(order, [e for e in edges if e.label != "writes"]))
    out: dict[str, set[str]] = {key: set() for key in order}
    for edge in kept:
        out[edge.source].add(edge.target)
    for edge in edges:
        if edge.label == "writes" and not _reaches(out, edge.target, edge.source):
            kept.add(edge)
            out[edge.source].add(edge.target)
    return [edge for edge in edges if edge in kept]


def _reaches(out: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = {start}, [start]
    while stack:
        key = stack.pop()
        if key == goal:
            return True
        for target in out[key] - seen:
            seen.add(target)
            stack.append(target)
    return False


def _walked(order: list[str], edges: list[Edge]) -> list[Edge]:
    """`edges` without those a depth-first walk in `order` finds closing a cycle (iterative: an app's
    topology may be deep)."""
    out: dict[str, list[Edge]] = {key: [] for key in order}
    for edge in edges:
        out[edge.source].append(edge)
    state: dict[str, int] = {}  # 1: on the walk's path, 2: done
    back: set[Edge] = set()
    for root in order:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(out[root]))]
        while stack:
            key, rest = stack[-1]
            following = next(rest, None)
            if following is None:
                state[key] = 2
                stack.pop()
                continue
            edge = following
            if state.get(edge.target) == 1:
                back.add(edge)
            elif edge.target not in state:
                state[edge.target] = 1
                stack.append((edge.target, iter(out[edge.target])))
    return [edge for edge in edges if edge not in back]


def graph_of(app: App, topology: Topology) -> Graph:
    """The graph of `app` under its `topology` (engine.topology.plan)."""
    graph = Graph(app.id)
    topics = {name: plan for name, plan in topology.topics.items() if plan.role not in LEFT_OUT}

    def topic(name: str) -> str | None:
        plan = topics.get(name)
        if plan is None:
            return None
        return graph.node("topic", name, f"{plan.role}, {plan.partitions} partition"
                                         f"{'' if plan.partitions == 1 else 's'}")

    for name in topics:
        topic(name)
    for agent in app.agents.values():
        concurrency = f"{agent.concurrency} instances" if agent.concurrency != 1 else "1 instance"
        graph.node("agent", agent.name, concurrency)
    for table in app.tables.values():
        key = graph.node("table", table.name, table_detail(table))
        changelog = topic(table.changelog_topic.name)
        if changelog is not None:
            if table.has_own_changelog:
                graph.edge(key, changelog, "changelog")
            else:
                graph.edge(changelog, key, "source")
        windowed = table.windowed
        kept = ((windowed.closed_topic, "closed"), (windowed.late_topic, "late")) if windowed else ()
        for written, label in kept:
            if written is not None and (target := topic(written.name)) is not None:
                graph.edge(key, target, label)
    for agent_name, names in topology.reads.items():
        merged = topology.merged.get(agent_name, [])
        for name in names:
            if (source := topic(name)) is not None:
                graph.edge(source, f"agent:{agent_name}", "joins" if name in merged else "reads")
    for agent_name, tables in topology.joins.items():
        for name in tables:
            graph.edge(f"table:{name}", f"agent:{agent_name}", "joins")
    for name, agents in topology.table_users.items():
        for agent_name in agents:
            if name not in topology.joins.get(agent_name, ()):
                graph.edge(f"agent:{agent_name}", f"table:{name}", "uses")
    for name, writers in topology.writes.items():
        if (target := topic(name)) is None:
            continue
        for writer in writers:
            source = graph.node(writer.kind, writer.name, "timer") if writer.kind == "timer" else \
                f"agent:{writer.name}"
            graph.edge(source, target, "writes")
    for name, plan in topics.items():
        if plan.role == "dlq":
            for agent_name in plan.users:
                graph.edge(f"agent:{agent_name}", f"topic:{name}", "dead letters")
    return graph


def table_detail(table: BaseTable) -> str:
    """A table's kind as a person reads it: `table`, `global`, `source`, `tumbling 10s`, `versioned`."""
    window = table.window
    if window is None:
        return table.kind
    if isinstance(window, TumblingWindow):
        return f"tumbling {window.size:g}s"
    if isinstance(window, HoppingWindow):
        return f"hopping {window.size:g}s every {window.step:g}s"
    if isinstance(window, SessionWindow):
        return f"session gap {window.gap:g}s"
    if isinstance(window, SlidingWindow):
        return f"sliding {window.size:g}s"
    if isinstance(window, History):
        return "versioned"
    return type(window).__name__


# -- written out ----------------------------------------------------------------------------------------

_MERMAID_SHAPES = {"topic": ('[("', '")]'), "agent": ('["', '"]'), "table": ('[["', '"]]'),
                   "timer": ('(["', '"])')}


def mermaid(graph: Graph) -> str:
    """A Mermaid flowchart: topics as cylinders, agents as boxes, tables as framed boxes, timers rounded."""
    ids = {key: f"n{number}" for number, key in enumerate(graph.nodes)}
    lines = ["flowchart LR"]
    for key, node in graph.nodes.items():
        opening, closing = _MERMAID_SHAPES[node.kind]
        lines.append(f"  {ids[key]}{opening}{_mermaid_text(node.name)}<br/><small>"
                     f"{_mermaid_text(node.detail)}</small>{closing}")
    lines.extend(f"  {ids[e.source]} -->|{_mermaid_text(e.label)}| {ids[e.target]}" for e in graph.edges)
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


_DOT_SHAPES = {"topic": "cylinder", "agent": "box", "table": "box3d", "timer": "ellipse"}


def dot(graph: Graph) -> str:
    """A Graphviz digraph, left to right, with the same shapes (`dot -Tsvg` draws it)."""
    lines = [f"digraph {_dot_text(graph.app_id)} {{", "  rankdir=LR;", '  node [fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    for key, node in graph.nodes.items():
        lines.append(f"  {_dot_text(key)} [label={_dot_text(node.name + chr(10) + node.detail)}, "
                     f"shape={_DOT_SHAPES[node.kind]}];")
    lines.extend(f"  {_dot_text(e.source)} -> {_dot_text(e.target)} [label={_dot_text(e.label)}];"
                 for e in graph.edges)
    return "\n".join([*lines, "}"]) + "\n"


def _dot_text(text: str) -> str:
    """A DOT quoted string (JSON's escapes are DOT's for quotes, backslashes and newlines)."""
    return json.dumps(text, ensure_ascii=False)
