"""Streams, agents, sinks, ask, timers and error policies on the in-memory broker."""

import asyncio
from dataclasses import dataclass

import pytest

import engine
from engine import testing
from engine.events import TP


def app_on_memory(name: str = "t", **settings) -> tuple[engine.App, str]:
    url = testing.memory_url()
    return engine.App(name, broker=url, **settings), url


async def test_filter_map_enumerate_and_items_keep_order_per_key():
    app, _ = app_on_memory()
    numbers = app.topic("numbers", key_type=str, value_type=int)
    seen: list = []

    @app.agent(numbers)
    async def evens(stream):
        async for index, (key, value) in stream.filter(lambda n: n % 2 == 0).map(
            lambda n: n * 10
        ).items().enumerate():
            seen.append((index, key, value))

    async with testing.running(app):
        for n in range(10):
            await numbers.send(key="k", value=n)
        await testing.eventually(lambda: len(seen) == 5)
    assert seen == [(i, "k", n * 10) for i, n in enumerate(range(0, 10, 2))]


async def test_async_predicates_and_events():
    app, _ = app_on_memory()
    topic = app.topic("t", key_type=str, value_type=int)
    got: list = []

    async def is_big(n: int) -> bool:
        await asyncio.sleep(0)
        return n > 2

    @app.agent(topic)
    async def agent(stream):
        async for event in stream.filter(is_big).events():
            got.append((event.topic, event.key, event.value, event.offset >= 0))

    async with testing.running(app):
        for n in range(5):
            await topic.send(key="a", value=n)
        await testing.eventually(lambda: len(got) == 2)
    assert got == [("t", "a", 3, True), ("t", "a", 4, True)]


async def test_take_batches_by_size_and_by_time_and_commits_only_whole_batches():
    app, _ = app_on_memory()
    topic = app.topic("t", key_type=str, value_type=int, partitions=1)
    batches: list[list[int]] = []
    release = asyncio.Event()

    @app.agent(topic)
    async def agent(stream):
        async for batch in stream.take(3, within=0.1):
            batches.append(batch)
            if len(batches) == 2:
                await release.wait()

    async with testing.running(app) as worker:
        for n in range(5):
            await topic.send(key="k", value=n)
        await testing.eventually(lambda: len(batches) == 2)
        assert batches == [[0, 1, 2], [3, 4]], "the short batch comes out after `within`"
        await asyncio.sleep(0.15)
        tracker = worker.conductor.leases.current[TP("t", 0)]
        assert tracker.committable() in (None, 3), "the second batch is still being processed"
        release.set()
        await topic.send(key="k", value=5)
        await testing.eventually(lambda: len(batches) == 3)
        await testing.eventually(lambda: tracker.committed == 6)  # [5] done once the next is asked for


async def test_group_by_keeps_the_event_time_and_headers():
    """The repartitioned record's timestamp is the source's event time (its extractor applied), and its
    headers travel with it, so windows after a group_by are on event time."""
    app, _url = app_on_memory("rpt")
    orders = app.topic("orders", key_type=str, value_type=dict, timestamp=lambda o: o["at"])
    seen: list[tuple[int, list]] = []

    @app.agent(orders)
    async def regroup(stream):
        async for event in stream.group_by(lambda o: o["customer"], name="by-customer").events():
            seen.append((event.record.timestamp, list(event.headers)))

    async with testing.running(app):
        await orders.send(key="o1", value={"customer": "c1", "at": 1_000_000.25},
                          headers=[("trace", b"abc")])
        await testing.eventually(lambda: len(seen) == 1)
    assert seen == [(1_000_000_250, [("trace", b"abc")])]


