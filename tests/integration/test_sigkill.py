"""Exactly-once across SIGKILLs, on a real broker: a worker killed again and again right after its tables are
ready (while its first transactions are in flight), restarted each time, with a plain count, a tumbling
count and one output record per event, and records far too late for their windows among them. Read
committed, every count, every window's final value, every output and every late record is exact, against
ground truth computed here."""

from __future__ import annotations

import asyncio
from collections import Counter

import orjson
import pytest

from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    create_topics,
    read_all,
    unique,
    until_done,
)
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import (
    START,
    Events,
    outputs,
    paced_produce,
    wait_until_complete,
    words,
)

pytestmark = [pytest.mark.kafka, pytest.mark.both_protocols]

KILLS_AFTER_READY = [0.1, 0.3, 0.6, 1.0, 1.5]  # seconds after "tables ready"


async def outputs_once_complete(bootstrap: str, app_id: str, truth: Counter[str]
                                ) -> tuple[dict[str, int], list[tuple[str, int, int]]]:
    """The outputs once every count reached `truth` (late records included; failing if they stop moving
    short of it), read again a few checkpoints later so that an over-count shows."""
    async def probe() -> tuple[bool, int]:
        counts, _ = await outputs(bootstrap, app_id)
        return all(counts.get(k, 0) >= n for k, n in truth.items()), sum(counts.values())

    await until_done(probe, "the counts reaching the truth")
    await asyncio.sleep(3)  # a few more checkpoints: a repeated count would show in this time
    return await outputs(bootstrap, app_id)


def with_late_ones(events: Events) -> Events:
    """Every 40th event from the 400th on gets a twin 1000 s before the stream's start: by then every
    partition's stream time is past that window's end and grace, so the twin is late (and only the twins)."""
    out: Events = []
    for index, (key, value) in enumerate(events):
        out.append((key, value))
        if index >= 400 and index % 40 == 0 and value["i"] >= 0:
            out.append((key, {"at": START - 1000, "i": 100_000 + index}))
    return out


async def test_exactly_once_stays_exact_across_sigkills_right_after_tables_ready(kafka, tmp_path):
    app_id, topic = unique("killed"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = with_late_ones(words(12_000))
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": "exactly_once", "ITEST_ECHO": "1",
           "ITEST_LATE": "1", "ENGINE_DATA_DIR": str(tmp_path / "data"), **SHORT_SESSION}
    producing = asyncio.ensure_future(paced_produce(kafka.bootstrap, topic, events, rate=600))
    runs: list[WorkerProcess] = []
    try:
        for round_, after in enumerate(KILLS_AFTER_READY):
            run = WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env,
                                tmp_path / f"run{round_}.log")
            runs.append(run)
            await run.wait_for_output("tables ready", 90)
            await asyncio.sleep(after)
            run.kill()
        last = WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env, tmp_path / "last.log")
        runs.append(last)
        await producing
        on_time = [(key, value) for key, value in events if value["at"] >= START]
        await wait_until_complete(kafka.bootstrap, app_id, on_time, timeout=180, workers=[last])
        truth_counts = Counter(key for key, _ in events)
        counts, closes = await outputs_once_complete(kafka.bootstrap, app_id, truth_counts)
        echoed = await read_all(kafka.bootstrap, f"{app_id}-echo")
        late = await read_all(kafka.bootstrap, f"{app_id}-per-window-late")
    finally:
        producing.cancel()
        if runs:
            runs[-1].terminate(timeout=60)
    assert {k: n for k, n in counts.items() if truth_counts[k] != n} == {}
    check(on_time, {k: n - sum(1 for key, v in events if key == k and v["at"] < START)
                    for k, n in counts.items()}, closes, exact=True)
    late_ones = Counter((r.key.decode(), orjson.loads(r.value)["i"]) for r in late)
    assert set(late_ones) == {(key, v["i"]) for key, v in events if v["at"] < START}, "every late record"
    assert {o: n for o, n in late_ones.items() if n > 1} == {}, "each late record once"
    sent = Counter((r.key.decode(), int(r.value)) for r in echoed)
    assert set(sent) == {(key, v["i"]) for key, v in events}, "every event's output"
    assert {o: n for o, n in sent.items() if n > 1} == {}, "each output once"
