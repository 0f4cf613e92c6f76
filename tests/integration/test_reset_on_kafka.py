"""`engine reset` end to end on the real broker, through `engine worker` and the CLI: an app with a
stream-table join, a count and a tumbling window with final results runs over a backlog; the reset is
refused while a worker runs, prints its plan without changing anything, and with --execute rewinds the
inputs, deletes the internal topics and wipes the stores; run again, the app gives the same join results,
counts and closed windows, each equal to ground truth computed here."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from engine.tables.keys import split_window_key
from tests.integration.helpers import (
    WorkerProcess,
    create_topics,
    engine_cli,
    latest,
    read_all,
    unique,
    until_done,
)

pytestmark = pytest.mark.kafka

CUSTOMERS = 8
RECORDS = 2400
STEP_MS = 150  # 6 minutes of event time: several windows per customer


def backlog(start_ms: int) -> tuple[list[tuple[str, str, int, int]], dict[int, int | None]]:
    """(topic, customer, number, ts) in time order (profiles: number is the version; payments: its id),
    then one payment per customer a day later that closes every earlier window; and the profile version
    each payment must be joined with (the newest at or before it; None: no profile yet)."""
    records: list[tuple[str, str, int, int]] = []
    versions: dict[str, int] = {}
    expected: dict[int, int | None] = {}
    ts = start_ms
    for i in range(RECORDS):
        customer = f"c{(i * 3) % CUSTOMERS}"
        ts += STEP_MS
        if i % 6 == 0:
            versions[customer] = versions.get(customer, 0) + 1
            records.append(("profiles", customer, versions[customer], ts))
        else:
            records.append(("payments", customer, i, ts))
            expected[i] = versions.get(customer)
    for n in range(CUSTOMERS):
        customer, number = f"c{n}", RECORDS + n
        records.append(("payments", customer, number, ts + 86_400_000))
        expected[number] = versions.get(customer)
    return records, expected



async def test_reset_then_a_second_run_gives_the_same_results(kafka, tmp_path):
    app_id, prefix = unique("reset"), unique("r") + "-"
    await create_topics(kafka.bootstrap, [f"{prefix}payments", f"{prefix}enriched"])
    await create_topics(kafka.bootstrap, [f"{prefix}profiles"], config={"cleanup.policy": "compact"})
    records, expected = backlog(int(time.time() * 1000) - 2 * 86_400_000)  # the closers: a day ago
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        sent = [await producer.send(f"{prefix}{topic}", orjson.dumps(number), key=customer.encode(),
                                    timestamp_ms=ts) for topic, customer, number, ts in records]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    payments = [(c, n, ts) for topic, c, n, ts in records if topic == "payments"]
    truth_join = Counter((c, n, expected[n]) for c, n, _ in payments)
    truth_totals = dict(Counter(c for c, _, _ in payments))
    last = max(ts for _, _, ts in payments)
    truth_windows = Counter((c, ts // 60_000 * 60) for c, _, ts in payments if ts < last)
    env = {"ITEST_APP": app_id, "ITEST_PREFIX": prefix, "ENGINE_DATA_DIR": str(tmp_path / "data")}
    closed_topic, totals_changelog = f"{app_id}-per-minute-closed", f"{app_id}-totals-changelog"

    async def run_until(name: str, joined: int) -> tuple[Counter, Counter, dict]:
        """Run a worker until `joined` join results and every window are out; stop it cleanly."""
        worker = WorkerProcess("tests.integration.reset_apps:app", kafka.url, env, tmp_path / f"{name}.log")
        out: list[Any] = []
        windows: Counter[tuple[str, int]] = Counter()

        async def complete() -> tuple[bool, tuple[int, int]]:
            out[:] = await read_all(kafka.bootstrap, f"{prefix}enriched")
            closed = await read_all(kafka.bootstrap, closed_topic) if len(out) >= joined else []
            windows.clear()
            windows.update({(key.decode(), start // 1000): int(r.value)
                            for r in closed for key, start in [split_window_key(r.key)]})
            return len(out) >= joined and set(windows) >= set(truth_windows), (len(out), len(windows))

        try:
            await until_done(complete, f"{name} run: {joined} joined, every window closed",
                             workers=[worker])
        finally:
            assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]
        join = Counter((r.key.decode(), orjson.loads(r.value)["id"], orjson.loads(r.value)["version"])
                       for r in out)
        totals = latest(await read_all(kafka.bootstrap, totals_changelog))
        return join, windows, totals

    first_join, first_windows, first_totals = await run_until("first", len(payments))
    assert first_join == truth_join
    assert first_windows == truth_windows
    assert first_totals == truth_totals

    cli_env = {**os.environ, **env}
    app_args = ("-A", "tests.integration.reset_apps:app", "--broker", kafka.url)
    running = WorkerProcess("tests.integration.reset_apps:app", kafka.url, env, tmp_path / "running.log")
    try:
        await running.wait_for_output("tables ready", 90)
        refused = engine_cli(cli_env, "reset", *app_args, "--execute")
        assert refused.returncode == 1
        assert "member" in refused.stderr
    finally:
        assert running.terminate(timeout=60) == 0, running.output()[-3000:]

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        committed_before = await admin.list_consumer_group_offsets(app_id)
        shown = engine_cli(cli_env, "reset", *app_args)
        assert shown.returncode == 0, shown.stderr
        assert f"{prefix}payments[0]: " in shown.stdout
        assert closed_topic in shown.stdout
        assert "nothing done" in shown.stdout
        assert await admin.list_consumer_group_offsets(app_id) == committed_before, "a plan changes nothing"

        done = engine_cli(cli_env, "reset", *app_args, "--execute")
        assert done.returncode == 0, done.stderr
        after = await admin.list_consumer_group_offsets(app_id)
        assert {tp.topic for tp in after} == {f"{prefix}payments", f"{prefix}profiles"}
        assert all(meta.offset == 0 for meta in after.values())
        assert not {closed_topic, totals_changelog} & set(await admin.list_topics())
    finally:
        await admin.close()
    assert [p.name for p in (tmp_path / "data" / app_id).iterdir() if p.is_dir()] == []

    second_join, second_windows, second_totals = await run_until("second", 2 * len(payments))
    assert second_join == first_join + first_join, "the same join results once more"
    assert second_windows == truth_windows, "the closed windows again, from a fresh topic"
    assert second_totals == truth_totals
