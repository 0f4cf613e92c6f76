"""Workers on a real Kafka broker: sharing partitions, surviving SIGKILL, dead-lettering poison records."""

from __future__ import annotations

import asyncio
from collections import Counter

import orjson
import pytest

from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    consume_until,
    create_topics,
    produce,
    read_all,
    unique,
)
from tests.integration.worker_checks import numbers_of

pytestmark = pytest.mark.kafka


def start_worker(kafka, app_id, tmp_path, name, delay=0.0):
    env = {"ITEST_APP": app_id, "ITEST_DELAY": str(delay), **SHORT_SESSION}
    return WorkerProcess("tests.integration.apps:app", kafka.url, env, tmp_path / f"{name}.log")


async def test_two_workers_share_partitions_and_process_everything(kafka, tmp_path):
    app_id = unique("share")
    await create_topics(kafka.bootstrap, ["numbers", "processed"])  # shared names are fine: keyed by n
    numbers_topic, processed_topic = "numbers", "processed"
    first = start_worker(kafka, app_id, tmp_path, "first", delay=0.002)
    second = start_worker(kafka, app_id, tmp_path, "second", delay=0.002)
    try:
        await first.wait_for_output("worker " + app_id + " running")
        await second.wait_for_output("worker " + app_id + " running")
        # Both joined: wait until the group settled with partitions on each.
        await first.wait_for_output("assigned")
        await second.wait_for_output("assigned")
        base = 1_000_000 * (abs(hash(app_id)) % 1000)
        ids = range(base, base + 2000)
        await produce(kafka.bootstrap, numbers_topic, ((n, {"n": n}) for n in ids))
        records = await consume_until(
            kafka.bootstrap, processed_topic, lambda rs: set(ids) <= numbers_of(rs), timeout=90
        )
        mine = [orjson.loads(r.value) for r in records if orjson.loads(r.value)["n"] in set(ids)]
        pids = Counter(v["pid"] for v in mine)
        assert len(pids) == 2, f"both workers should have processed some records: {pids}"
        by_pid: dict[int, set[int]] = {}
        for v in mine:
            by_pid.setdefault(v["pid"], set()).add(v["partition"])
        assert not set.intersection(*by_pid.values()), "a partition was processed by both workers"
    finally:
        assert first.terminate() == 0, first.output()[-3000:]
        assert second.terminate() == 0, second.output()[-3000:]


async def test_sigkill_mid_stream_then_restart_loses_nothing(kafka, tmp_path):
    app_id = unique("kill")
    base = 2_000_000_000 + 1_000_000 * (abs(hash(app_id)) % 1000)
    ids = set(range(base, base + 3000))
    await create_topics(kafka.bootstrap, ["numbers", "processed"])
    # Earlier tests' records are on the topic too; this group starts from the beginning and skips them.
    worker = start_worker(kafka, app_id, tmp_path, "victim", delay=0.001)
    await worker.wait_for_output("assigned")
    await produce(kafka.bootstrap, "numbers", ((n, {"n": n}) for n in sorted(ids)))
    # Kill it once it is part way through.
    await consume_until(kafka.bootstrap, "processed",
                        lambda rs: len(numbers_of(rs) & ids) >= 500, timeout=90)
    worker.kill()
    partial = numbers_of(await read_all(kafka.bootstrap, "processed"))
    assert ids - partial, "the worker finished before it was killed; nothing was tested"
    restarted = start_worker(kafka, app_id, tmp_path, "restarted", delay=0.0)
    try:
        records = await consume_until(kafka.bootstrap, "processed",
                                      lambda rs: ids <= numbers_of(rs), timeout=120)
        assert ids <= numbers_of(records)
    finally:
        assert restarted.terminate() == 0, restarted.output()[-3000:]


