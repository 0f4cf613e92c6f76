"""The README's wordcount example, end to end on a real broker through the `engine` CLI."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections import Counter

import pytest

from tests.integration.helpers import ROOT, WorkerProcess, consume_until, unique

pytestmark = pytest.mark.kafka


async def test_wordcount_end_to_end(kafka, tmp_path):
    # The example's app id and topics are fixed, so each run counts words no other run uses.
    marker = unique("w").replace("-", "")
    text = [f"the {marker}a fox", f"the {marker}b dog", f"{marker}a {marker}a"]
    env = {"ENGINE_DATA_DIR": str(tmp_path / "data")}
    worker = WorkerProcess("examples.wordcount:app", kafka.url, env, tmp_path / "wordcount.log")
    try:
        for line in text:
            await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "cli.main", "send", "-A", "examples.wordcount:app",
                 "--broker", kafka.url, "lines", line],
                cwd=ROOT, check=True, capture_output=True,
            )
        expected = Counter(w for line in text for w in line.split() if marker in w)

        def counted(records) -> dict[str, int]:
            latest: dict[str, int] = {}
            for r in records:
                word = r.key.decode()
                if marker in word:
                    latest[word] = int(r.value)
            return latest

        records = await consume_until(  # the counts table's changelog: its latest value per word
            kafka.bootstrap, "wordcount-word-counts-changelog",
            lambda rs: counted(rs) == dict(expected), timeout=90,
        )
        assert counted(records) == dict(expected)
        # The running worker answers the CLI (at the address it logged).
        one = next(iter(expected))
        address = re.search(r"web server at (http://\S+) ", worker.output())
        assert address, worker.output()[-3000:]
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "cli.main", "table", "get", "-A", "examples.wordcount:app",
             "word-counts", one, "--url", address.group(1)],
            cwd=ROOT, capture_output=True, text=True,
        )
        assert result.stdout.strip() == str(expected[one]), result.stderr
    finally:
        assert worker.terminate() == 0, worker.output()[-3000:]
    assert "worker wordcount running" in worker.output()
    # The local store answers the CLI offline, even beside (or after) the worker.
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cli.main", "table", "get", "-A", "examples.wordcount:app",
         "word-counts", one, "--offline", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.stdout.strip() == str(expected[one]), result.stderr


async def test_worker_stops_gracefully_within_seconds_on_sigterm(kafka, tmp_path):
    env = {"ENGINE_DATA_DIR": str(tmp_path / "data")}
    worker = WorkerProcess("examples.wordcount:app", kafka.url, env, tmp_path / "stop.log")
    for _ in range(600):
        if "running" in worker.output():
            break
        await asyncio.sleep(0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert worker.terminate(timeout=15) == 0
    assert loop.time() - started < 15
