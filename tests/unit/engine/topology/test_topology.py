"""The topology: what build_topology declares (pure, no broker), what `check` says about a broker whose topics
do not fit, and the co-partitioning check at a table's first write from a topic."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections import Counter

import pytest

import engine
from engine import testing
from engine.errors import TopologyError
from engine.events import TP
from engine.topology.declaration import declare
from engine.topology.plan import build_topology


def shop(**settings) -> engine.App:
    app = engine.App("shop", broker="memory://x", topic_partitions=3, **settings)
    orders = app.topic("orders", key_type=str, value_type=dict, partitions=6)
    customers = app.Table("customers", key_type=str, value_type=dict, partitions=6)
    regions = app.GlobalTable("regions", key_type=str)
    totals = app.Table("totals", default=int, key_type=str, partitions=6).tumbling(60, expires=3600)
    rates = app.Table("rates", source_topic="fx-rates", key_type=str, value_type=float)
    alerts = app.topic("alerts", value_type=str)

    @app.agent(orders)
    async def by_customer(stream):
        async for order in stream.group_by(lambda o: o["customer"], name="by-customer").join(customers):
            totals[order[0]["customer"]] += 1

    @app.agent(totals.closed(), sink=[alerts])
    async def watch(stream):
        async for total in stream:
            yield f"{total}"

    @app.agent(app.topic("quotes", key_type=str, value_type=float))
    async def convert(stream):
        async for batch in stream.left_join(rates).take(10, within=1):
            print(batch, regions)

    return app


def test_every_topic_with_its_role_partitions_and_config():
    app = shop()
    topology = build_topology(app, app.settings())
    roles = {name: (plan.role, plan.partitions, dict(plan.config)) for name, plan in topology.topics.items()}
    compact = {"cleanup.policy": "compact"}
    assert roles == {
        "shop-customers-changelog": ("changelog", 6, compact),
        "shop-regions-changelog": ("changelog", 3, compact),
        "shop-totals-changelog": ("changelog", 6, compact),
        "shop-totals-closed": ("closed", 6, {}),
        "fx-rates": ("table-source", 3, compact),
        "orders": ("source", 6, {}),
        "shop-by-customer-repartition": ("repartition", 6, {"retention.ms": "-1"}),  # events in transit
        "quotes": ("source", 3, {}),
        "alerts": ("sink", 3, {}),
        "shop-by_customer-dlq": ("dlq", 3, {}),
        "shop-watch-dlq": ("dlq", 3, {}),
        "shop-convert-dlq": ("dlq", 3, {}),
        "shop-replies": ("replies", 3, {}),
    }
    assert topology.reads == {
        "by_customer": ["orders", "shop-by-customer-repartition"],
        "watch": ["shop-totals-closed"],
        "convert": ["quotes"],
    }
    assert topology.undeclared == {}
    line = by_customer_line()
    assert [(g.topics, g.why) for g in topology.copartitioned] == [
        (("shop-totals-changelog", "shop-totals-closed"),  # checked, never followed (settles=False)
         "table 'totals' sends the final results of its partition p to partition p of 'shop-totals-closed'"),
        (("shop-by-customer-repartition", "shop-customers-changelog"),
         "agent 'by_customer' joins stream 'shop-by-customer-repartition' with table 'customers'"),
        (("quotes", "fx-rates"), "agent 'convert' joins stream 'quotes' with table 'rates'"),
        (("shop-totals-changelog", "shop-by-customer-repartition"),  # its code writes `totals` by key
         f"table 'totals' is used by key in agent 'by_customer' (test_topology.py:{line}), which "
         "processes the events of 'shop-by-customer-repartition'"),
    ]
    assert {topic: list(map(str, by)) for topic, by in topology.writes.items()} == {
        "shop-by-customer-repartition": ["agent by_customer, which forwards its stream to it"],
        "alerts": ["agent watch, whose sink it is"]}
    assert topology.table_users == {"totals": ["by_customer"], "customers": ["by_customer"],
                                    "rates": ["convert"]}  # (read by the joins)
    assert topology.joins == {"by_customer": ["customers"], "convert": ["rates"]}
    # The repartition topic is typed like its source, and a worker gets the very same Topic object.
    worker = engine.Worker(app, app.settings())
    repartition = worker._internal_topic("by-customer-repartition", None)
    assert repartition is worker.topology.topics["shop-by-customer-repartition"].topic
    assert repartition.value_type is dict


def by_customer_line() -> int:
    """The line of `shop`'s by_customer agent that writes `totals`."""
    source = inspect.getsource(shop).splitlines()
    first = inspect.getsourcelines(shop)[1]
    return first + next(n for n, text in enumerate(source) if "totals[order" in text)


