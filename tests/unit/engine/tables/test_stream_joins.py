"""Stream-stream windowed joins (`stream.join(topic, within=, grace=)`, `left_join`, `outer_join`) on the test
driver: every result hand-computed from the input, with out-of-order and late records, a record alone emitted
only once its wait is over, duplicates at one time, and a restart."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import engine
from engine import testing
from engine.fetch import dispatch
from engine.streams.current import current_event
from engine.tasks import release
from engine.testing import TestDriver
from engine.topology.declaration import declare
from engine.windows import WindowRange

if TYPE_CHECKING:
    import pytest

S = 1000  # ms


def join_app(how: str, within: float = 10, grace: float = 2,
             name: str = "joins") -> tuple[engine.App, Any, Any, Any]:
    """Orders joined with payments by order id, `how`; each result goes to `out` as [order, payment]."""
    app = engine.App(name, broker="memory://unused", topic_partitions=1)
    orders = app.topic("orders", key_type=str, value_type=str)
    payments = app.topic("payments", key_type=str, value_type=str)
    out = app.topic("matched", key_type=str, value_type=list)

    @app.agent(orders)
    async def match(stream: Any) -> None:
        joined = getattr(stream, f"{how}_join" if how != "inner" else "join")(payments, within=within,
                                                                              grace=grace)
        async for key, (order, payment) in joined.items():
            await out.send(key=key, value=[order, payment])

    return app, orders, payments, out


def results(driver: TestDriver, out: Any) -> list[tuple[str, list[Any]]]:
    return [(r.key, r.value) for r in driver.read(out)]


def test_an_inner_join_pairs_records_at_most_within_apart_either_way() -> None:
    app, orders, payments, out = join_app("inner")
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value="order-1", timestamp_ms=100 * S)
        driver.send(payments, key="o1", value="pay-a", timestamp_ms=105 * S)  # 5 s after: joins
        assert results(driver, out) == [("o1", ["order-1", "pay-a"])]
        driver.send(payments, key="o1", value="pay-b", timestamp_ms=111 * S)  # 11 s after: too far
        driver.send(payments, key="o2", value="pay-c", timestamp_ms=106 * S)  # another key
        assert results(driver, out) == []
        driver.send(orders, key="o1", value="order-2", timestamp_ms=101 * S)  # both payments within 10 s
        assert results(driver, out) == [("o1", ["order-2", "pay-a"]), ("o1", ["order-2", "pay-b"])]
        driver.send(payments, key="o1", value="pay-d", timestamp_ms=91 * S)  # before both: in time order
        assert results(driver, out) == [("o1", ["order-1", "pay-d"]), ("o1", ["order-2", "pay-d"])]


def test_a_left_join_emits_a_record_alone_only_when_its_wait_is_over() -> None:
    """within 10 s, grace 2 s: an order without payment is emitted alone once stream time passes its time
    + 12 s, when a record comes at stream time; a payment before that takes it out."""
    app, orders, payments, out = join_app("left")
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value="order-1", timestamp_ms=100 * S)
        driver.send(orders, key="o2", value="order-2", timestamp_ms=101 * S)
        driver.send(payments, key="zz", value="other", timestamp_ms=112 * S)  # 112 is not past 112
        assert results(driver, out) == []
        driver.send(payments, key="o2", value="pay-2", timestamp_ms=108 * S)  # o2 paid: out of the wait
        assert results(driver, out) == [("o2", ["order-2", "pay-2"])]
        driver.send(payments, key="zz", value="other", timestamp_ms=113 * S)  # past 112: o1 alone, keyed o1
        assert results(driver, out) == [("o1", ["order-1", None])]
        driver.send(orders, key="o3", value="order-3", timestamp_ms=90 * S)  # its wait (till 102) is over
        assert results(driver, out) == [("o3", ["order-3", None])]
        driver.send(payments, key="o1", value="pay-1", timestamp_ms=109 * S)  # late for o1, but it joins
        assert results(driver, out) == [("o1", ["order-1", "pay-1"])]


def test_an_outer_join_emits_either_side_alone() -> None:
    app, orders, payments, out = join_app("outer", within=5, grace=0)
    with TestDriver(app) as driver:
        driver.send(payments, key="p1", value="pay-1", timestamp_ms=100 * S)
        driver.send(orders, key="o1", value="order-1", timestamp_ms=103 * S)
        driver.send(orders, key="o1", value="order-1b", timestamp_ms=103 * S)  # two at one time
        driver.send(payments, key="o1", value="pay-o1", timestamp_ms=104 * S)
        assert results(driver, out) == [("o1", ["order-1", "pay-o1"]), ("o1", ["order-1b", "pay-o1"])]
        driver.send(orders, key="zz", value="later", timestamp_ms=106 * S)  # p1 waited till 105
        assert results(driver, out) == [("p1", [None, "pay-1"])]
        driver.send(orders, key="zz2", value="later", timestamp_ms=200 * S)
        assert sorted(results(driver, out)) == [("zz", ["later", None])]


def test_records_alone_wait_as_kafka_streams_makes_them_wait_and_a_late_partner_still_takes_one_out() -> None:
    """Kafka Streams' emitNonJoinedOuterRecords (within 10 s, grace 2 s: a record's window closes 12 s after
    it): a look goes through the waiting records of both sides in time order and stops once a record of each
    side is still open, remembering the time of the record it stopped at; the next look waits until stream
    time passed that time's window. So pay-b, whose own window closed at 117, still waits at 118, and the late
    order-b (at 104) joins it instead of finding it emitted alone."""
    app, orders, payments, out = join_app("outer")
    with TestDriver(app) as driver:
        driver.send(orders, key="a", value="order-a", timestamp_ms=100 * S)
        driver.send(payments, key="b", value="pay-b", timestamp_ms=105 * S)
        driver.send(orders, key="c", value="order-c", timestamp_ms=106 * S)
        driver.send(orders, key="d", value="order-d", timestamp_ms=107 * S)
        assert results(driver, out) == []
        driver.send(payments, key="z", value="pay-z", timestamp_ms=113 * S)  # a closed; b, c open: stops at d
        assert results(driver, out) == [("a", ["order-a", None])]
        driver.send(payments, key="y", value="pay-y", timestamp_ms=118 * S)  # not past d's window (119)
        assert results(driver, out) == []
        driver.send(orders, key="b", value="order-b", timestamp_ms=104 * S)  # late, yet pay-b still waits
        assert results(driver, out) == [("b", ["order-b", "pay-b"])]
        driver.send(payments, key="x", value="pay-x", timestamp_ms=130 * S)  # c, d and z closed; y open
        assert results(driver, out) == [("c", ["order-c", None]), ("d", ["order-d", None]),
                                         ("z", [None, "pay-z"])]


def test_a_result_has_the_later_time_of_its_pair_and_a_record_alone_its_own_as_kafka_streams_stamps_them(
) -> None:
    """The current event of a result (what a windowed table or `current_event().timestamp` reads) has the
    result's time: the later of its records' times, or the time of a record emitted alone."""
    app = engine.App("stamps", broker="memory://unused", topic_partitions=1)
    orders = app.topic("orders", key_type=str, value_type=str)
    payments = app.topic("payments", key_type=str, value_type=str)
    out = app.topic("stamped", key_type=str, value_type=list)

    @app.agent(orders)
    async def match(stream: Any) -> None:
        async for key, (order, payment) in stream.outer_join(payments, within=10, grace=0).items():
            event = current_event()
            assert event is not None
            await out.send(key=key, value=[order, payment, event.timestamp.timestamp()],
                           timestamp_ms=event.time_ms)

    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value="order-1", timestamp_ms=100 * S)
        driver.send(payments, key="o1", value="pay-a", timestamp_ms=95 * S)  # the order's time is later
        driver.send(payments, key="o1", value="pay-b", timestamp_ms=107 * S)  # the payment's is
        driver.send(payments, key="p9", value="pay-9", timestamp_ms=108 * S)  # waits, alone
        driver.send(orders, key="zz", value="order-z", timestamp_ms=140 * S)  # emits pay-9 alone
        assert [(r.key, r.value, r.timestamp_ms) for r in driver.read(out)] == [
            ("o1", ["order-1", "pay-a", 100], 100 * S), ("o1", ["order-1", "pay-b", 107], 107 * S),
            ("p9", [None, "pay-9", 108], 108 * S)]


def test_a_record_put_to_wait_again_at_the_same_time_is_emitted_alone_once() -> None:
    """order k@10 waits, pay@5 takes it out, and a second order k@10 (pay@5 past the retention by then)
    waits at the same key and time: the next look emits it alone, once (two entries of the wait, one
    record)."""
    app, orders, payments, out = join_app("left", within=5, grace=0)
    with TestDriver(app) as driver:
        driver.send(orders, key="k", value="order-1", timestamp_ms=10 * S)
        driver.send(payments, key="k", value="pay-5", timestamp_ms=5 * S)
        assert results(driver, out) == [("k", ["order-1", "pay-5"])]
        driver.send(payments, key="k2", value="pay-15", timestamp_ms=15 * S)  # not past 10's window (15)
        driver.send(orders, key="k", value="order-2", timestamp_ms=10 * S)
        assert results(driver, out) == []
        driver.send(payments, key="k3", value="pay-16", timestamp_ms=16 * S)
        assert results(driver, out) == [("k", ["order-2", None])]


def test_records_alone_of_one_time_go_in_the_order_of_their_keys_bytes() -> None:
    """Kafka Streams' outer store is ordered by time, side, then the key's bytes: b and a of one time are
    emitted a first, whatever order they came in."""
    app, orders, payments, out = join_app("left")
    with TestDriver(app) as driver:
        driver.send(orders, key="b", value="order-b", timestamp_ms=100 * S)
        driver.send(orders, key="a", value="order-a", timestamp_ms=100 * S)
        driver.send(payments, key="z", value="pay-z", timestamp_ms=113 * S)
        assert results(driver, out) == [("a", ["order-a", None]), ("b", ["order-b", None])]


def test_a_record_without_key_moves_the_joins_stream_time_too() -> None:
    """Kafka Streams advances a join's stream time with every record it is given, a record without key (which
    a left join emits alone at once) included: order-b at 150 is behind stream time (200), so no look is
    made (order-a still waits), and its own window (till 162) is over already: alone at once."""
    app, orders, _, out = join_app("left")
    with TestDriver(app) as driver:
        driver.send(orders, key="a", value="order-a", timestamp_ms=100 * S)
        driver.send(orders, key=None, value="order-x", timestamp_ms=200 * S)
        assert results(driver, out) == [(None, ["order-x", None])]
        driver.send(orders, key="b", value="order-b", timestamp_ms=150 * S)
        assert results(driver, out) == [("b", ["order-b", None])]


def test_records_past_the_retention_are_deleted_and_found_by_nobody() -> None:
    """within 10 s, grace 2 s: a stream's records are kept for 22 s of its own time."""
    app, orders, payments, out = join_app("inner")
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value="old", timestamp_ms=100 * S)
        driver.send(orders, key="o9", value="newer", timestamp_ms=122 * S)  # 100 is past 122 - 22
        driver.send(payments, key="o1", value="pay", timestamp_ms=105 * S)
        assert results(driver, out) == []
        assert driver.table("match-join-0-left") == {("o9", WindowRange(122, 122)): b"\x00\x00\x00\x05newer"}


