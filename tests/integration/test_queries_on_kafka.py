"""Table queries over HTTP on the real broker, through two `engine worker`s: every key, asked of either
worker, returns its ground-truth count (the worker that does not own the key forwards the query to the one
that does); after one worker is SIGKILLed, queries to the other converge to every key's value once the group
gives it the partitions."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

import aiohttp
import pytest

from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    consume_until,
    create_topics,
    latest,
    produce,
    unique,
)

pytestmark = pytest.mark.kafka


def endpoint_of(worker: WorkerProcess) -> str:
    found = re.search(r"web server at http://(\S+) ", worker.output())
    assert found, worker.output()[-3000:]
    return found.group(1)


async def ask(session: aiohttp.ClientSession, endpoint: str, key: str) -> tuple[int, dict]:
    async with session.get(f"http://{endpoint}/tables/counts/{key}") as response:
        return response.status, await response.json()


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