async def test_poison_records_go_to_the_dlq_and_the_rest_is_processed(kafka, tmp_path):
    app_id = unique("poison")
    base = 3_000_000_000 + 1_000_000 * (abs(hash(app_id)) % 1000)
    await create_topics(kafka.bootstrap, ["numbers", "processed"])
    worker = start_worker(kafka, app_id, tmp_path, "poisoned")
    try:
        await worker.wait_for_output("assigned")
        good = list(range(base, base + 200))
        await produce(kafka.bootstrap, "numbers", [(n, {"n": n}) for n in good[:100]])
        await produce(kafka.bootstrap, "numbers", [(b"bad-json", b"{not json"),
                                                   (b"wrong-type", b"[1, 2]")], raw=True)
        await produce(kafka.bootstrap, "numbers", [("p", {"n": -1, "poison": True})])
        await produce(kafka.bootstrap, "numbers", [(n, {"n": n}) for n in good[100:]])
        records = await consume_until(kafka.bootstrap, "processed",
                                      lambda rs: set(good) <= numbers_of(rs), timeout=60)
        assert set(good) <= numbers_of(records)
        dlq = await consume_until(kafka.bootstrap, f"{app_id}-process-dlq",
                                  lambda rs: len(rs) >= 3, timeout=30)
        by_key = {r.key: dict(r.headers) for r in dlq}
        assert set(by_key) == {b"bad-json", b"wrong-type", b"p"}
        assert by_key[b"bad-json"]["engine-error-type"] == b"DecodeError"
        assert b"not valid JSON" in by_key[b"bad-json"]["engine-error"]
        assert b"expected dict, got list" in by_key[b"wrong-type"]["engine-error"]
        assert by_key[b"p"]["engine-error"] == b"ValueError: poison number -1"
        assert by_key[b"p"]["engine-topic"] == b"numbers"
        assert int(by_key[b"p"]["engine-offset"]) >= 0
        assert [r.value for r in dlq if r.key == b"bad-json"] == [b"{not json"]
        log = worker.output()
        assert "poison number -1" in log
        assert "record sent to" in log
    finally:
        assert worker.terminate() == 0, worker.output()[-3000:]


async def test_ask_gets_its_answer_through_the_reply_topic(kafka):
    import engine

    app = engine.App(unique("ask"), broker=kafka.url)

    @app.agent(app.topic(unique("questions"), value_type=int))
    async def square(stream):
        async for n in stream:
            yield n * n

    worker = engine.Worker(app, app.settings())
    await worker.start()
    try:
        answers = await asyncio.gather(*(square.ask(n, timeout=30) for n in range(5)))
        assert answers == [0, 1, 4, 9, 16]
    finally:
        worker.request_stop()
        await worker.run_until_stopped()


async def test_ask_from_inside_an_event_under_exactly_once_is_answered_without_stalling_checkpoints(
        kafka, caplog):
    """An agent asks another from inside its event, under exactly_once with 100 ms commits. Before, the
    request sat in the asker's open transaction and the checkpoint waited for the asker: each ask took the
    pause timeout and every such checkpoint fell back to at-least-once. Now the request and the reply go
    outside transactions and the gate stays open for the replier: every answer is right, the asker's table
    counts each event once, and no checkpoint falls back."""
    import engine
    from engine import testing

    app = engine.App(unique("ask-eos"), broker=kafka.url, processing_guarantee="exactly_once",
                     commit_interval=0.1)
    numbers = app.topic(unique("numbers"), key_type=str, value_type=int)
    totals = app.Table("totals", default=int, key_type=str, value_type=int)
    answers: list[tuple[int, int, float]] = []

    @app.agent(app.topic(unique("questions"), value_type=int))
    async def square(stream):
        async for n in stream:
            yield n * n

    @app.agent(numbers)
    async def asker(stream):
        async for key, n in stream.items():
            asked = asyncio.get_running_loop().time()
            answer = await square.ask(n, timeout=30)
            answers.append((n, answer, asyncio.get_running_loop().time() - asked))
            totals[key] += answer

    worker = engine.Worker(app, app.settings())
    await worker.start()
    try:
        with caplog.at_level("WARNING"):
            for n in range(20):
                await numbers.send(key=f"k{n % 3}", value=n)
                await asyncio.sleep(0.05)  # spread over many checkpoints
            await testing.eventually(lambda: len(answers) == 20, timeout=60)
            await asyncio.sleep(0.3)  # a few more checkpoints
        assert [(n, a) for n, a, _ in answers] == [(n, n * n) for n in range(20)]
        slowest = max(took for _, _, took in answers)
        assert "only at-least-once" not in caplog.text, caplog.text
        assert "this checkpoint is at-least-once" not in caplog.text, caplog.text
        expected = Counter()
        for n in range(20):
            expected[f"k{n % 3}"] += n * n
        assert {k: totals[k] for k in expected} == dict(expected), f"slowest ask {slowest:.2f}s"
    finally:
        worker.request_stop()
        await worker.run_until_stopped()