def test_a_stream_join_needs_a_window_and_the_agents_own_stream() -> None:
    app = engine.App("joins-refused", broker="memory://unused", topic_partitions=1)
    orders = app.topic("orders", key_type=str, value_type=str)
    payments = app.topic("payments", key_type=str, value_type=str)

    @app.agent(orders)
    async def unwindowed(stream: Any) -> None:
        async for _ in stream.outer_join(payments, within=None):
            pass

    @app.agent(payments)
    async def filtered(stream: Any) -> None:
        async for _ in stream.filter(bool).join(orders, within=5):
            pass

    declared = declare(app).agents
    assert "within=" in (declared["unwindowed"].undeclared or "")
    assert "before filter, map" in (declared["filtered"].undeclared or "")


async def test_the_buffers_are_read_back_after_a_restart() -> None:
    """Memory stores: the second worker rebuilds both buffers and the waiting orders from the changelogs."""
    url = testing.memory_url()
    runs = [
        [("orders", "o1", "order-1", 100), ("orders", "o2", "order-2", 101)],
        # o1 is paid after the restart; o2's wait ends (past 113): alone
        [("payments", "o1", "pay-1", 104), ("payments", "zz", "x", 114)],
    ]
    expected = [[], [("o1", ["order-1", "pay-1"]), ("o2", ["order-2", None])]]
    for sent, wanted in zip(runs, expected, strict=True):
        app = engine.App("joins-restart", broker=url, store="memory://", topic_partitions=1,
                         commit_interval=0.05)
        orders = app.topic("orders", key_type=str, value_type=str)
        payments = app.topic("payments", key_type=str, value_type=str)
        got: list[tuple[str, list[Any]]] = []

        @app.agent(orders)
        async def match(stream: Any, got: list[Any] = got, payments: Any = payments) -> None:
            async for key, (order, payment) in stream.left_join(payments, within=10, grace=2).items():
                got.append((key, [order, payment]))

        async with testing.running(app) as worker:
            for topic, key, value, at in sent:
                await app.topics[topic].send(key=key, value=value, timestamp_ms=at * S)
            await testing.eventually(lambda got=got, wanted=wanted: got == wanted)
            await worker.checkpoint()
        assert got == wanted