def test_the_declaration_run_is_a_step_of_its_own_and_the_topology_consumes_it():
    app = shop()
    declared = declare(app)
    pipeline = declared.agents["by_customer"]
    assert [t.name for t in pipeline.internal] == ["shop-by-customer-repartition"]
    assert [t.name for t in pipeline.reads] == ["shop-by-customer-repartition"]
    assert [(t.name, table.name) for t, table in pipeline.joins] == [
        ("shop-by-customer-repartition", "customers")]
    assert declared.agents["watch"].internal == declared.agents["watch"].reads == []
    built = build_topology(app, app.settings(), declared)
    again = build_topology(app, app.settings())
    assert {n: (p.role, p.partitions) for n, p in built.topics.items()} == {
        n: (p.role, p.partitions) for n, p in again.topics.items()}
    assert built.reads == again.reads


def test_an_agent_that_awaits_before_iterating_is_declared_later():
    app = engine.App("late", broker="memory://x")

    @app.agent(app.topic("in"))
    async def waits(stream):
        await asyncio.sleep(0)  # needs a running loop: the declaration run has none
        async for _ in stream.group_by(lambda v: v, name="again"):
            pass

    topology = build_topology(app, app.settings())
    assert "waits" in topology.undeclared
    assert "late-again-repartition" not in topology.topics


def test_check_names_each_mismatch_with_counts_and_what_to_do():
    app = shop()
    topology = build_topology(app, app.settings())
    counts = {name: plan.partitions for name, plan in topology.topics.items()}
    configs = {"fx-rates": {"cleanup.policy": "compact"}}
    topology.check(counts, configs)  # as planned: fits

    with pytest.raises(TopologyError) as raised:
        topology.check({**counts, "orders": 2, "quotes": 1}, {"fx-rates": {"cleanup.policy": "delete"}})
    assert str(raised.value) == (
        "the topology does not fit the broker: "
        "topic 'fx-rates' is the source of table 'rates' but its cleanup.policy is 'delete', not compact: "
        "old keys would be deleted by retention and the table would lose them on recovery; set "
        "cleanup.policy=compact on the topic; "
        "topic 'orders' has 2 partitions, but the app declares partitions=6: change the declaration, or "
        "recreate the topic with 6 partitions; "
        "agent 'convert' joins stream 'quotes' with table 'rates', so their topics must have the same number "
        "of partitions, but 'quotes' has 1, 'fx-rates' has 3; declare the same partitions= on both, or "
        "recreate the smaller one (and re-key with group_by if the source cannot change)"
    )


async def counting_worker(app_id: str, words_partitions: int, hidden: bool = False,
                          made: dict[str, int] | None = None) -> tuple[engine.App, engine.Worker, str]:
    """A started worker counting words into a table, over a `words` topic made beforehand (as a team makes
    its input topics) with `words_partitions`, with `topic_partitions` 4; the topics in `made` exist too.
    `hidden`: the agent reaches the table through a dict, where the topology cannot see that it writes it
    (engine.topology.uses): only the table's first write finds out."""
    url = testing.memory_url()
    broker = testing.broker_for(url)
    broker.create_topic("words", words_partitions)
    for name, count in (made or {}).items():
        broker.create_topic(name, count)
    app = engine.App(app_id, broker=url, topic_partitions=4)
    tables = {"counts": app.Table("counts", default=int, key_type=str)}

    @app.agent(app.topic("words", key_type=str))
    async def count(stream):
        async for word in stream:
            if hidden:
                tables["counts"][word] += 1
            else:
                counts[word] += 1

    counts = tables["counts"] if not hidden else None
    worker = engine.Worker(app, app.settings({"commit_interval": 0.05}))
    try:
        await worker.start()
    except BaseException:
        await worker.stop()
        raise
    return app, worker, url


