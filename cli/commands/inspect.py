"""engine topics / engine topology / engine agents: what the app declares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cli.loader import load_app
from cli.settings_options import given_settings
from engine.tools import build_topology, dot, dumps, graph_of, mermaid

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    topics = sub.add_parser("topics", help="list the app's topics: read, written and kept, with partitions",
                            example="engine topics -A examples.wordcount:app")
    topics.set_defaults(run=run_topics)
    topology = sub.add_parser(
        "topology", help="draw the app's topology: topics, agents and tables, and what reads, writes, keeps "
                         "and joins what (Mermaid, Graphviz or JSON)",
        example="engine topology -A examples.wordcount:app --format dot")
    topology.add_argument("--format", choices=("mermaid", "dot", "json"), default="mermaid",
                          help="mermaid (a flowchart for Markdown), dot (Graphviz) or json (as the worker's "
                               "page draws it)")
    topology.set_defaults(run=run_topology)
    agents = sub.add_parser("agents", help="list the app's agents",
                            example="engine agents -A examples.wordcount:app")
    agents.set_defaults(run=run_agents)


def _name(t: type | None) -> str:
    return "-" if t is None else t.__name__


def run_topics(args: argparse.Namespace) -> int:
    """Every topic the app reads, writes and keeps, as the worker will create it (engine.topology.plan), with
    each key's and value's format and type, and the registry subjects of those in a registry format."""
    app = load_app(args.app)
    topology = build_topology(app, app.settings(given_settings(args)))
    print(f"{'topic':40} {'role':12} {'partitions':>10}  {'key':12} {'value':12} config")
    for plan in sorted(topology.topics.values(), key=lambda p: (_ORDER.index(p.role), p.name)):
        topic = plan.topic
        config = ",".join(f"{k}={v}" for k, v in sorted(plan.config.items())) or "-"
        subjects = [f"{role} subject {subject()}" for role, codec in (("key", topic.key_codec),
                                                                      ("value", topic.value_codec))
                    if (subject := getattr(codec, "subject_name", None)) is not None]  # a registry format's
        print(f"{plan.name:40} {plan.role:12} {plan.partitions:>10}  "
              f"{topic.key_codec.name + ':' + _name(topic.key_type):12} "
              f"{topic.value_codec.name + ':' + _name(topic.value_type):12} {config}"
              + (f"  ({', '.join(subjects)})" if subjects else ""))
    for agent, why in topology.undeclared.items():
        print(f"(agent {agent} awaits before its first event ({why}): topics its pipeline reads are "
              "known once it runs)")
    return 0


def run_topology(args: argparse.Namespace) -> int:
    """The topology as a graph (engine.topology.graph), written out in the format asked for."""
    app = load_app(args.app)
    graph = graph_of(app, build_topology(app, app.settings(given_settings(args))))
    if args.format == "json":
        print(dumps(graph.as_json()).decode())
    else:
        print(mermaid(graph) if args.format == "mermaid" else dot(graph), end="")
    return 0


_ORDER = ["source", "repartition", "table-source", "changelog", "closed", "late", "sink", "dlq", "replies"]


def run_agents(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    settings = app.settings(given_settings(args))
    print(f"{'agent':24} {'topic':30} {'concurrency':>11}  {'on_error':8} sinks")
    for agent in app.agents.values():
        sinks = ", ".join(getattr(s, "name", repr(s)) for s in agent.sinks) or "-"
        policy = agent.on_error or settings.agent_error_policy
        print(f"{agent.name:24} {agent.channel.name:30} {agent.concurrency:>11}  {policy:8} {sinks}")
    return 0