def backlog_join(name: str, records: int, **settings: Any) -> tuple[engine.App, str, list[Any], list[Any]]:
    """An app whose agent joins orders with payments within 0.2 s (grace 0.1), on a memory broker where both
    streams are already in their topics (all of one, then the other's): the app, the broker's URL, the
    results as they come, and the results expected, counted here from the input."""
    url = testing.memory_url()
    app = engine.App(name, broker=url, store="memory://", topic_partitions=1, **settings)
    orders = app.topic("orders", key_type=str, value_type=int)
    payments = app.topic("payments", key_type=str, value_type=int)
    got: list[tuple[str, int, int]] = []

    @app.agent(orders)
    async def match(stream: Any) -> None:
        async for key, (order, payment) in stream.join(payments, within=0.2, grace=0.1).items():
            got.append((key, order, payment))
            await asyncio.sleep(0)

    left = [(f"k{n % 7}", 1_000_000 + n * 10) for n in range(records)]
    right = [(f"k{(n * 3) % 7}", 1_000_000 + n * 10 + 5) for n in range(records)]
    expected = sorted((kl, tl, tr) for kl, tl in left for kr, tr in right
                      if kl == kr and abs(tl - tr) <= 200)
    broker = testing.broker_for(url)
    for topic, pairs in ((orders, left), (payments, right)):
        broker.create_topic(topic.name, 1)
        for key, at in pairs:
            broker.append(topic.name, topic.key_codec.encode(key), topic.value_codec.encode(at), (), None,
                          timestamp_ms=at)
    return app, url, got, expected