async def test_through_and_group_by_repartition():
    app, url = app_on_memory("rp")
    orders = app.topic("orders", key_type=str, value_type=dict)
    audited = app.topic("audited", key_type=str, value_type=dict)
    by_customer: dict[str, list] = {}
    partition_of: dict[str, set[int]] = {}

    @app.agent(orders, concurrency=2)
    async def regroup(stream):
        regrouped = stream.through(audited).group_by(lambda o: o["customer"], name="by-customer")
        async for event in regrouped.events():
            by_customer.setdefault(event.key, []).append(event.value["id"])
            partition_of.setdefault(event.key, set()).add(event.partition)

    async with testing.running(app):
        for i in range(40):
            await orders.send(key=f"order-{i}", value={"id": i, "customer": f"c{i % 3}"})
        await testing.eventually(lambda: sum(map(len, by_customer.values())) == 40)
    broker = testing.broker_for(url)
    assert "rp-by-customer-repartition" in broker.topics
    assert sum(len(p) for p in broker.topics["audited"]) == 40
    assert sorted(by_customer) == ["c0", "c1", "c2"]
    assert sorted(i for ids in by_customer.values() for i in ids) == list(range(40))
    for customer, ids in by_customer.items():
        assert {i % 3 for i in ids} == {int(customer[1:])}
        assert len(partition_of[customer]) == 1, "one key, one partition"


@dataclass
class Question:
    a: int
    b: int


async def test_ask_gets_the_yielded_answer_and_sinks_receive_it():
    app, _ = app_on_memory()
    results = app.topic("results", value_type=int)
    sunk: list[int] = []
    called: list[int] = []

    async def remember(value: int) -> None:
        called.append(value)

    @app.agent(results)
    async def collect(stream):
        async for value in stream:
            sunk.append(value)

    @app.agent(app.topic("questions", value_type=Question), sink=[results, remember])
    async def adder(stream):
        async for q in stream:
            yield q.a + q.b

    async with testing.running(app):
        answers = await asyncio.gather(*(adder.ask(Question(i, i), timeout=5) for i in range(5)))
        await adder.send(Question(100, 1))
        await testing.eventually(lambda: len(sunk) == 6)
    assert answers == [0, 2, 4, 6, 8]
    assert sorted(sunk) == [0, 2, 4, 6, 8, 101]
    assert sorted(called) == sorted(sunk)


async def test_a_yielded_result_keeps_the_key_of_its_event():
    app, _ = app_on_memory()
    totals = app.topic("totals", key_type=str, value_type=int)
    received: list[tuple[str, int]] = []

    @app.agent(totals)
    async def collect(stream):
        async for key, value in stream.items():
            received.append((key, value))

    @app.agent(app.topic("amounts", key_type=str, value_type=int), sink=[totals])
    async def double(stream):
        async for value in stream:
            yield value * 2

    async with testing.running(app):
        await double.send(3, key="ada")
        await testing.eventually(lambda: len(received) == 1)
    assert received == [("ada", 6)]


async def test_ask_times_out_with_a_clear_error():
    app, _ = app_on_memory()

    @app.agent()
    async def silent(stream):
        async for _ in stream:
            pass

    async with testing.running(app):
        with pytest.raises(engine.AskTimeout, match=r"agent 'silent' did not reply within 0\.2s"):
            await silent.ask(1, timeout=0.2)


async def test_send_outside_a_worker_says_what_to_do():
    app, _ = app_on_memory()
    topic = app.topic("x")
    with pytest.raises(engine.NotRunning, match="not attached to a running worker"):
        await topic.send(value=1)


