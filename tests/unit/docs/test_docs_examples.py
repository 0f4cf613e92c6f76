"""Every Python example of the docs (README.md and docs/) runs as it is written, so an example that does not
run fails CI. A page's blocks run in order in one namespace, as a reader follows the page; the `test_*`
functions a block defines are called (a reader copies them into a test file); every app a page builds is
then started under the TestDriver, which runs its agents up to their first event and plans its topology
(the group_by, join and window declarations the examples make are checked there, not only their syntax)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from typing import TYPE_CHECKING, Any

import pytest

import engine
from engine.testing import TestDriver
from tests.unit.docs.markdown import ROOT, Block, pages, python_blocks

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

PAGES = [page for page in pages() if python_blocks(page)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_pages_python_examples_run_as_written(page: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # what an example writes (an export, a lake table) goes here
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    apps: dict[int, engine.App] = {}  # every app the page built, also one a later block named `app` again
    for block in python_blocks(page):
        if block.fragment is not None:
            assert_cannot_run_alone(block, namespace)
            continue
        before = dict(namespace)
        exec(block.compiled(), namespace)
        for name, value in list(namespace.items()):  # a test the block (re)defined: two may share a name
            if name.startswith("test_") and callable(value) and before.get(name) is not value:
                call_test(block, value, tmp_path / f"{name}-{block.line}")
        apps.update((id(v), v) for v in namespace.values() if isinstance(v, engine.App))
    for app in apps.values():
        with TestDriver(app):
            pass  # started: its agents ran up to their first event and its topology was planned


def assert_cannot_run_alone(block: Block, namespace: dict[str, Any]) -> None:
    """A fragment marker is for a block that cannot run where it stands; one that runs must drop it."""
    assert block.fragment, f"{block.where}: a fragment marker says why the block cannot run alone"
    try:
        exec(block.compiled(), dict(namespace))
    except Exception:  # any failure is what the marker claims
        return
    pytest.fail(f"{block.where}: the block is marked as a fragment ({block.fragment}) but it runs: drop the "
                "marker so that the tests run it")


def call_test(block: Block, test: Callable[..., Any], tmp_path: Path) -> None:
    """Calls a test as pytest would, each with its own fixtures: a `tmp_path`, and an `engine_driver` whose
    drivers are closed when the test ends (as the fixture of engine.testing.pytest_plugin does)."""
    with contextlib.ExitStack() as drivers:
        def engine_driver(app: engine.App, **settings: Any) -> TestDriver:
            return drivers.enter_context(TestDriver(app, **settings))

        fixtures = {"tmp_path": tmp_path, "engine_driver": engine_driver}
        wanted = list(inspect.signature(test).parameters)
        unknown = [name for name in wanted if name not in fixtures]
        assert not unknown, f"{block.where}: {test.__name__} asks for fixtures the docs tests lack: {unknown}"
        tmp_path.mkdir()
        run_test(block, test, test(**{name: fixtures[name] for name in wanted}))


def run_test(block: Block, test: Callable[..., Any], result: object) -> None:
    if inspect.iscoroutine(result):
        # Without a marker pytest-asyncio's default (strict) mode refuses an async test; this project's
        # asyncio_mode = "auto" would hide that from a reader who copies it, so the marker is checked here.
        marked = f"@pytest.mark.asyncio\nasync def {test.__name__}("
        if marked not in re.sub(r" *#.*", "", block.code):
            result.close()
            pytest.fail(f"{block.where}: the async test {test.__name__} needs @pytest.mark.asyncio")
        asyncio.run(result)


def test_every_fragment_says_why() -> None:
    """The fragments, listed: each carries its reason (its failing to run alone is checked with its page)."""
    fragments = [b for page in pages() for b in python_blocks(page) if b.fragment is not None]
    assert all(b.fragment for b in fragments), [b.where for b in fragments if not b.fragment]
    for block in fragments:
        compile(block.code, block.where, "exec")  # a fragment is still Python a reader can paste
