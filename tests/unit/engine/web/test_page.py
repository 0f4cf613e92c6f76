"""The app's page and its JSON views, on the in-memory broker with two workers of one app in one process:
every view from either worker covers both (the group's tasks split between them, every partition once with
its position, each table's keys, a dead letter with its reason and record, a late event), each view's JSON
twin is that part of `/ui/app`, and the page's files are served from the package."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import TYPE_CHECKING, Any

import aiohttp

import engine
from engine import testing
from engine.partitioner import partition_for
from engine.scope import running_as
from engine.web.views import VIEWS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

WORDS = [f"w{i % 17}" for i in range(300)]
START = 1_000_000  # event time (s) of the words: every one in the window [START, START + 60)


def make_app() -> engine.App:
    app = engine.App("page-two")
    words = app.topic("words", key_type=str, value_type=dict, timestamp=lambda value: value["at"])
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(60, grace=0)
    per_minute.closed()

    @app.agent(words)
    async def count(stream: Any) -> None:
        async for word, value in stream.items():
            if value.get("poison"):
                raise ValueError(f"poisoned word {word!r}")
            counts[word] += 1
            per_minute[word] += 1

    return app


@contextlib.asynccontextmanager
async def two_workers(tmp_path: Any) -> AsyncIterator[tuple[engine.App, Any, Any]]:
    """Two workers of the app, web servers on, placed, every word counted, then one poisoned word and one
    late word (a minute behind stream time on its partition)."""
    app = make_app()
    # (Stores in memory: their key counts are exact, RocksDB's an estimate.)
    options = {"broker": testing.memory_url(), "web_enabled": True, "web_port": 0, "store": "memory://"}
    async with testing.running(app, data_dir=str(tmp_path / "a"), **options) as first, \
            testing.running(app, data_dir=str(tmp_path / "b"), **options) as second:
        def placed(worker: Any) -> bool:
            current = worker.placement.current
            return current is not None and len(current.owners) == 4

        await testing.eventually(lambda: placed(first) and placed(second), 10)
        words, counts = app.topics["words"], app.tables["counts"]
        for word in WORDS:
            await words.send(key=word, value={"at": START + 1})
        await words.send(key="w1", value={"at": START + 2, "poison": True})
        await words.send(key="w2", value={"at": START + 120})  # w2's partition's stream time moves on
        await testing.eventually(lambda: dict(counts.items()) == {**TRUTH, "w2": TRUTH["w2"] + 1}, 10)
        for worker in (first, second):
            await worker.checkpoint()  # (where stream time is recorded)
        await words.send(key="w2", value={"at": START + 3})  # late: its window closed at START + 60
        await testing.eventually(lambda: dict(counts.items()) == {**TRUTH, "w2": TRUTH["w2"] + 2}, 10)
        await testing.eventually(lambda: sum(r.dead_letters for w in (first, second) for r in w.runners) == 1,
                                 10)
        yield app, first, second


TRUTH = Counter(WORDS)


async def get(session: aiohttp.ClientSession, endpoint: str, path: str) -> tuple[int, Any]:
    async with session.get(f"http://{endpoint}{path}") as reply:
        return reply.status, await reply.json()


async def test_every_view_from_either_worker_covers_the_whole_group(tmp_path):
    async with two_workers(tmp_path) as (app, first, second), aiohttp.ClientSession() as session:
        endpoints = {first.web.endpoint, second.web.endpoint}
        sent = Counter(partition_for(word.encode(), 4) for word in WORDS)
        sent.update(partition_for(word.encode(), 4) for word in ("w1", "w2", "w2"))
        # The window [START, START + 60) of every word of w2's partition closed when w2 moved its time on.
        closing = {word for word in TRUTH if partition_for(word.encode(), 4) == partition_for(b"w2", 4)}

        def closed() -> int:  # by both workers
            total = 0
            for worker in (first, second):
                with running_as(worker):
                    total += app.tables["per-minute"].windows_closed
            return total

        await testing.eventually(lambda: closed() == len(closing), 10)
        for worker in (first, second):
            status, views = await get(session, worker.web.endpoint, "/ui/app")
            assert status == 200
            assert views["app"] == "page-two"
            group = views["group"]
            assert {w["worker"] for w in group["workers"]} == endpoints
            assert group["unreachable"] == {}
            active = [n for w in group["workers"] for n in w["active"]]
            assert sorted(active) == [0, 1, 2, 3]  # each task on one worker
            assert all(w["protocol"] == "classic" and w["generation"] for w in group["workers"])
            for held_by in group["workers"]:  # the changes, replayed, give what the worker holds
                held: set[int] = set()
                for change in reversed(held_by["changes"]):
                    held = (held | set(change["active_added"])) - set(change["active_removed"])
                assert held == set(held_by["active"])
            # Every partition once, at the offset past its last record (each processed).
            partitions = {(p["topic"], p["partition"]): p for p in views["partitions"]["partitions"]}
            assert set(partitions) == {("words", n) for n in range(4)}
            positions = {n: partitions[("words", n)]["position"] for n in range(4)}
            assert positions == {n: sent[n] for n in range(4)}
            tables = {t["name"]: t for t in views["tables"]["tables"]}
            assert tables["counts"]["keys"] == len(TRUTH)
            assert tables["counts"]["kind"] == "table"
            assert tables["per-minute"]["kind"] == "tumbling 60s"
            assert tables["per-minute"]["late_events"] == 1
            assert tables["per-minute"]["windows_closed"] == len(closing)
            assert tables["counts"]["windows_closed"] is None
            assert sorted(n for numbers in tables["counts"]["here"].values() for n in numbers) == [0, 1, 2, 3]
            dead = views["dead-letters"]
            assert dead["counts"] == {"count": 1}
            assert dead["topics"] == {"count": "page-two-count-dlq"}
            [letter] = dead["latest"]
            assert letter["error"] == "ValueError: poisoned word 'w1'"
            assert (letter["topic"], letter["key"]) == ("words", "w1")
            assert '"poison":true' in letter["value"]
            assert dead["late"]["counts"] == {"per-minute": 1}
            [late] = dead["late"]["latest"]
            assert (late["table"], late["topic"], late["behind_s"]) == ("per-minute", "words", 117.0)
            nodes = {node["id"] for node in views["topology"]["nodes"]}
            assert {"topic:words", "agent:count", "table:counts", "table:per-minute"} <= nodes


async def test_each_views_json_twin_is_its_part_of_the_whole(tmp_path):
    async with two_workers(tmp_path) as (_, first, _), aiohttp.ClientSession() as session:
        endpoint = first.web.endpoint
        _, views = await get(session, endpoint, "/ui/app")
        for view in VIEWS:
            status, alone = await get(session, endpoint, f"/ui/{view}")
            assert status == 200
            if view in ("topology", "dead-letters"):
                assert alone == views[view], view
            elif view == "tables":  # (a restore's rate is measured anew)
                assert alone["tables"] == views[view]["tables"]
            else:  # (rates and trends are sampled anew)
                assert alone.keys() == views[view].keys(), view
        status, answer = await get(session, endpoint, "/ui/nothing")
        assert status == 404
        assert "topology" in answer["error"]


async def test_the_page_and_its_files_are_served_from_the_package(tmp_path):
    async with two_workers(tmp_path) as (_, first, _), aiohttp.ClientSession() as session:
        base = f"http://{first.web.endpoint}"
        async with session.get(f"{base}/") as reply:
            assert reply.status == 200
            assert reply.content_type == "text/html"
            page = await reply.text()
        assert '<script src="/page/page.js">' in page
        assert "/ui/partitions" in page
        for name, kind in (("page.js", "text/javascript"), ("page.css", "text/css")):
            async with session.get(f"{base}/page/{name}") as reply:
                assert reply.status == 200
                assert reply.content_type == kind
                assert len(await reply.read()) > 1000
        async with session.get(f"{base}/page/..%2Fserver.py") as reply:
            assert reply.status == 404


def test_another_workers_answer_that_is_not_an_overview_names_it_unreachable():
    from engine.web.server import _overview_in

    assert _overview_in(404, b"404: Not Found") == (None, "answered 404")  # (aiohttp's own, not JSON)
    assert _overview_in(503, b'{"error": "the owner did not answer"}') == (None, "the owner did not answer")
    assert _overview_in(200, b'{"worker": "x"}') == (None, "answered 200 without the page's overview")
    assert _overview_in(500, b"") == (None, "answered 500")


def test_a_global_tables_figures_are_one_copys_not_the_sum_over_workers():
    from engine.web.views import tables

    def overview(worker: str, keys: int) -> dict[str, Any]:
        return {"worker": worker, "recovery": {}, "tables": [
            {"name": "rates", "kind": "global", "global": True, "partitions": 2, "here": [0, 1], "keys": keys,
             "disk_bytes": keys * 10, "late_events": None, "windows_closed": None},
            {"name": "counts", "kind": "table", "global": False, "partitions": 2, "here": [int(worker[-1])],
             "keys": keys, "disk_bytes": keys * 10, "late_events": None, "windows_closed": None}]}

    merged = {t["name"]: t for t in tables([overview("w0", 5), overview("w1", 7)])["tables"]}
    assert (merged["rates"]["keys"], merged["rates"]["disk_bytes"]) == (7, 70)
    assert (merged["counts"]["keys"], merged["counts"]["disk_bytes"]) == (12, 120)
    assert merged["counts"]["here"] == {"w0": [0], "w1": [1]}


async def test_a_worker_without_active_tasks_is_in_the_group_all_the_same(tmp_path):
    """Three workers, two tasks: the one that owns none is still asked and shown (the assignment names every
    member's endpoint, not only the owners'). Each task's standby is shown on its worker, caught up with the
    changelog once the counts are committed (lag 0)."""
    app = engine.App("page-idle")
    app.topic("pairs", key_type=str, value_type=str, partitions=2)
    seen = app.Table("seen", default=int, key_type=str, value_type=int)

    @app.agent(app.topics["pairs"])
    async def note(stream: Any) -> None:
        async for key, _ in stream.items():
            seen[key] += 1

    options = {"broker": testing.memory_url(), "web_enabled": True, "web_port": 0, "store": "memory://",
               "standby_replicas": 1}
    async with contextlib.AsyncExitStack() as stack:
        workers = [await stack.enter_async_context(
            testing.running(app, data_dir=str(tmp_path / name), **options)) for name in "abc"]

        def placed() -> bool:
            return all(w.placement.current is not None and len(w.placement.workers()) == 3 for w in workers)

        await testing.eventually(placed, 10)
        async with aiohttp.ClientSession() as session:
            for worker in workers:
                status, group = await get(session, worker.web.endpoint, "/ui/group")
                assert status == 200
                rows = {row["worker"]: row for row in group["workers"]}
                assert set(rows) == {w.web.endpoint for w in workers}
                assert sorted(n for row in rows.values() for n in row["active"]) == [0, 1]
                assert [row for row in rows.values() if not row["active"]] != []  # the idle one, shown
            for n in range(20):
                await app.topics["pairs"].send(key=f"k{n}", value="v")
            await testing.eventually(lambda: sum(dict(seen.items()).values()) == 20, 10)
            for worker in workers:
                await worker.checkpoint()  # (the changelog written: the standbys have it to follow)
            owners = {n: w.web.endpoint for w in workers for n in w.assigned()}

            async def standbys() -> dict[str, dict[str, int | None]]:
                _, view = await get(session, workers[0].web.endpoint, "/ui/tables")
                [table] = view["tables"]
                return table["standby"]  # type: ignore[no-any-return]

            async def lags() -> dict[int, int | None]:
                return {int(p): lag for found in (await standbys()).values() for p, lag in found.items()}

            deadline = asyncio.get_running_loop().time() + 10
            while await lags() != {0: 0, 1: 0}:
                assert asyncio.get_running_loop().time() < deadline, await standbys()
                await asyncio.sleep(0.05)
            for worker, lags in (await standbys()).items():
                assert all(owners[int(p)] != worker for p in lags), "a standby is never on its owner"


async def test_a_partition_taken_over_shows_the_offset_the_group_committed_before_it_commits_itself(tmp_path):
    """A worker that takes partitions over has not committed them yet; what the group committed is where it
    resumed, and what the page shows (before, nothing until its own first commit)."""
    app = make_app()
    options = {"broker": testing.memory_url(), "web_enabled": True, "web_port": 0, "store": "memory://"}
    sent = Counter(partition_for(word.encode(), 4) for word in WORDS)
    async with testing.running(app, data_dir=str(tmp_path / "a"), **options) as first:
        for word in WORDS:
            await app.topics["words"].send(key=word, value={"at": START + 1})
        await testing.eventually(lambda: dict(app.tables["counts"].items()) == TRUTH, 10)
        await first.checkpoint()
    async with testing.running(app, data_dir=str(tmp_path / "b"), **options) as second, \
            aiohttp.ClientSession() as session:
        await testing.eventually(lambda: len(second.assigned()) == 4 and all(second.assigned().values()), 10)
        _, view = await get(session, second.web.endpoint, "/ui/partitions")
        committed = {p["partition"]: p["committed"] for p in view["partitions"]}
        assert committed == {n: sent[n] for n in range(4)}
