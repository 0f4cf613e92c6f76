"""Exactly-once windowed counts on a real broker: a worker SIGKILLed mid-window and restarted; the final
result of every window (read with read_committed from `<app>-clicks-closed`) equals the ground truth, and
no window is closed twice or missed."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from engine.tables.keys import split_window_key
from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    consume_until,
    create_topics,
    produce,
    unique,
)

pytestmark = [pytest.mark.kafka, pytest.mark.both_protocols]

USERS = [f"user-{n}" for n in range(20)]
START = 1_000_000


def clicks(count: int) -> list[dict]:
    """In event-time order, 10 per second: 100 per 10-second window, spread over the users."""
    return [{"user": USERS[(i * 7) % len(USERS)], "at": START + i / 10} for i in range(count)]


def decoded(records) -> list[tuple[str, int, int]]:
    out = []
    for record in records:
        key, start_ms = split_window_key(record.key)
        out.append((key.decode(), start_ms // 1000, int(record.value)))
    return out


@pytest.mark.parametrize("app", ["window_apps", "pipeline_apps"])  # by hand, and as a pipeline with group_by
async def test_windows_close_exactly_once_with_exact_counts_across_a_sigkill(kafka, tmp_path, app):
    app_id, topic = unique("eos"), unique("clicks")
    await create_topics(kafka.bootstrap, [topic])
    events = clicks(4000)  # 40 windows of 10 s
    truth = Counter((e["user"], int(e["at"]) // 10 * 10) for e in events)
    # One far-future click per user moves every partition's stream time past the last window's end + grace.
    closing = [{"user": user, "at": START + 10_000} for user in USERS]
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_DELAY": "0.001",
           "ENGINE_DATA_DIR": str(tmp_path / "data"), **SHORT_SESSION}
    closed_topic = f"{app_id}-clicks-closed"
    await produce(kafka.bootstrap, topic, [(e["user"], e) for e in events])

    first = WorkerProcess(f"tests.integration.{app}:app", kafka.url, env, tmp_path / "first.log")
    try:
        await first.wait_for_output("running")  # its topics exist: reading them now cannot auto-create them
        # Some windows are closed and committed: the kill lands mid-stream, with windows half counted.
        await consume_until(kafka.bootstrap, closed_topic, lambda rs: len(rs) >= 40, timeout=90,
                            isolation_level="read_committed")
    finally:
        first.kill()
    second = WorkerProcess(f"tests.integration.{app}:app", kafka.url, env, tmp_path / "second.log")
    try:
        await produce(kafka.bootstrap, topic, [(c["user"], c) for c in closing])
        records = await consume_until(kafka.bootstrap, closed_topic, lambda rs: len(rs) >= len(truth),
                                      timeout=120, isolation_level="read_committed")
        await asyncio.sleep(2)  # several more checkpoints: a repeated close would show up now
        records = await consume_until(kafka.bootstrap, closed_topic, lambda rs: len(rs) >= len(records),
                                      isolation_level="read_committed")
    finally:
        assert second.terminate() == 0
    closes = decoded(records)
    windows = Counter((user, start) for user, start, _ in closes)
    assert [w for w, n in windows.items() if n > 1] == []  # no window closed twice
    assert {(user, start): value for user, start, value in closes} == dict(truth)  # none lost, all exact
    assert "recovered" in second.output()