async def test_a_table_takes_the_partition_count_of_the_topic_that_writes_it():
    app, worker, url = await counting_worker("follows", 6)
    try:
        assert len(testing.broker_for(url).topics["follows-counts-changelog"]) == 6
        words = [f"w{n % 9}" for n in range(60)]
        for word in words:
            await app.topics["words"].send(key=word, value=word)
        counts = app.tables["counts"]
        await testing.eventually(lambda: dict(counts.items()) == dict(Counter(words)))
    finally:
        await worker.stop()


async def refused_at_start(app: engine.App) -> str:
    """What the TopologyError a worker of `app` refuses to start with says."""
    worker = engine.Worker(app, app.settings())
    with pytest.raises(TopologyError) as raised:
        await worker.start()
    await worker.stop()
    return str(raised.value)


async def test_a_table_written_from_topics_of_other_counts_is_refused_at_start():
    url = testing.memory_url()
    testing.broker_for(url).create_topic("sales", 6)
    testing.broker_for(url).create_topic("returns", 2)
    app = engine.App("two", broker=url)
    stock = app.Table("stock", default=int, key_type=str)

    @app.agent(app.topic("sales", key_type=str))
    async def sell(stream):
        async for sku in stream:
            stock[sku] -= 1

    @app.agent(app.topic("returns", key_type=str))
    async def take_back(stream):
        async for sku in stream:
            stock[sku] += 1

    refused = await refused_at_start(app)
    assert re.fullmatch(
        r"the topology does not fit the broker: table 'stock' is used by key in agent 'sell' "
        r"\(test_topology\.py:\d+\), agent 'take_back' \(test_topology\.py:\d+\), which process the "
        r"events of 'sales', 'returns', so their topics must have the same number of partitions, but 'sales' "
        r"has 6, 'returns' has 2; declare the same partitions= on both, or recreate the smaller one \(and "
        r"re-key with group_by if the source cannot change\)", refused)
    assert "two-stock-changelog" not in testing.broker_for(url).topics, "refused before creating it"


async def test_a_changelog_made_with_another_count_is_refused_at_start_naming_the_reset():
    with pytest.raises(TopologyError) as raised:
        await counting_worker("made", 6, made={"made-counts-changelog": 4})
    assert str(raised.value).startswith(
        "the topology does not fit the broker: table 'counts' is used by key in agent 'count' (test_topology")
    assert str(raised.value).endswith(
        "which processes the events of 'words', so their topics must have the same number of partitions, "
        "but 'made-counts-changelog' has 4, 'words' has 6; 'made-counts-changelog' was created by engine "
        "before, with another count: `engine reset -A <module>:app --execute` (app 'made') deletes the "
        "app's internal topics and local state, and the next start creates them with 6 partitions and "
        "processes the input again")


async def test_a_table_written_from_a_topic_with_another_partition_count_stops_the_worker():
    app, worker, url = await counting_worker("cp", 1, hidden=True)
    await app.topics["words"].send(key="a", value="a")
    with pytest.raises(engine.WorkerFailed) as raised:
        await asyncio.wait_for(worker.run_until_stopped(), 5)
    assert str(raised.value).endswith(
        "agent 'count' cannot run: table 'counts' has 4 partitions (topic 'cp-counts-changelog') but is "
        "written from events of topic 'words', which has 1: a table and every topic whose events write it "
        "must have the same number of partitions; re-key the stream with group_by(...) (its repartition "
        "topic gets 4), or recreate 'words' with 4 partitions"
    )
    dlq = testing.broker_for(url).topics["cp-count-dlq"]
    assert sum(len(p) for p in dlq) == 0, "a topology error is not the record's fault: no dead letter"


async def test_a_record_of_a_partition_the_table_does_not_have_stops_the_worker_and_stays_uncommitted():
    app, worker, url = await counting_worker("cp6", 6, hidden=True)
    broker = testing.broker_for(url)
    for _ in range(20):  # partition 5 first: its reads meet a table partition that does not exist
        await app.topics["words"].send(key="a", value="a", partition=5)
    with pytest.raises(engine.WorkerFailed) as raised:
        await asyncio.wait_for(worker.run_until_stopped(), 5)
    assert "table 'counts' has 4 partitions" in str(raised.value)
    assert "written from events of topic 'words', which has 6" in str(raised.value)
    assert sum(len(p) for p in broker.topics["cp6-count-dlq"]) == 0, "nothing sent to the dead letters"
    assert broker.groups["cp6"].committed.get(TP("words", 5)) is None, "the records stay uncommitted"


