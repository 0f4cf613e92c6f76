"""The event loop setting: uvloop when installed ("auto"), asyncio's own when asked, a clear error for a bad
choice; the worker names its loop in its start-up line."""

from __future__ import annotations

import logging

import pytest

import engine
from engine import loops
from engine.errors import ConfigError


async def _loop_kind() -> str:
    return loops.running_loop_name()


def test_auto_runs_on_uvloop_and_asyncio_on_asyncio():
    assert loops.run(_loop_kind(), "auto") == "uvloop"  # installed with the dev extra
    assert loops.run(_loop_kind(), "uvloop") == "uvloop"
    assert loops.run(_loop_kind(), "asyncio") == "asyncio"


def test_a_bad_event_loop_setting_is_a_config_error():
    with pytest.raises(ConfigError, match="event_loop"):
        engine.App("loops", event_loop="trio").settings()


def test_the_worker_says_which_loop_it_runs_on(caplog, tmp_path):
    from engine import testing

    app = engine.App("loops-app")

    async def main() -> None:
        async with testing.running(app, data_dir=str(tmp_path)):
            pass

    with caplog.at_level(logging.INFO, logger="engine"):
        loops.run(main(), "uvloop")
    assert any("(event loop: uvloop)" in r.getMessage() for r in caplog.records)
