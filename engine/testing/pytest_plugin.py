"""The pytest fixture `engine_driver`, registered through the `pytest11` entry point (pytest is imported only
here, and only by pytest itself).

    def test_counts(engine_driver):
        driver = engine_driver(app)          # settings as keyword arguments, as TestDriver takes them
        driver.send(words, key="red", value=1)
        assert driver.table("counts") == {"red": 1}

Every driver it made is closed after the test, whether it passed or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from engine.testing.driver import TestDriver

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from engine.app import App


@pytest.fixture
def engine_driver() -> Iterator[Callable[..., TestDriver]]:
    """A factory of TestDrivers (`engine_driver(app, **settings)`), each closed after the test."""
    made: list[TestDriver] = []

    def make(app: App, **settings: Any) -> TestDriver:
        driver = TestDriver(app, **settings)
        made.append(driver)
        return driver

    yield make
    for driver in reversed(made):
        driver.close()
