"""The app's page in a real browser (headless Chromium from the distribution's packages, driven by Playwright)
against two `engine worker`s on the broker: it loads with no console error, draws the topology, shows both
workers with the group's tasks split between them, shows a third worker once it joins, and shows a dead
letter with its reason after a poisoned record. Screenshots go to build/test-artifacts/."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.async_api import async_playwright

from tests.integration.helpers import WorkerProcess, create_topics, produce, unique

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = [pytest.mark.kafka, pytest.mark.both_protocols]

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
# What Chromium needs on a machine without a display or a network beyond loopback (the machine's notes):
# no sandbox (as root), no GPU, and none of its own background connections.
FLAGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
WAIT_MS = 90_000
NONE = "\u2013"  # what the page shows in a cell with nothing in it (an en dash)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Chromium is not installed: tests/run.sh installs Debian's package `chromium`"
    return found


def address_of(worker: WorkerProcess) -> str:
    found = re.search(r"web server at http://(\S+) ", worker.output())
    assert found, worker.output()[-2000:]
    return found.group(1)


async def group_rows(page: Page) -> list[dict[str, str]]:
    """The group table's rows as the page shows them: each worker's cells by column."""
    rows: list[dict[str, str]] = await page.evaluate("""() => {
        const names = [...document.querySelectorAll('#group thead th')].map((th) => th.textContent);
        return [...document.querySelectorAll('#group tbody tr')].map((tr) =>
            Object.fromEntries([...tr.children].map((td, i) => [names[i], td.textContent])));
    }""")
    return rows


async def shot(page: Page, what: str, protocol: str) -> None:
    """A screenshot of the whole page, kept as a test artefact."""
    await page.screenshot(path=str(ARTIFACTS / f"page-{what}-{protocol}.png"), full_page=True)


def tasks(cell: str) -> set[int]:
    return set() if cell == NONE else {int(n) for n in cell.split(", ")}


async def test_the_page_shows_the_group_and_its_dead_letters_live(kafka, tmp_path, group_protocol):
    app_id, topic = unique("page"), unique("page-words")
    await create_topics(kafka.bootstrap, [topic])
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_WEB_PORT": "0"}
    workers = [WorkerProcess("tests.integration.page_apps:app", kafka.url, env, tmp_path / f"{name}.log")
               for name in ("a", "b")]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    try:
        for worker in workers:
            await worker.wait_for_output("web server at")
        await produce(kafka.bootstrap, topic, [(f"w{i % 13}".encode(), b"x") for i in range(200)], raw=True)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium(), args=FLAGS,
                                                       chromium_sandbox=False)
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda said: errors.append(said.text) if said.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(f"http://{address_of(workers[0])}/")

            # Both workers, every task on one of them.
            await page.wait_for_function("""(none) => {
                const rows = [...document.querySelectorAll('#group tbody tr')];
                return rows.length === 2 && rows.every((tr) => tr.children[3].textContent !== none);
            }""", arg=NONE, timeout=WAIT_MS)
            rows = await group_rows(page)
            assert {row["worker"] for row in rows} == {address_of(w) for w in workers}
            held = [tasks(row["active"]) for row in rows]
            assert held[0] | held[1] == {0, 1, 2, 3}
            assert not held[0] & held[1]
            assert all(row["protocol"] == group_protocol for row in rows)
            topology = json.loads(await page.evaluate("() => drawnTopology"))  # (the JSON it drew)
            drawn = await page.evaluate("() => document.querySelectorAll('#topology g.node').length")
            assert drawn == len(topology["nodes"])
            assert await page.locator("#topology g.node[data-id='agent:count']").count() == 1
            await shot(page, "two-workers", group_protocol)

            # A third worker joins: the page shows it (every worker asked through the group's routing).
            workers.append(WorkerProcess("tests.integration.page_apps:app", kafka.url, env,
                                         tmp_path / "c.log"))
            await page.wait_for_function(
                "() => document.querySelectorAll('#group tbody tr').length === 3", timeout=WAIT_MS)
            assert address_of(workers[2]) in {row["worker"] for row in await group_rows(page)}
            await shot(page, "three-workers", group_protocol)

            # A poisoned record: its dead letter, with its reason and its record, once the agent failed on it.
            await produce(kafka.bootstrap, topic, [(b"w5", b"poison")], raw=True)
            await page.wait_for_function(
                "() => (document.querySelector('#dead-letters li') || {}).textContent?.includes('poisoned')",
                timeout=WAIT_MS)
            letter = await page.locator("#dead-letters li").first.text_content()
            assert letter is not None
            assert "agent count" in letter
            assert "ValueError: the word 'w5' came poisoned" in letter
            counts = await page.locator("#dead-letter-counts").text_content()
            assert counts is not None
            assert f"count: 1 (to {app_id}-count-dlq)" in counts
            await shot(page, "dead-letter", group_protocol)
            await browser.close()
    finally:
        for worker in workers:
            worker.stop()
    assert errors == []  # nothing the page did failed in the browser
