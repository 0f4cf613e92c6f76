"""What the app's code sends to and which tables it uses by key, read from its bytecode
(engine.topology.uses), and the partition counts internal topics take from the topics that write them
(engine.topology.partitions): pure, without a broker."""
from __future__ import annotations

import types

import engine
from engine.topology.partitions import followed_counts
from engine.topology.uses import scan

app = engine.App("uses", broker="memory://x")
orders = app.topic("orders", key_type=str, value_type=dict)
alerts = app.topic("alerts", value_type=str)
totals = app.Table("totals", default=int, key_type=str)
regions = app.GlobalTable("regions", key_type=str)
per_minute = app.Table("per-minute", default=int, key_type=str).tumbling(60, expires=3600)
shop = types.SimpleNamespace(audit=app.topic("audit", value_type=dict))  # a topic reached by attributes


@app.agent(app.topic("checks", value_type=dict))
async def check(stream):
    async for order in stream:
        yield order


async def warn(text: str) -> None:
    """A helper of the app's own: the scan reads it too."""
    await alerts.send(value=text)


def test_sends_by_name_through_attributes_helpers_and_agents_are_found():
    async def agent(stream):
        async for key, order in stream.items():
            await orders.send(key=key, value=order)
            await shop.audit.send(value=order)
            await warn("big") if order["n"] > 9 else None
            await check.ask(order)

    uses = scan(agent)
    assert sorted(uses.sends) == ["alerts", "audit", "checks", "orders"]
    assert uses.sends["orders"][0].startswith("`orders.send` (test_topology_uses.py:")
    assert uses.sends["audit"][0].startswith("`shop.audit.send` (")
    assert uses.sends["checks"][0].startswith("`check.ask` (")
    assert uses.unresolved == []


def test_a_send_on_what_the_code_does_not_name_is_unresolved():
    targets = {"orders": orders}

    async def agent(stream, out=None):
        async for order in stream:
            await targets[order["to"]].send(value=order)
            await out.send(value=order)

    uses = scan(agent)
    assert uses.sends == {}
    assert [where.split(" ")[0] for where in uses.unresolved] == ["`(a", "`out.send`"]


def test_a_closed_over_topic_and_another_librarys_send_are_told_apart():
    class Socket:
        def send(self, data: object) -> None: ...

    socket = Socket()

    async def agent(stream):
        async for order in stream:
            socket.send(order)
            await alerts.send(value="x")

    uses = scan(agent)
    assert list(uses.sends) == ["alerts"]
    assert uses.unresolved == [], "a named object that is not a topic is no topic"


def test_tables_used_by_key_and_those_used_as_a_whole():
    async def by_key(stream):
        async for key, _ in stream.items():
            totals[key] += 1
            per_minute[key] += 1  # a windowed view of its table
            print(regions[key])  # a global table: every partition is everywhere

    async def as_a_whole(stream):
        async for _ in stream:
            print(len(totals), list(totals.items()), [k for k in totals])
            await totals.query("a")

    assert sorted(scan(by_key).tables) == ["per-minute", "totals"]
    assert scan(as_a_whole).tables == {}


def test_the_scan_never_runs_a_property():
    class Holder:
        @property
        def topic(self):
            raise AssertionError("run")

    holder = Holder()

    async def agent(stream):
        async for order in stream:
            await holder.topic.send(value=order)

    assert [w.split(" ")[0] for w in scan(agent).unresolved] == ["`holder.topic.send`"]


def test_groups_settle_before_a_topic_follows_its_source():
    fixed = {"source": 12, "table-pinned": 4}
    open_ = {"repartition": ("source",), "changelog": (), "closed": ("changelog",)}
    groups = [("changelog", "repartition"), ("changelog", "table-pinned")]
    assert followed_counts(fixed, open_, groups) == {"changelog": 4, "repartition": 4, "closed": 4}
    groups = [("changelog", "repartition")]
    assert followed_counts(fixed, open_, groups) == {"changelog": 12, "repartition": 12, "closed": 12}


def test_a_group_whose_fixed_counts_differ_settles_nothing():
    fixed = {"sales": 6, "returns": 2}
    assert followed_counts(fixed, {"changelog": ()}, [("changelog", "sales", "returns")]) == {}
    assert followed_counts({}, {"replies": ()}, []) == {}, "nothing to follow: topic_partitions"
