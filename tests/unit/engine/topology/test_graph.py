"""The topology as a graph: every topic, agent and table with what reads, writes, keeps and joins what; ranks
that make data flow left to right (a cycle set aside, not looped on); Mermaid and Graphviz text that those
tools read (names quoted), and `engine topology` writing each."""

from __future__ import annotations

import json

import engine
from cli.main import main
from engine.topology.graph import Edge, Graph, dot, graph_of, mermaid
from engine.topology.plan import build_topology


def shop() -> engine.App:
    app = engine.App("shop")
    orders = app.topic("orders", key_type=str, value_type=dict, partitions=6)
    alerts = app.topic("alerts", key_type=str, value_type=dict)
    customers = app.Table("customers", source_topic=app.topic("customer-feed", key_type=str, value_type=dict,
                                                                    partitions=6))
    totals = app.Table("totals", default=int, key_type=str, value_type=int).tumbling(60, grace=5)
    totals.closed()

    @app.agent(orders)
    async def enrich(stream):
        async for key, (order, customer) in stream.join(customers).items():
            totals[key] += order["amount"]
            await alerts.send(key=key, value={"order": order, "customer": customer})

    @app.agent(alerts)
    async def echo(stream):  # writes back into what `enrich` reads: a cycle
        async for key, value in stream.items():
            await orders.send(key=key, value=value["order"])

    app.stream(orders).session(30).count("sessions")
    return app


def test_every_node_and_edge_of_an_app_with_a_join_windows_a_pipeline_and_a_cycle():
    app = shop()
    graph = graph_of(app, build_topology(app, app.settings()))
    edges = {(e.source, e.label, e.target) for e in graph.edges}
    assert {
        ("topic:orders", "reads", "agent:enrich"),
        ("table:customers", "joins", "agent:enrich"),
        ("topic:customer-feed", "source", "table:customers"),
        ("agent:enrich", "uses", "table:totals"),
        ("table:totals", "changelog", "topic:shop-totals-changelog"),
        ("table:totals", "closed", "topic:shop-totals-closed"),
        ("agent:enrich", "writes", "topic:alerts"),
        ("topic:alerts", "reads", "agent:echo"),
        ("agent:echo", "writes", "topic:orders"),
        ("topic:orders", "reads", "agent:sessions-aggregate"),
        ("agent:sessions-aggregate", "uses", "table:sessions"),
        ("agent:enrich", "dead letters", "topic:shop-enrich-dlq"),
    } <= edges
    assert ("agent:enrich", "uses", "table:customers") not in edges  # (a join, drawn once)
    assert graph.nodes["table:totals"].detail == "tumbling 60s"
    assert graph.nodes["table:sessions"].detail == "session gap 30s"
    assert graph.nodes["table:customers"].detail == "source"
    assert graph.nodes["topic:orders"].detail == "source, 6 partitions"
    assert not any(name.endswith("-replies") for name in graph.nodes)  # every agent's: left out
    ranks = graph.ranks()
    # Data flows left to right along every edge but the one that closes the cycle.
    forward = [e for e in graph.edges if ranks[e.target] <= ranks[e.source]]
    assert [(e.source, e.target) for e in forward] == [("agent:echo", "topic:orders")]
    assert ranks["topic:orders"] == 0
    assert ranks["agent:enrich"] == 2


def test_ranks_set_a_cycle_aside_once_and_follow_the_longest_path():
    graph = Graph("g")
    for name in "abcd":
        graph.node("topic", name, "")
    for source, target in [("a", "b"), ("b", "c"), ("c", "b"), ("a", "c"), ("c", "d")]:
        graph.edge(f"topic:{source}", f"topic:{target}", "x")
    graph.edge("topic:a", "topic:nowhere", "x")  # to a node left out: not drawn
    assert Edge("topic:a", "topic:nowhere", "x") not in graph.edges
    assert graph.ranks() == {"topic:a": 0, "topic:b": 1, "topic:c": 2, "topic:d": 3}


def test_mermaid_and_dot_quote_what_names_hold():
    graph = Graph('odd "app"')
    graph.node("topic", 'in "quotes" <and> & more', "source, 1 partition")
    graph.node("agent", "back\\slash", "1 instance")
    graph.edge('topic:in "quotes" <and> & more', "agent:back\\slash", "reads")
    text = mermaid(graph)
    assert text.splitlines() == [
        "flowchart LR",
        '  n0[("in #quot;quotes#quot; #lt;and#gt; #amp; more<br/><small>source, 1 partition</small>")]',
        '  n1["back\\slash<br/><small>1 instance</small>"]',
        "  n0 -->|reads| n1"]
    written = dot(graph)
    assert written.startswith('digraph "odd \\"app\\"" {')
    assert '"topic:in \\"quotes\\" <and> & more" -> "agent:back\\\\slash" [label="reads"];' in written
    assert '[label="in \\"quotes\\" <and> & more\\nsource, 1 partition", shape=cylinder];' in written


def test_engine_topology_writes_each_format(capsys):
    for form in ("mermaid", "dot", "json"):
        assert main(["topology", "-A", "examples.wordcount:app", "--format", form]) == 0
        out = capsys.readouterr().out
        if form == "mermaid":
            assert out.startswith("flowchart LR\n")
            assert "-->|uses|" in out
        elif form == "dot":
            assert out.startswith('digraph "wordcount" {')
            assert '"agent:count" -> "table:word-counts"' in out
        else:
            drawn = json.loads(out)
            assert {node["id"] for node in drawn["nodes"]} >= {"topic:lines", "agent:split", "topic:words",
                                                              "agent:count", "table:word-counts"}
            assert {"source": "agent:split", "target": "topic:words", "label": "writes"} in drawn["edges"]