async def test_agent_errors_go_to_the_dlq_and_the_agent_goes_on():
    app, url = app_on_memory("dl")
    topic = app.topic("in", key_type=str, value_type=int)
    done: list[int] = []

    @app.agent(topic)
    async def fragile(stream):
        async for n in stream:
            if n == 3:
                raise RuntimeError("three is bad")
            done.append(n)

    async with testing.running(app) as worker:
        for n in range(6):
            await topic.send(key="k", value=n)
        testing.broker_for(url).append("in", b"k", b"not json", (), None)
        await topic.send(key="k", value=6)
        await testing.eventually(lambda: len(done) == 6)
        await testing.eventually(lambda: worker.conductor.leases.current[TP("in", _partition())]
                                 .committed == 8)
    assert done == [0, 1, 2, 4, 5, 6]
    dlq = [r for p in testing.broker_for(url).topics["dl-fragile-dlq"] for r in p]
    errors = {r.value: dict(r.headers) for r in dlq}
    assert set(errors) == {b"3", b"not json"}
    assert errors[b"3"]["engine-error"] == b"RuntimeError: three is bad"
    assert errors[b"not json"]["engine-error-type"] == b"DecodeError"
    assert errors[b"not json"]["engine-error"].startswith(b"DecodeError: in[%d]@6: cannot decode: not "
                                                          b"valid JSON" % _partition())
    assert errors[b"not json"]["engine-offset"] == b"6"


def _partition() -> int:
    from engine.partitioner import partition_for

    return partition_for(b"k", 4)


async def test_stop_policy_stops_the_worker_and_does_not_commit_the_failed_record():
    app, url = app_on_memory("st")
    topic = app.topic("in", key_type=str, value_type=int, partitions=1)

    @app.agent(topic, on_error="stop")
    async def strict(stream):
        async for n in stream:
            if n == 2:
                raise ValueError("no twos")

    worker = engine.Worker(app, app.settings({"commit_interval": 0.01}))
    await worker.start()
    for n in range(4):
        await topic.send(key="k", value=n)
    with pytest.raises(engine.WorkerFailed, match=r"agent 'strict' failed on in\[0\]@2"):
        await asyncio.wait_for(worker.run_until_stopped(), 5)
    committed = testing.broker_for(url).groups["st"].committed.get(TP("in", 0))
    assert committed == 2, "0 and 1 are done; the failed record 2 must stay uncommitted"


async def test_crash_outside_a_record_restarts_then_gives_up_past_the_limit():
    app, _ = app_on_memory("cr", agent_max_restarts=2)
    starts: list[int] = []

    @app.agent()
    async def broken(stream):
        starts.append(1)
        raise RuntimeError("cannot even start")
        async for _ in stream:  # pragma: no cover
            pass

    worker = engine.Worker(app, app.settings())
    assert len(starts) == 1, "the topology's declaration run calls the function once, up to its first pull"
    starts.clear()
    await worker.start()
    with pytest.raises(engine.WorkerFailed, match="crashed more than 2 times"):
        await asyncio.wait_for(worker.run_until_stopped(), 5)
    assert len(starts) == 3


async def test_timer_runs_and_a_crashing_timer_is_restarted():
    app, _ = app_on_memory()
    ticks: list[int] = []

    @app.timer(0.01)
    async def tick():
        ticks.append(1)
        if len(ticks) == 2:
            raise RuntimeError("flaky")

    async with testing.running(app) as worker:
        await testing.eventually(lambda: len(ticks) >= 4)
        assert worker.timers.restarts == 1


async def test_two_workers_split_partitions_and_rebalance_on_leave():
    url = testing.memory_url()
    seen: dict[str, list[int]] = {"a": [], "b": []}

    def make(label: str) -> tuple[engine.App, engine.Topic]:
        app = engine.App("grp", broker=url)
        topic = app.topic("nums", key_type=str, value_type=int)

        @app.agent(topic)
        async def record(stream):
            async for n in stream:
                seen[label].append(n)

        return app, topic

    app_a, topic_a = make("a")
    app_b, _ = make("b")
    async with testing.running(app_a, broker=url) as worker_a:
        async with testing.running(app_b, broker=url) as worker_b:
            await testing.eventually(lambda: worker_a.conductor.consumer.assignment()
                                     and worker_b.conductor.consumer.assignment())
            await asyncio.sleep(0.05)
            for n in range(100):
                await topic_a.send(key=str(n), value=n)
            await testing.eventually(lambda: len(seen["a"]) + len(seen["b"]) >= 100)
            assert seen["a"]
            assert seen["b"]
        for n in range(100, 200):
            await topic_a.send(key=str(n), value=n)
        await testing.eventually(lambda: set(range(100, 200)) <= set(seen["a"]))
    assert set(seen["a"]) | set(seen["b"]) == set(range(200))


