"""Table queries over HTTP on the real broker, through two `engine worker`s: every key, asked of either
worker, returns its ground-truth count (the worker that does not own the key forwards the query to the one
that does); after one worker is SIGKILLed, queries to the other converge to every key's value once the group
gives it the partitions. A range over the table, paged, from either worker, returns every key; the
workers' /metrics, parsed by prometheus-client, count every record consumed and handed to the agent."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    consume_until,
    create_topics,
    latest,
    produce,
    unique,
)

pytestmark = [pytest.mark.kafka, pytest.mark.both_protocols]


def endpoint_of(worker: WorkerProcess) -> str:
    found = re.search(r"web server at http://(\S+) ", worker.output())
    assert found, worker.output()[-3000:]
    return found.group(1)


async def ask(session: aiohttp.ClientSession, endpoint: str, key: str) -> tuple[int, dict]:
    async with session.get(f"http://{endpoint}/tables/counts/{key}") as response:
        return response.status, await response.json()


async def metrics(session: aiohttp.ClientSession, endpoint: str) -> dict[tuple[str, tuple], float]:
    async with session.get(f"http://{endpoint}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def test_either_worker_answers_every_key_and_queries_converge_after_a_kill(kafka, tmp_path):
    app_id, topic = unique("queries"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_WEB_PORT": "0", **SHORT_SESSION}
    workers = {name: WorkerProcess("tests.integration.table_apps:app", kafka.url,
                                   {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")
               for name in ("a", "b")}
    try:
        for worker in workers.values():
            await worker.wait_for_output("tables ready", 90)
        words = [f"q{(i * 7) % 60}" for i in range(3000)]
        truth = Counter(words)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in words])
        await consume_until(kafka.bootstrap, f"{app_id}-counts-changelog",
                            lambda rs: latest(rs) == dict(truth), timeout=90)
        endpoints = {name: endpoint_of(w) for name, w in workers.items()}
        async with aiohttp.ClientSession() as session:
            answered_by: Counter[tuple[str, str]] = Counter()
            deadline = time.monotonic() + 60
            for asked in endpoints.values():
                for word, n in truth.items():
                    status, body = await ask(session, asked, word)
                    while status == 503 and time.monotonic() < deadline:  # the group still settling
                        await asyncio.sleep(0.2)
                        status, body = await ask(session, asked, word)
                    assert (status, body.get("value")) == (200, n), body
                    answered_by[(asked, body["worker"])] += 1
            assert all(answered_by[(x, y)] > 0 for x in endpoints.values() for y in endpoints.values()), (
                "each worker answered some keys itself and forwarded others", answered_by)

            for asked in endpoints.values():  # a range over every key, in pages, from either worker
                seen: dict[str, int] = {}
                path = "/tables/counts?limit=25"
                while path:
                    async with session.get(f"http://{asked}{path}") as response:
                        assert response.status == 200, await response.text()
                        page = await response.json()
                    seen.update((entry["key"], entry["value"]) for entry in page["entries"])
                    path = f"/tables/counts?limit=25&from={page['next']}" if page["next"] else ""
                assert seen == dict(truth)

            scraped = [await metrics(session, asked) for asked in endpoints.values()]
            handed = sum(m.get(("engine_agent_events_total", (("agent", "count"),)), 0) for m in scraped)
            consumed = sum(m.get(("engine_records_consumed_total", (("topic", topic),)), 0) for m in scraped)
            assert handed == consumed >= len(words), "every record consumed was handed to the agent"
            changelog = sum(m.get(("engine_changelog_records_total", (("table", "counts"),)), 0)
                            for m in scraped)
            assert changelog >= len(truth)

            workers["a"].kill()
            survivor = endpoints["b"]
            deadline = time.monotonic() + 60
            pending = dict(truth)
            while pending:
                assert time.monotonic() < deadline, f"still not answered after the kill: {sorted(pending)}"
                for word, n in list(pending.items()):
                    status, body = await ask(session, survivor, word)
                    if status == 200:
                        assert body["value"] == n
                        assert body["worker"] == survivor
                        del pending[word]
                    else:
                        assert status == 503, body  # moving or recovering, never a wrong value
                if pending:
                    await asyncio.sleep(0.5)
    finally:
        for worker in workers.values():
            if worker.process.poll() is None:
                assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]