async def test_a_join_over_a_backlog_takes_both_streams_in_timestamp_order_also_when_batches_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both streams are in their topics before the worker starts, and the agent's mailbox is small and parks
    a batch as soon as it is full (PARK_AFTER 0), the parked batch handed over only 5 ms after there is
    room: a parked batch of one stream must not be overtaken by the other's, or a record would find its
    partners already past the 0.5 s retention. Every result, counted here from the input."""
    monkeypatch.setattr(dispatch, "PARK_AFTER", 0.0)
    unpark = dispatch.Dispatcher._unpark

    async def late_unpark(self: dispatch.Dispatcher, *args: Any) -> None:
        await asyncio.sleep(0.005)
        await unpark(self, *args)

    monkeypatch.setattr(dispatch.Dispatcher, "_unpark", late_unpark)
    app, url, got, expected = backlog_join("joins-backlog", 600, mailbox_size=4, max_poll_records=50)
    async with testing.running(app, broker=url):
        await testing.eventually(lambda: len(got) >= len(expected), 30)
        await asyncio.sleep(0.2)  # (nothing more comes)
    assert sorted(got) == expected


async def test_a_join_over_a_backlog_waits_for_a_stream_whose_fetch_is_slow_however_long_it_takes(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Both streams are in their topics before the worker starts, but the payments are not fetched for 2.5 s
    (a busy fetch loop, a slow broker): the orders must wait for them, however long (Kafka Streams' rule for
    records known on the broker), or they would run ahead and find no partner. A wait longer than the
    warning's threshold is told, naming the stream. Every result, counted here from the input."""
    from engine.transport.memory import MemoryConsumer

    monkeypatch.setattr(release, "FETCH_WAIT_WARNING", 1.0)
    withheld = asyncio.Event()
    poll = MemoryConsumer._poll

    def slow_payments(self: MemoryConsumer, max_records: int) -> Any:
        if withheld.is_set():
            return poll(self, max_records)
        paused = set(self._paused)
        self._paused |= {tp for tp in self._assigned if tp.topic == "payments"}
        try:
            return poll(self, max_records)
        finally:
            self._paused = paused

    monkeypatch.setattr(MemoryConsumer, "_poll", slow_payments)
    app, url, got, expected = backlog_join("joins-slow-fetch", 300)
    with caplog.at_level("WARNING", logger="engine.tasks.release"):
        async with testing.running(app, broker=url):
            await testing.eventually(lambda: "payments[0] (300 on the broker)" in caplog.text, 30)
            await asyncio.sleep(1.5)  # (2.5 s in all: longer than any deadline the wait had)
            assert got == [], "the orders waited"
            withheld.set()
            testing.broker_for(url).notify()  # (the fetch ends: a fetch waiting for a change looks again)
            await testing.eventually(lambda: len(got) >= len(expected), 30)
            await asyncio.sleep(0.2)  # (nothing more comes)
    assert sorted(got) == expected