async def test_two_agents_on_one_topic_each_decode_with_their_own_codecs():
    app, url = app_on_memory("two")
    as_json = app.topic("shared", key_type=str, value_type=dict, partitions=1)
    as_bytes = engine.Topic("shared", key_type=str, value_serializer="raw", partitions=1)
    parsed: list = []
    raw: list = []

    @app.agent(as_json)
    async def parse(stream):
        async for value in stream:
            parsed.append(value)

    @app.agent(as_bytes)
    async def keep(stream):
        async for value in stream:
            raw.append(value)

    async with testing.running(app) as worker:
        await as_json.send(key="k", value={"a": 1})
        testing.broker_for(url).append("shared", b"k", b"not json", (), 0)
        await testing.eventually(lambda: len(raw) == 2 and len(parsed) == 1)
        await testing.eventually(lambda: worker.conductor.leases.current[TP("shared", 0)].committed == 2)
    assert parsed == [{"a": 1}]
    assert raw == [b'{"a":1}', b"not json"]
    dlq = [r for p in testing.broker_for(url).topics["two-parse-dlq"] for r in p]
    assert [r.value for r in dlq] == [b"not json"]
    assert dict(dlq[0].headers)["engine-error"].startswith(b"DecodeError: shared[0]@1: cannot decode")


async def test_a_dead_background_task_stops_the_worker_with_its_error():
    """The reply reader is a background task of the worker; if it dies the worker must not look healthy."""
    app = engine.App("dead-task", broker=testing.memory_url())

    async def broken(timeout: float, max_records: int) -> dict:
        raise RuntimeError("reply reader broke")

    worker = engine.Worker(app, app.settings({}))
    worker.replies.consumer.getmany = broken  # type: ignore[method-assign]
    await worker.start()
    with pytest.raises(engine.WorkerFailed, match="reply reader broke"):
        await asyncio.wait_for(worker.run_until_stopped(), 5)


@pytest.mark.parametrize(("reset", "expected"), [("earliest", ["before", "after"]), ("latest", ["after"])])
async def test_a_new_group_starts_where_auto_offset_reset_says(reset, expected):
    app, url = app_on_memory(f"reset-{reset}")
    notes = app.topic("notes", value_type=str)
    seen: list[str] = []

    @app.agent(notes)
    async def read(stream):
        async for note in stream:
            seen.append(note)

    broker = testing.broker_for(url)
    broker.create_topic("notes", 4)
    broker.append("notes", None, b"before", (), 0)  # on the topic before the group ever read it
    async with testing.running(app, auto_offset_reset=reset) as worker:
        await testing.eventually(lambda: len(worker.conductor.leases.current) == 4)
        await notes.send(value="after")
        await testing.eventually(lambda: "after" in seen)
    assert seen == expected


