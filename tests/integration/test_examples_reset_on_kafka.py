"""Every example app of examples/ on the real broker, as a user runs it: `engine worker` over a known input,
`engine reset --execute`, `engine worker` again. The tables of both runs equal ground truth computed here from
the input, and the second run's output records equal the first's. The plan's classes are checked too: the
word count's `words` and the not-viewing ticks are written by the app and read by it again (intermediate:
to their end), every other topic an example reads is an input (to its start).

The examples' app ids and topics are fixed names, and the broker is the session's: each test first deletes
those of its example (another test may have run it), which also drops the group's offsets on them."""

from __future__ import annotations

import importlib
import os
import random
import re
import subprocess
import sys
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from engine.tables.keys import META_PREFIX, split_window_key
from engine.tools import build_topology
from examples import inventory
from tests.integration.helpers import (
    ROOT,
    WorkerProcess,
    committed_offsets,
    committed_to_end,
    create_topics,
    delete_topic,
    produce,
    read_all,
    until_done,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable
    from pathlib import Path

pytestmark = pytest.mark.kafka

PARTITIONS = 4  # the examples' topics have the default `topic_partitions`
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z: event times of the windowed examples' input
ENV = {"ENGINE_COMMIT_INTERVAL": "0.2", "NOT_VIEWING_TICK_SECONDS": "0.5"}


class Example:
    """One example app on the broker: its runs through `engine worker`, its reset through the CLI, and its
    tables and topics as the broker has them."""

    def __init__(self, kafka: Any, tmp_path: Path, module: str) -> None:
        self.bootstrap, self.url = kafka.bootstrap, kafka.url
        self.spec = f"examples.{module}:app"
        self.app = importlib.import_module(f"examples.{module}").app
        self.tmp = tmp_path
        self.env = {**ENV, "ENGINE_DATA_DIR": str(tmp_path / "data")}
        self.runs = 0

    async def fresh(self, inputs: Iterable[str]) -> None:
        """None of the example's topics from an earlier run of it; its `inputs` made as a team makes them."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
        finally:
            await admin.close()
        for name in sorted(set(build_topology(self.app, self.app.settings()).topics) & existing):
            await delete_topic(self.bootstrap, name)
        await create_topics(self.bootstrap, inputs, partitions=PARTITIONS)

    def start(self) -> WorkerProcess:
        self.runs += 1
        return WorkerProcess(self.spec, self.url, self.env, self.tmp / f"run-{self.runs}.log")

    async def run(self, read: Iterable[str], feed: Callable[[WorkerProcess], Awaitable[None]] | None = None,
                  until: Callable[[], Awaitable[tuple[bool, Any]]] | None = None) -> None:
        """A worker from start to a clean stop, once the group has committed every topic of `read` to its
        end (everything in them processed and checkpointed) and `until` says so; `feed` sends input while
        it runs."""
        worker = self.start()
        try:
            await worker.wait_for_output(f"worker {self.app.id} running", 120)  # (its group is there)
            if feed is not None:
                await feed(worker)
            for topic in read:
                await committed_to_end(self.bootstrap, self.app.id, topic, PARTITIONS, workers=[worker])
            if until is not None:
                await until_done(until, f"{self.app.id}: run {self.runs}", workers=[worker])
        finally:
            code = worker.terminate(timeout=60)
        assert code == 0, worker.output()[-3000:]
        started = worker.output().split(f"worker {self.app.id} running")[0]
        assert " ERROR " not in started, f"a healthy start prints no ERROR:\n{started[-3000:]}"

    def reset(self, *options: str, execute: bool = True) -> str:
        """`engine reset [options] --execute`: the plan it printed."""
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", "reset", "-A", self.spec, "--broker", self.url, *options,
             *(["--execute"] if execute else [])],
            cwd=ROOT, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=120,
            check=False)
        assert done.returncode == 0, done.stderr
        assert ("reset done" if execute else "nothing done") in done.stdout
        return done.stdout

    async def ends(self, topic: str) -> dict[int, int]:
        """Each partition's end offset."""
        reader = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await reader.start()
        try:
            ends = await reader.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
        finally:
            await reader.stop()
        return {tp.partition: end for tp, end in ends.items()}

    async def records(self, topic: str, since: dict[int, int] | None = None) -> list[Any]:
        """The records of `topic` (from `since`, each partition's offset), in each partition's order."""
        found = [r for r in await read_all(self.bootstrap, topic)
                 if since is None or r.offset >= since[r.partition]]
        return sorted(found, key=lambda r: (r.partition, r.offset))

    async def table(self, name: str) -> dict[Any, Any]:
        """A table's rows as its changelog ends (a windowed table's keys: (key, window start in seconds))."""
        rows: dict[Any, Any] = {}
        for record in await self.records(f"{self.app.id}-{name}-changelog"):
            if record.key.startswith(META_PREFIX):
                continue  # engine's own record (a windowed partition's stream time)
            key: Any = record.key.decode() if self.app.tables[name].window is None else None
            if key is None:
                inner, start_ms = split_window_key(record.key)
                key = (inner.decode(), start_ms // 1000)
            if record.value is None:
                rows.pop(key, None)
            else:
                rows[key] = self.app.tables[name].value_codec.decode(record.value)
        return rows


def by_key(records: Iterable[Any]) -> dict[str, list[Any]]:
    """Output records as each key's values in order (one key is in one partition, in order)."""
    found: dict[str, list[Any]] = defaultdict(list)
    for record in records:
        found[record.key.decode()].append(orjson.loads(record.value))
    return dict(found)


def classes(plan: str) -> dict[str, str]:
    """Each topic of a printed plan with its class."""
    return dict(re.findall(r"^  (\S+): (input|intermediate|internal) ", plan, re.MULTILINE))


async def test_wordcount_counts_each_word_once_after_a_reset(kafka, tmp_path):
    example = Example(kafka, tmp_path, "wordcount")
    await example.fresh(["lines", "words"])
    rng = random.Random(40)
    text = [" ".join(rng.choice(["alpha", "beta", "Gamma", "delta"]) for _ in range(rng.randint(1, 6)))
            for _ in range(80)]
    truth = Counter(word.lower() for line in text for word in line.split())
    await produce(kafka.bootstrap, "lines", [(None, line.encode()) for line in text], raw=True)

    await example.run(["lines", "words"])
    assert await example.table("word-counts") == truth
    assert Counter(r.key.decode() for r in await example.records("words")) == truth
    before = await example.ends("words")

    said = example.reset("--input", "words", execute=False)  # what a user who knows better says wins
    assert classes(said) == {"lines": "input", "words": "input"}
    assert "  words: input (as said)" in said
    plan = example.reset()
    assert classes(plan) == {"lines": "input", "words": "intermediate"}
    assert "  words: intermediate (written by agent split: `words.send` (wordcount.py:" in plan
    for partition, end in before.items():  # to its end ("-": nothing was committed, none was there)
        assert re.search(rf"^    words\[{partition}\]: ({end}|-) -> {end}$", plan, re.MULTILINE), plan
    for partition in range(PARTITIONS):
        assert re.search(rf"^    lines\[{partition}\]: \d+ -> 0$", plan, re.MULTILINE), plan

    await example.run(["lines", "words"])
    assert await example.table("word-counts") == truth, "each word counted once, as in the first run"
    assert Counter(r.key.decode() for r in await example.records("words", before)) == truth


async def test_fraud_flags_the_same_payments_after_a_reset(kafka, tmp_path):
    example = Example(kafka, tmp_path, "fraud")
    await example.fresh(["payments"])
    rng = random.Random(41)
    payments = [{"id": f"p{n}", "customer": rng.choice(["ada", "bob", "eve", "kim", "lin"]),
                 "amount": float(rng.randint(1, 900)), "country": rng.choice(["FR", "NL", "DE", "BR"])}
                for n in range(120)]
    seen: dict[str, list[str]] = {}
    suspicious: dict[str, list[Any]] = defaultdict(list)
    for payment in payments:  # the example's rule, per customer in order
        countries = seen.setdefault(payment["customer"], [])
        if payment["country"] not in countries:
            if countries:
                suspicious[payment["customer"]].append(payment)
            countries.append(payment["country"])
    await produce(kafka.bootstrap, "payments", [(p["customer"], p) for p in payments])

    await example.run(["payments"])
    assert await example.table("countries-seen") == seen
    assert by_key(await example.records("suspicious-payments")) == suspicious
    before = await example.ends("suspicious-payments")

    assert classes(example.reset()) == {"payments": "input"}
    await example.run(["payments"])
    assert await example.table("countries-seen") == seen
    assert by_key(await example.records("suspicious-payments", before)) == suspicious


async def test_inventory_keeps_the_same_stock_after_a_reset(kafka, tmp_path):
    example = Example(kafka, tmp_path, "inventory")
    await example.fresh(["shipments", "sales"])
    rng = random.Random(42)
    skus = [f"sku-{n}" for n in range(6)]
    shipments = [{"sku": sku, "quantity": 60} for sku in skus]
    sales = [{"sku": rng.choice(skus), "quantity": rng.randint(1, 4)} for _ in range(150)]
    stock: Counter[str] = Counter({s["sku"]: s["quantity"] for s in shipments})
    reorders: dict[str, list[Any]] = defaultdict(list)
    for sale in sales:  # the example's rule, the shelves stocked first
        before = stock[sale["sku"]]
        stock[sale["sku"]] -= sale["quantity"]
        if stock[sale["sku"]] < inventory.REORDER_BELOW <= before:
            reorders[sale["sku"]].append({"sku": sale["sku"], "quantity": inventory.REORDER_QUANTITY,
                                          "stock": stock[sale["sku"]]})
    assert reorders, "the input crosses the threshold"

    async def stock_the_shelves_first(worker: WorkerProcess) -> None:
        await produce(kafka.bootstrap, "shipments", [(s["sku"], s) for s in shipments])
        await committed_to_end(kafka.bootstrap, "inventory", "shipments", PARTITIONS, workers=[worker])
        await produce(kafka.bootstrap, "sales", [(s["sku"], s) for s in sales])

    await example.run(["shipments", "sales"], feed=stock_the_shelves_first)
    assert await example.table("stock") == stock
    assert by_key(await example.records("reorders")) == reorders
    before = await example.ends("reorders")

    assert classes(example.reset()) == {"sales": "input", "shipments": "input"}
    await example.run(["shipments", "sales"])
    assert await example.table("stock") == stock
    # (Over the backlog, the shipments come first again: both agents use `stock`, so their topics go in
    # timestamp order, one agent at a time.)
    assert by_key(await example.records("reorders", before)) == reorders


async def test_not_viewing_notifies_once_per_tick_after_a_reset(kafka, tmp_path):
    """Ticks are sent by a timer and read by an agent: intermediate. Each notification answers one tick of
    its own run about a user whose app is closed: ticks of the first run are not read again."""
    example = Example(kafka, tmp_path, "not_viewing")
    await example.fresh(["app-events", "not-viewing-ticks"])
    actions = {f"user-{n}": "Open" if n % 3 == 0 else "Close" for n in range(12)}  # one each: final at once
    closed = {user for user, action in actions.items() if action == "Close"}
    await produce(kafka.bootstrap, "app-events", [(u, {"user": u, "action": a}) for u, a in actions.items()])

    async def check_run(ticks_from: dict[int, int], notes_from: dict[int, int]) -> None:
        async def every_closed_user_notified() -> tuple[bool, Any]:
            notified = {r.key.decode() for r in await example.records("notifications", notes_from)}
            return notified == closed, len(notified)

        await example.run(["app-events"], until=every_closed_user_notified)
        assert await example.table("status") == actions
        tps = [TopicPartition("not-viewing-ticks", p) for p in range(PARTITIONS)]
        committed = await committed_offsets(kafka.bootstrap, "not-viewing", tps)
        processed = Counter(r.key.decode() for r in await example.records("not-viewing-ticks", ticks_from)
                            if r.offset < committed.get(TopicPartition(r.topic, r.partition), 0))
        notes = await example.records("notifications", notes_from)
        assert Counter(r.key.decode() for r in notes) == Counter(
            {user: n for user, n in processed.items() if user in closed})
        assert {orjson.loads(r.value)["message"] for r in notes} == {"you are not viewing the app"}

    nothing = dict.fromkeys(range(PARTITIONS), 0)
    await check_run(nothing, nothing)
    ticks_end, notes_end = await example.ends("not-viewing-ticks"), await example.ends("notifications")
    plan = example.reset()
    assert classes(plan) == {"app-events": "input", "not-viewing-ticks": "intermediate"}
    assert "written by timer tick: `ticks.send` (not_viewing.py:" in plan
    for partition, end in ticks_end.items():  # to its end
        target = rf"^    not-viewing-ticks\[{partition}\]: ({end}|-) -> {end}$"
        assert re.search(target, plan, re.MULTILINE), plan
    await check_run(ticks_end, notes_end)


def notification_truth(events: list[tuple[str, int]]) -> tuple[dict[Any, int], dict[str, list[Any]]]:
    """The notifications example's windows (10 minutes, hopping every minute: a user's count in each window
    with an event) and its mutes (after an event, the user's count in the newest window containing its time
    9 minutes earlier reaches 6), for events in time order."""
    windows: Counter[tuple[str, int]] = Counter()
    mutes: dict[str, list[Any]] = defaultdict(list)
    for user, at in events:
        for start in range(at - at % 60 - 540, at - at % 60 + 1, 60):
            windows[(user, start)] += 1
        earlier = at - 540
        if windows[(user, earlier - earlier % 60)] == 6:
            mutes[user].append({"user": user, "notifications": 6})
    return dict(windows), mutes


async def test_notifications_counts_the_same_windows_after_a_reset(kafka, tmp_path):
    example = Example(kafka, tmp_path, "notifications")
    await example.fresh(["notifications-sent"])
    rng = random.Random(43)
    times = sorted(T0 + rng.randint(0, 1200) for _ in range(160))  # 20 minutes, in time order
    events = [(rng.choice(["ada", "bob", "cy"]), at) for at in times]
    windows, mutes = notification_truth(events)
    assert mutes, "the input mutes someone"
    await produce(kafka.bootstrap, "notifications-sent",
                  [(user, {"user": user, "text": "come back", "at": at}) for user, at in events])

    await example.run(["notifications-sent"])
    assert await example.table("recent-notifications") == windows
    assert by_key(await example.records("mute-requests")) == mutes
    before = await example.ends("mute-requests")

    assert classes(example.reset()) == {"notifications-sent": "input"}
    await example.run(["notifications-sent"])
    assert await example.table("recent-notifications") == windows
    assert by_key(await example.records("mute-requests", before)) == mutes


async def test_retail_tallies_the_same_windows_after_a_reset(kafka, tmp_path):
    example = Example(kafka, tmp_path, "retail")
    await example.fresh(["till-sales"])
    rng = random.Random(44)
    sales = [{"sku": rng.choice(["sku-1", "sku-2", "sku-3"]), "quantity": rng.randint(1, 3),
              "price": rng.choice([2.5, 1.25, 4.0]), "at": at}
             for at in sorted(T0 + rng.randint(0, 3600) for _ in range(300))]
    units: Counter[tuple[str, int]] = Counter()
    revenue: Counter[tuple[str, int]] = Counter()
    for sale in sales:
        window = (sale["sku"], sale["at"] - sale["at"] % 600)
        units[window] += sale["quantity"]
        revenue[window] += sale["quantity"] * sale["price"]  # (quarters: exact in binary)
    await produce(kafka.bootstrap, "till-sales", [(s["sku"], s) for s in sales])

    await example.run(["till-sales"])
    assert (await example.table("units-sold"), await example.table("revenue")) == (units, revenue)

    assert classes(example.reset()) == {"till-sales": "input"}
    await example.run(["till-sales"])
    assert (await example.table("units-sold"), await example.table("revenue")) == (units, revenue)
