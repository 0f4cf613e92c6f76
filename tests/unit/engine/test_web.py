"""The worker's web server on the in-memory broker, with two workers of one app in one process: a query for
any key, sent to either worker, returns the key's value (about half of them forwarded to the other worker,
which the answer names); a missing key is a 404, a key of the wrong type a 400, an unknown table a 404;
/health and /ready answer; a forwarded query is never forwarded again."""

from __future__ import annotations

from collections import Counter
from typing import Any

import aiohttp
import pytest

import engine
from engine import testing
from engine.scope import current_worker
from engine.web.server import FORWARDED

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


async def get(session: aiohttp.ClientSession, endpoint: str, path: str,
              **headers: str) -> tuple[int, Any]:
    async with session.get(f"http://{endpoint}{path}", headers=headers) as response:
        return response.status, await response.json()


async def test_any_worker_answers_for_every_key_forwarding_to_its_owner(tmp_path):
    app, _ = make_app()
    url = testing.memory_url()
    options = {"broker": url, "web_enabled": True, "web_port": 0}
    async with testing.running(app, data_dir=str(tmp_path / "a"), **options) as first, \
            testing.running(app, data_dir=str(tmp_path / "b"), **options) as second, \
            aiohttp.ClientSession() as session:
        await testing.eventually(lambda: bool(first.tasks.active) and bool(second.tasks.active), 10)
        for word in WORDS:
            await app.topics["words"].send(key=word, value=word)
        truth = Counter(WORDS)
        counts = app.tables["counts"]
        await testing.eventually(lambda: dict(counts.items()) == truth, 10)
        endpoints = [first.placement.endpoint, second.placement.endpoint]
        assert all(endpoints)
        await testing.eventually(lambda: all(w.placement.current is not None and len(
            w.placement.current.owners) == 4 for w in (first, second)), 10)
        answered_by: Counter[tuple[str, str]] = Counter()
        for asked in endpoints:
            for word, n in truth.items():
                status, body = await get(session, asked, f"/tables/counts/{word}")
                assert (status, body["value"], body["key"]) == (200, n, word)
                answered_by[(asked, body["worker"])] += 1
        assert all(answered_by[(a, b)] > 0 for a in endpoints for b in endpoints), answered_by

        for asked in endpoints:
            assert await get(session, asked, "/health") == (200, {"status": "alive", "worker": asked})
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
    assert queries.get("counts", "w1", forwarded=False).forward_to == "other:2"
    assert queries.get("counts", "w1", forwarded=True).status == 503
    state["owners"] = {}
    assert queries.ready().body == {"ready": False, "why": "no assignment yet"}


async def test_table_query_from_python_reads_here_or_asks_the_owner(tmp_path):
    app, numbers = make_app()
    url = testing.memory_url()
    options = {"broker": url, "web_enabled": True, "web_port": 0}
    async with testing.running(app, data_dir=str(tmp_path / "a"), **options) as first, \
            testing.running(app, data_dir=str(tmp_path / "b"), **options):
        await testing.eventually(lambda: first.placement.current is not None and len(
            first.placement.current.owners) == 4, 10)
        for word in WORDS:
            await app.topics["words"].send(key=word, value=word)
        truth = Counter(WORDS)
        counts = app.tables["counts"]
        await testing.eventually(lambda: dict(counts.items()) == truth, 10)
        assert any(counts.locate(word)[1] not in first.tasks.active for word in truth), "some are asked"
        token = current_worker.set(first)  # as code of the first worker (a timer, an agent) asks
        try:
            assert {word: await counts.query(word) for word in truth} == dict(truth)
            with pytest.raises(KeyError):
                await counts.query("nope")
            with pytest.raises(KeyError):
                await numbers.query(7)
        finally:
            current_worker.reset(token)