async def test_a_record_whose_dead_letter_cannot_be_sent_is_not_logged_as_sent(caplog):
    """A dead letter into a transaction the broker aborted (or a partition that moved) never arrives: the log
    says so, not "record sent to" the DLQ."""
    from engine.errors import TransactionAborted
    from engine.processing.runner import AgentRunner

    class Aborted:
        def for_partition(self, number: int) -> "Aborted":
            return self

        async def send(self, *args: object, **kwargs: object) -> None:
            raise TransactionAborted("cannot send to 'x-count-dlq': the transaction was aborted")

    app, _ = app_on_memory("dlqlog")

    @app.agent(app.topic("words"))
    async def count(stream):
        async for _ in stream:
            pass

    runner = AgentRunner(count, settings=app.settings(), producer=Aborted(),  # type: ignore[arg-type]
                         subscribe=lambda *_: None, internal_topic=None,  # type: ignore[arg-type]
                         dlq=app.topic("dlqlog-count-dlq"))

    @dataclass
    class Record:
        topic: str = "words"
        partition: int = 0
        offset: int = 7
        key: bytes | None = None
        value: bytes | None = b"1"
        headers: tuple[tuple[str, bytes], ...] = ()
        timestamp: int = 0

    await runner.handle_error(TP("words", 0), Record(), ValueError("bad"))  # type: ignore[arg-type]
    messages = [r.getMessage() for r in caplog.records]
    assert any("not sent to dlqlog-count-dlq: cannot send to 'x-count-dlq': the transaction was aborted"
               in m for m in messages), messages
    assert not any("record sent to" in m for m in messages)


async def test_an_event_that_arrives_while_the_checkpoint_gate_is_closed_waits_for_it_to_open():
    """Exactly-once: an agent waiting on an empty mailbox is not inside an event, so a checkpoint does not
    wait for it; an event handed to it while the cut is taken (the fetch loop was past its own look at the
    gate, waiting for room in another agent's mailbox) must not start before the gate opens, or what it
    sends would commit with the cut while its offset does not (a duplicate after a crash)."""
    from engine.events import Event
    from engine.transport.memory_broker import MemoryRecord

    app, _ = app_on_memory("gate", processing_guarantee="exactly_once")
    started: list[bool] = []
    worker_box: list[engine.Worker] = []

    @app.agent(app.topic("words"))
    async def count(stream):
        async for _ in stream:
            started.append(worker_box[0].guarantee.quiesce.closed)

    async with testing.running(app, commit_interval=3600) as worker:
        worker_box.append(worker)
        gate = worker.guarantee.quiesce
        await app.topics["words"].send(value="first", partition=0)
        await testing.eventually(lambda: len(started) == 1)
        assert await gate.pause(1.0) is True  # the agent waits on its mailbox: not inside an event
        lease = worker.conductor.leases.current[TP("words", 0)]
        lease.track(1)
        record = MemoryRecord("words", 0, 1, 0, None, b'"during the cut"', ())
        during = Event(lease.tp, record, None, "during the cut", lease)
        worker.runners[0].mailbox("words", 0).put_many_nowait([during])
        await asyncio.sleep(0.1)
        assert len(started) == 1, "the agent started an event inside the cut"
        gate.resume()
        await testing.eventually(lambda: len(started) == 2)
    assert started == [False, False]


async def test_the_current_event_is_the_agents_own_in_each_instance_and_in_the_tasks_it_starts():
    """current_event() is the event the agent instance is processing: outside agents None; in each instance
    its own; in a task the agent started, the agent's event as the agent moves on (docs/tables.md)."""
    from engine.streams.current import current_event

    app, _ = app_on_memory()
    topic = app.topic("t", key_type=str, value_type=int, partitions=2)
    seen: list = []
    second = asyncio.Event()
    spawned: list = []

    async def later() -> None:
        await second.wait()
        event = current_event()
        spawned.append(None if event is None else event.value)

    @app.agent(topic, concurrency=2)
    async def agent(stream):
        async for value in stream:
            event = current_event()
            assert event is stream.current_event
            seen.append((event.key, event.partition, value))
            if value == 0:
                spawned.append(asyncio.create_task(later()))
            elif value == 1:
                second.set()
                await asyncio.sleep(0.01)  # the started task reads while this event is still current

    assert current_event() is None
    async with testing.running(app):
        await topic.send(key="a", value=0, partition=0)
        await topic.send(key="a", value=1, partition=0)
        await topic.send(key="b", value=2, partition=1)
        await testing.eventually(lambda: len(seen) == 3 and len(spawned) == 2)
    assert sorted(seen) == [("a", 0, 0), ("a", 0, 1), ("b", 1, 2)]
    assert spawned[1] == 1  # the agent's event when the task read it, not 0 (the one it was started in)
    assert current_event() is None


