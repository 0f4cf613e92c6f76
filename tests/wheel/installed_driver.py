"""A driver test as an app's own suite holds one, run by tests/wheel/check.sh from a temporary directory with
the installed wheel (copied there as test_installed_driver.py): the `engine_driver` fixture comes from the
wheel's pytest plugin, the example from engine_examples, and engine itself from the venv, not the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_examples import wordcount

import engine


def test_engine_is_the_installed_one() -> None:
    assert "site-packages" in Path(engine.__file__).parts


def test_wordcount_counts_with_the_plugins_driver(engine_driver) -> None:
    driver = engine_driver(wordcount.app)
    driver.send(wordcount.lines, value="the fox and the dog")
    assert driver.table("word-counts") == {"the": 2, "fox": 1, "and": 1, "dog": 1}


def test_an_agent_that_crashes_fails_the_send(engine_driver) -> None:
    app = engine.App("crashing")
    numbers = app.topic("numbers", value_type=int)

    @app.agent(numbers)
    async def broken(stream):
        raise RuntimeError("cannot start: no model file")
        async for _ in stream:  # (never reached: the point)
            pass

    with pytest.raises(engine.WorkerFailed, match="no model file"):  # (at the driver's start, here)
        engine_driver(app).send(numbers, value=1)