async def test_a_source_table_over_a_topic_that_is_not_compacted_is_refused_at_start():
    url = testing.memory_url()
    testing.broker_for(url).create_topic("prices", 4, {"cleanup.policy": "delete"})
    app = engine.App("st", broker=url)
    app.Table("prices", source_topic="prices", key_type=str)
    worker = engine.Worker(app, app.settings())
    with pytest.raises(TopologyError, match=r"topic 'prices' is the source of table 'prices' but its "
                                            r"cleanup\.policy is 'delete', not compact"):
        await worker.start()
    await worker.stop()


async def test_a_versioned_table_over_a_topic_that_may_compact_its_history_away_is_refused_at_start():
    """Its versions of one key are the topic's records of that key: min.compaction.lag.ms must cover its
    history (a topic engine creates gets it)."""
    url = testing.memory_url()
    broker = testing.broker_for(url)
    broker.create_topic("prices", 2, {"cleanup.policy": "compact", "min.compaction.lag.ms": "59999"})
    app = engine.App("vst", broker=url)
    app.Table("prices", source_topic="prices", key_type=str).versioned(history=60)
    worker = engine.Worker(app, app.settings())
    with pytest.raises(TopologyError, match=r"topic 'prices' is the source of versioned table 'prices', "
                                            r"whose history is 60 s, but its min\.compaction\.lag\.ms is "
                                            r"59999"):
        await worker.start()
    await worker.stop()
    app = engine.App("vst2", broker=url)
    app.Table("feed", source_topic="feed", key_type=str).versioned(history=60)
    async with testing.running(app):
        assert broker.configs["feed"]["min.compaction.lag.ms"] == "60000"  # (made by engine: it fits)


def test_internal_topics_are_typed_like_their_stream_unless_told():
    app = engine.App("typed", broker="memory://x")
    orders = app.topic("orders", key_type=str, value_type=dict)

    @app.agent(orders)
    async def route(stream):
        async for _ in stream.through("passed").group_by(lambda o: o["n"], name="by-n", key_type=int):
            pass

    topics = build_topology(app, app.settings()).topics
    passed, by_n = topics["typed-passed"].topic, topics["typed-by-n-repartition"].topic
    assert (passed.key_type, passed.value_type) == (str, dict)  # a through keeps the key's codec
    assert (by_n.key_type, by_n.value_type) == (int, dict)


async def test_a_pipeline_declared_only_at_run_time_still_delivers():
    """An agent that awaits before iterating: its group_by topic is created, routed and sent to when it
    gets there (the topology could not declare it)."""
    url = testing.memory_url()
    app = engine.App("late-run", broker=url)
    orders = app.topic("orders", key_type=str, value_type=dict)
    seen: list = []

    @app.agent(orders)
    async def regroup(stream):
        await asyncio.sleep(0)
        async for customer, order in stream.group_by(lambda o: o["customer"], name="by-customer").items():
            seen.append((customer, order["id"]))

    async with testing.running(app):
        for n in range(6):
            await orders.send(key=f"order-{n}", value={"id": n, "customer": f"c{n % 2}"})
        await testing.eventually(lambda: len(seen) == 6, 10)
    assert sorted(seen) == sorted((f"c{n % 2}", n) for n in range(6))
    assert testing.broker_for(url).topics["late-run-by-customer-repartition"], "created, not auto-created"


async def test_a_closed_topic_made_beforehand_with_another_count_is_refused_at_start():
    """A reader of a windowed table's closed topic before the first worker made it has the broker make it with
    its default count: the worker refuses to start, naming both counts and the reset, rather than failing the
    first checkpoint that sends partition 3's final results."""
    url = testing.memory_url()
    broker = testing.broker_for(url)
    broker.create_topic("clicks", 4)
    broker.create_topic("made-per-minute-closed", 1)
    app = engine.App("made", broker=url)
    per_minute = app.Table("per-minute", default=int, key_type=str).tumbling(60)
    per_minute.closed()

    @app.agent(app.topic("clicks", key_type=str))
    async def count(stream):
        async for user in stream:
            per_minute[user] += 1

    refused = await refused_at_start(app)
    assert ("table 'per-minute' sends the final results of its partition p to partition p of "
            "'made-per-minute-closed', so their topics must have the same number of partitions, but "
            "'made-per-minute-changelog' has 4, 'made-per-minute-closed' has 1") in refused
    assert "`engine reset -A <module>:app --execute`" in refused