def test_the_events_dropped_of_a_partition_that_moved_are_said_once_per_lease(caplog):
    """A partition that moves (or whose task's transaction is aborted) drops every event of it the agent
    holds the same way: one line for them per assignment of the partition, not one per event."""
    from engine.errors import PartitionMigrated
    from engine.events import Event
    from engine.processing.runner import AgentRunner
    from engine.tasks.leases import Lease

    caplog.set_level("INFO")
    app, _ = app_on_memory("drops")

    @app.agent(app.topic("words"))
    async def count(stream):
        async for _ in stream:
            pass

    runner = AgentRunner(count, settings=app.settings(), producer=None,  # type: ignore[arg-type]
                         subscribe=lambda *_: None, internal_topic=None,  # type: ignore[arg-type]
                         dlq=app.topic("drops-count-dlq"))

    @dataclass
    class Record:
        partition: int
        offset: int
        topic: str = "words"
        key: bytes | None = None
        value: bytes | None = b"1"
        headers: tuple[tuple[str, bytes], ...] = ()
        timestamp: int = 0

    first, second, other = Lease(TP("words", 0), 1), Lease(TP("words", 0), 2), Lease(TP("words", 1), 1)
    aborted = PartitionMigrated("cannot send to 'drops-echo': the transaction was aborted")
    for lease, partition, offsets in ((first, 0, range(5, 500)), (other, 1, range(3)), (second, 0, range(9))):
        for offset in offsets:
            runner._say_dropped(Event(lease.tp, Record(partition, offset), None, None, lease), aborted)
    said = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert said == [
        f"agent count dropped words[{partition}]@{offset}, and the events after it it holds of that "
        "partition: cannot send to 'drops-echo': the transaction was aborted"
        for partition, offset in ((0, 5), (1, 0), (0, 0))]


async def test_an_agent_stuck_inside_an_event_is_named_with_the_line_it_waits_on(caplog):
    app, _ = app_on_memory("stuck", stuck_event_warning=0.2)
    topic = app.topic("t", key_type=str, value_type=int, partitions=1)
    never = asyncio.Event()

    async def call_that_never_answers() -> None:
        await never.wait()

    @app.agent(topic)
    async def slow(stream):
        async for _ in stream:
            await call_that_never_answers()  # stuck here

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "has been processing" in r.getMessage()]

    async with testing.running(app):
        await topic.send(key="k", value=1)
        await testing.eventually(lambda: len(warned()) >= 2, 20)
        never.set()  # (the worker stops without waiting out its shutdown timeout)
    first, again = warned()[:2]
    assert first.startswith("agent slow has been processing t[0]@0 for ")
    assert "it waits at (innermost last):" in first
    assert "await call_that_never_answers()  # stuck here" in first
    assert "await never.wait()" in first
    assert "waits at" not in again


async def test_an_event_stuck_in_a_group_bys_forwarding_is_named_with_the_line_it_waits_on(caplog):
    app, _ = app_on_memory("stuck-forward", stuck_event_warning=0.2)
    topic = app.topic("t", key_type=str, value_type=int, partitions=1)
    never = asyncio.Event()

    async def checked_elsewhere(value: int) -> bool:
        await never.wait()  # the forwarding waits here
        return True

    @app.agent(topic)
    async def regroup(stream):
        async for _ in stream.filter(checked_elsewhere).group_by(str, name="by-value", key_type=str):
            pass

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "has been processing" in r.getMessage()]

    async with testing.running(app):
        await topic.send(key="k", value=1)
        await testing.eventually(lambda: len(warned()) >= 1, 20)
        never.set()
    first = warned()[0]
    assert "and the forwarding into its stream's topic, in a task of its own:" in first
    assert "await never.wait()  # the forwarding waits here" in first
