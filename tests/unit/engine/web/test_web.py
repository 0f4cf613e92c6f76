"""The worker's web server on the in-memory broker, with two workers of one app in one process: a query for
any key, sent to either worker, returns the key's value (about half of them forwarded to the other worker,
which the answer names); a missing key is a 404, a key of the wrong type a 400, an unknown table a 404;
/health and /ready answer; a forwarded query is never forwarded again."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections import Counter
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
import pytest

import engine
from engine import testing
from engine.errors import PartitionNotLocal
from engine.scope import running_as
from engine.web import server as server_module
from engine.web.queries import Forward
from engine.web.server import FORWARDED, PORTS_TRIED

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

WORDS = [f"w{i % 31}" for i in range(500)]


def make_app() -> tuple[engine.App, Any]:
    app = engine.App("web-two")
    words = app.topic("words", key_type=str, value_type=str)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    numbers = app.Table("by-number", default=int, key_type=int, value_type=int)

    @app.agent(words)
    async def count(stream: Any) -> None:
        async for word, _ in stream.items():
            counts[word] += 1

    return app, numbers


TRUTH = Counter(WORDS)


@contextlib.asynccontextmanager
async def counted_by_two(tmp_path: Any, **settings: Any) -> AsyncIterator[tuple[engine.App, Any, Any, Any]]:
    """Two workers of the counting app, web servers on, both placed (with standbys, if asked), with every
    word of WORDS counted: (app, its by-number table, first worker, second worker)."""
    app, numbers = make_app()
    options = {"broker": testing.memory_url(), "web_enabled": True, "web_port": 0, **settings}
    async with testing.running(app, data_dir=str(tmp_path / "a"), **options) as first, \
            testing.running(app, data_dir=str(tmp_path / "b"), **options) as second:
        standbys = bool(settings.get("standby_replicas"))

        def placed(worker: Any) -> bool:
            current = worker.placement.current
            placed_all = current is not None and len(current.owners) == 4
            return placed_all and (bool(worker.tasks.standby) or not standbys)

        await testing.eventually(lambda: placed(first) and placed(second), 10)
        for word in WORDS:
            await app.topics["words"].send(key=word, value=word)
        await testing.eventually(lambda: dict(app.tables["counts"].items()) == TRUTH, 10)
        yield app, numbers, first, second


async def get(session: aiohttp.ClientSession, endpoint: str, path: str,
              **headers: str) -> tuple[int, Any]:
    async with session.get(f"http://{endpoint}{path}", headers=headers) as response:
        return response.status, await response.json()


async def test_any_worker_answers_for_every_key_forwarding_to_its_owner(tmp_path):
    async with counted_by_two(tmp_path) as (app, _, first, second), aiohttp.ClientSession() as session:
        truth, counts = TRUTH, app.tables["counts"]
        endpoints = [first.placement.endpoint, second.placement.endpoint]
        assert all(endpoints)
        answered_by: Counter[tuple[str, str]] = Counter()
        for asked in endpoints:
            for word, n in truth.items():
                status, body = await get(session, asked, f"/tables/counts/{word}")
                assert (status, body["value"], body["key"]) == (200, n, word)
                answered_by[(asked, body["worker"])] += 1
        assert all(answered_by[(a, b)] > 0 for a in endpoints for b in endpoints), answered_by

        for asked in endpoints:
            assert await get(session, asked, "/health") == (200, {"status": "alive", "app": "web-two",
                                                                "worker": asked})
            status, ready = await get(session, asked, "/ready")
            assert status == 200
            assert ready["ready"] is True
            status, missing = await get(session, asked, "/tables/counts/nope")
            assert (status, missing["error"]) == (404, "no such key")
            status, bad = await get(session, asked, "/tables/by-number/abc")
            assert status == 400
            assert "does not fit table 'by-number'" in bad["error"]
            status, unknown = await get(session, asked, "/tables/nope/x")
            assert status == 404
            assert "counts" in unknown["error"]
            status, listed = await get(session, asked, "/tables")
            assert {t["name"] for t in listed["tables"]} == {"counts", "by-number"}

        owner_of = {w: e for e, w in zip(endpoints, (first, second), strict=True)}
        elsewhere = next(word for word in truth
                         if counts.locate(word)[1] in second.tasks.active)  # owned by the second worker
        status, body = await get(session, owner_of[first], f"/tables/counts/{elsewhere}",
                                 **{FORWARDED: "test"})
        assert status == 503, "a forwarded query is answered where it lands, never sent on"
        assert "moving" in body["error"]


def test_a_partition_assigned_here_but_not_recovered_answers_503_and_readiness_waits_for_it():
    from engine.web.queries import TableQueries

    app, _ = make_app()
    counts = app.tables["counts"]
    counts._count = 4  # what a worker sets when it attaches the table; none runs here
    number = counts.locate("w1")[1]
    state = {"assigned": {number: False}, "owners": {number: "me:1"}}
    queries = TableQueries(object(), app.tables, owners=lambda: state["owners"],
                           assigned=lambda: state["assigned"], endpoint=lambda: "me:1")
    answer = queries.get("counts", "w1", forwarded=False)
    assert (answer.status, answer.retry_after) == (503, 1)
    assert "recovering" in answer.body["error"]
    assert queries.ready().status == 503
    assert queries.ready().body["recovering"] == [number]

    state["assigned"], state["owners"] = {}, {number: "other:2"}
    assert queries.get("counts", "w1", forwarded=False) == Forward("other:2")
    assert queries.get("counts", "w1", forwarded=True).status == 503
    state["owners"] = {}
    assert queries.ready().body == {"ready": False, "why": "no assignment yet"}


async def test_table_query_from_python_reads_here_or_asks_the_owner(tmp_path):
    async with counted_by_two(tmp_path) as (app, numbers, first, _):
        truth, counts = TRUTH, app.tables["counts"]
        assert any(counts.locate(word)[1] not in first.tasks.active for word in truth), "some are asked"
        with running_as(first):  # as code of the first worker (a timer, an agent) asks
            assert {word: await counts.query(word) for word in truth} == dict(truth)
            with pytest.raises(KeyError):
                await counts.query("nope")
            with pytest.raises(KeyError):
                await numbers.query(7)


async def test_ranges_page_through_every_key_in_byte_order_from_either_worker(tmp_path):
    async with counted_by_two(tmp_path) as (app, _, first, second), aiohttp.ClientSession() as session:
        truth, counts = TRUTH, app.tables["counts"]
        ordered = sorted(truth, key=lambda word: counts.locate(word)[0])
        for asked in (first.placement.endpoint, second.placement.endpoint):
            seen: list[tuple[str, int]] = []
            path = "/tables/counts?limit=7"
            while True:
                status, body = await get(session, asked, path)
                assert status == 200, body
                assert len(body["entries"]) <= 7
                seen += [(entry["key"], entry["value"]) for entry in body["entries"]]
                if body["next"] is None:
                    break
                path = f"/tables/counts?limit=7&from={quote(body['next'])}"
            assert seen == [(word, truth[word]) for word in ordered]
            low, high = ordered[5], ordered[20]
            status, body = await get(session, asked, f"/tables/counts?from={low}&to={high}&limit=100")
            assert [e["key"] for e in body["entries"]] == ordered[5:21]
            assert body["next"] is None
        status, bad = await get(session, first.placement.endpoint, "/tables/counts?limit=0")
        assert status == 400
        assert "limit" in bad["error"]
        status, bad = await get(session, first.placement.endpoint, "/tables/by-number?from=x")
        assert status == 400


async def test_windowed_tables_answer_latest_all_or_one_window(tmp_path):
    app = engine.App("web-windows")
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda v: v["ts"])
    views = app.Table("views", default=int, key_type=str, value_type=int).tumbling(10, expires=3600)

    @app.agent(clicks)
    async def count(stream: Any) -> None:
        async for page, _ in stream.items():
            views[page] += 1

    times = {"b": [5], "a": [1, 2, 11, 25, 27, 29]}  # b first: later it would be late
    async with testing.running(app, data_dir=str(tmp_path), broker=testing.memory_url(), web_enabled=True,
                               web_port=0) as worker, aiohttp.ClientSession() as session:
        for page, stamps in times.items():
            for ts in stamps:
                await clicks.send(key=page, value={"ts": ts})
        await testing.eventually(lambda: sum(v for _, v in views.table.items()) == 7, 10)
        at = worker.placement.endpoint

        def window(start: float, value: int) -> dict[str, Any]:
            return {"window_start": start, "window_end": start + 10, "value": value}

        status, body = await get(session, at, "/tables/views/a")
        assert (status, body["windows"]) == (200, [window(20, 3)])
        status, body = await get(session, at, "/tables/views/a?window=all")
        assert body["windows"] == [window(0, 2), window(10, 1), window(20, 3)]
        status, body = await get(session, at, "/tables/views/a?window=10")
        assert body["windows"] == [window(10, 1)]
        status, body = await get(session, at, "/tables/views/a?window=1970-01-01T00:00:10%2B00:00")
        assert body["windows"] == [window(10, 1)]
        status, body = await get(session, at, "/tables/views/b?window=10")
        assert (status, body["error"]) == (404, "no such window")
        status, body = await get(session, at, "/tables/views/a?window=soon")
        assert status == 400
        status, body = await get(session, at, "/tables/views?from=a")
        assert status == 400
        with running_as(worker):
            assert await views.table.query("a") == [window(20, 3)]


async def test_session_tables_answer_with_each_sessions_start_and_end(tmp_path):
    app = engine.App("web-sessions")
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda v: v["ts"])
    visits = app.stream(clicks).session(10, grace=100).count("visits")
    async with testing.running(app, data_dir=str(tmp_path), broker=testing.memory_url(), web_enabled=True,
                               web_port=0) as worker, aiohttp.ClientSession() as session:
        for ts in [1, 4, 30, 35, 36]:  # two sessions: [1, 4] and [30, 36]
            await clicks.send(key="a", value={"ts": ts})

        def counted() -> bool:
            try:
                return sum(n for _, n in visits.windows("a")) == 5
            except PartitionNotLocal:  # not assigned yet
                return False

        await testing.eventually(counted, 10)
        status, body = await get(session, worker.placement.endpoint, "/tables/visits/a?window=all")
        assert (status, body["windows"]) == (200, [{"window_start": 1, "window_end": 4, "value": 2},
                                                   {"window_start": 30, "window_end": 36, "value": 3}])
        status, body = await get(session, worker.placement.endpoint, "/tables/visits/a")
        assert body["windows"] == [{"window_start": 30, "window_end": 36, "value": 3}]


async def test_stale_queries_read_a_standby_here_instead_of_asking_the_owner(tmp_path):
    async with counted_by_two(tmp_path, standby_replicas=1) as (app, _, first, second), \
            aiohttp.ClientSession() as session:
        truth, counts = TRUTH, app.tables["counts"]
        await first.checkpoint()
        await second.checkpoint()
        elsewhere = [w for w in truth if counts.locate(w)[1] in second.tasks.active]
        at = first.placement.endpoint
        assert elsewhere
        assert all(counts.locate(w)[1] in first.tasks.standby for w in elsewhere)

        async def stale_values() -> dict[str, Any]:
            found = {}
            for word in elsewhere:  # marked forwarded: answered here or not at all
                status, body = await get(session, at, f"/tables/counts/{word}?stale=ok", **{FORWARDED: "t"})
                found[word] = (status, body.get("value"), body.get("stale"), body.get("worker"))
            return found

        expected = {w: (200, truth[w], True, at) for w in elsewhere}
        for _ in range(200):
            if await stale_values() == expected:
                break
            await asyncio.sleep(0.05)
        assert await stale_values() == expected
        status, _body = await get(session, at, f"/tables/counts/{elsewhere[0]}", **{FORWARDED: "t"})
        assert status == 503, "without stale=ok a standby is not read"
        status, ready = await get(session, at, "/ready")
        assert (status, ready["standby"]) == (200, sorted(first.tasks.standby))


async def test_a_worker_says_which_port_it_took_with_web_port_0(tmp_path: Any) -> None:
    app = engine.App("port-zero", store="memory://")
    app.topic("in")
    async with testing.running(app, data_dir=str(tmp_path), broker=testing.memory_url(), web_enabled=True,
                               web_port=0) as worker, aiohttp.ClientSession() as session:
        endpoint = worker.web_endpoint
        assert endpoint is not None
        host, port = endpoint.rsplit(":", 1)
        assert (host, int(port) > 0) == ("127.0.0.1", True)
        status, body = await get(session, endpoint, "/health")
        assert (status, body["worker"]) == (200, endpoint)
    async with testing.running(app, data_dir=str(tmp_path), broker=testing.memory_url()) as worker:
        assert worker.web_endpoint is None  # no web server (the test kit's default)


async def test_a_worker_asked_to_heartbeat_tells_its_membership_and_an_absent_one_is_passed_over(
        tmp_path: Any) -> None:
    """What a streams member whose change moved tasks does (engine.transport.kafka_streams_member): ask the
    others' web servers to heartbeat now. Each asked worker's membership hears it; a peer gone is skipped."""
    app = engine.App("beat-asks", store="memory://")
    app.topic("in")
    options = {"broker": testing.memory_url(), "web_enabled": True, "web_port": 0}
    async with testing.running(app, data_dir=str(tmp_path / "a"), **options) as first, \
            testing.running(app, data_dir=str(tmp_path / "b"), **options) as second:
        asked: list[str] = []
        for worker in (first, second):
            worker.placement.beat_now = lambda worker=worker: asked.append(worker.web_endpoint)
        assert first.placement.ask_to_beat is not None
        gone = "127.0.0.1:1"  # (nothing listens there)
        await first.placement.ask_to_beat([second.web_endpoint, gone])
        assert asked == [second.web_endpoint]


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_tables_counts_local_keys_exactly_without_overwrites(tmp_path: Any, store: str) -> None:
    app = engine.App("key-count", store=store, topic_partitions=1)
    words = app.topic("words", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    windowed = app.Table("per-ten", default=int, key_type=str, value_type=int).tumbling(10)

    @app.agent(words)
    async def count(stream: Any) -> None:
        async for word, n in stream.items():
            counts[word] += n
            windowed[word] += n

    async with testing.running(app, data_dir=str(tmp_path), broker=testing.memory_url(), web_enabled=True,
                               web_port=0) as worker, aiohttp.ClientSession() as session:
        for round_ in range(15):  # 30 writes of 2 keys, checkpointed as they go
            for word in ("red", "blue"):
                await words.send(key=word, value=1, timestamp_ms=1_000)
            await testing.eventually(lambda r=round_: dict(counts.items()).get("red") == r + 1)
            if round_ < 14:
                await worker.checkpoint()  # (the last writes stay in the buffer: counted too)
        status, body = await get(session, worker.web_endpoint or "", "/tables")
    tables = {t["name"]: t for t in body["tables"]}
    assert status == 200
    assert (tables["counts"]["local_keys"], tables["counts"]["local_keys_exact"]) == (2, True)
    assert (tables["per-ten"]["local_keys"], tables["per-ten"]["local_keys_exact"]) == (2, True)


def test_a_local_key_count_merges_the_unflushed_writes_and_stops_past_its_limit() -> None:
    from engine.stores.memory import MemoryPartitionStore
    from engine.tables.partition import DELETED, TablePartition

    app = engine.App("key-limit", broker="memory://unused")
    table = app.Table("counts", default=int, key_type=str, value_type=int)
    worker = object()
    table.bind(worker, 1, {})
    stored = {table.locate(k)[0]: b"1" for k in ("a", "b", "c")}
    part = TablePartition(0, MemoryPartitionStore(stored, {}), table.value_codec)
    part.buffer.update({"a": 2, "b": DELETED, "d": 1})  # an overwrite, a delete, a new key
    table.active[0] = part
    assert table.count_local(10) == 3  # a, c, d
    assert table.count_local(3) == 3
    assert table.count_local(2) is None
    table.unbind(worker)


async def test_a_port_whose_listen_another_process_won_is_passed_over_for_the_next(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers starting side by side can both bind one port (SO_REUSEADDR, neither listening yet); the
    second one's listen fails. That failure is a port in use: the next one is tried (uvloop's create_server
    once returned a server without a socket there, and the worker failed to start)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    lost = probe.getsockname()[1]
    probe.close()

    class LosingTheRace(socket.socket):
        def listen(self, *args: Any) -> None:
            if self.getsockname()[1] == lost:
                raise OSError(errno.EADDRINUSE, "Address already in use")
            super().listen(*args)

    monkeypatch.setattr(server_module.socket, "socket", LosingTheRace)
    app = engine.App("port-race", store="memory://")
    app.topic("in")
    async with testing.running(app, data_dir=str(tmp_path), broker=testing.memory_url(), web_enabled=True,
                               web_port=lost) as worker, aiohttp.ClientSession() as session:
        assert worker.web_endpoint is not None
        host, port = worker.web_endpoint.rsplit(":", 1)
        assert host == "127.0.0.1"
        assert lost < int(port) < lost + PORTS_TRIED, "the next free port after the one lost"
        status, _body = await get(session, worker.web_endpoint, "/health")
        assert status == 200
