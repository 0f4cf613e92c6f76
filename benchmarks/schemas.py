"""The count over typed values: the same records (~60 bytes of JSON: id, user, amount, ok) counted per user
into a RocksDB table with a changelog by one engine agent, with the value declared four ways, each on its own
preloaded topic of the same broker in the same run, alternating:

- `json`: `value_type=dict`, engine's JSON (the baseline);
- `dataclass`: a dataclass over JSON (its fields checked, engine.typecheck);
- `avro`: the dataclass in Avro, Confluent's wire format, through a real schema registry (Apicurio, started by
  tests.schema_registry; each record written by engine's own Avro codec);
- `pydantic`: a pydantic v2 model over JSON (validated).

    .venv/bin/python -m benchmarks.schemas [--broker host:port] [--messages 200000] [--rounds 3]
        [--registry URL]

Events/s from the first record processed to the last, and CPU µs/event; the figures are each format's rate
over json's, and Avro's over the same dataclass's over JSON (like for like: the same app, another
serializer), per round and their median. Checked: every count exact.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pydantic
from aiokafka import AIOKafkaProducer

import engine
from benchmarks.common import broker, create_topics, median, parser
from engine.runtime import settle_heap
from engine.schemas import Avro
from engine.schemas.registry import Registry
from tests.schema_registry import SchemaRegistry

KINDS = ("json", "dataclass", "avro", "pydantic")
USERS = 1000


@dataclass
class Purchase:
    id: int
    user: str
    amount: int
    ok: bool


class PurchaseModel(pydantic.BaseModel):
    id: int
    user: str
    amount: int
    ok: bool


def declared(app: engine.App, topic: str, kind: str) -> engine.Topic:
    if kind == "json":
        return app.topic(topic, key_type=str, value_type=dict)
    if kind == "dataclass":
        return app.topic(topic, key_type=str, value_type=Purchase)
    if kind == "avro":
        return app.topic(topic, key_type=str, value_type=Purchase,
                         value_serializer=Avro(record_name="bench.Purchase"))
    return app.topic(topic, key_type=str, value_type=PurchaseModel)


async def preload(bootstrap: str, registry: str, topic: str, kind: str, count: int) -> None:
    """`count` records on `topic`, written with the codec the count reads them with."""
    app = engine.App(f"bench-preload-{uuid.uuid4().hex[:6]}")
    target = declared(app, topic, kind)
    codec: Any = target.value_codec
    if kind == "avro":
        connected = Registry(registry)
        await codec.prepare(connected)
        await connected.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        for i in range(count):
            fields = {"id": i, "user": f"user-{i % USERS}", "amount": i % 97, "ok": True}
            value = (fields if kind == "json" else PurchaseModel(**fields) if kind == "pydantic"
                     else Purchase(**fields))
            await producer.send(topic, codec.encode(value), key=str(i % USERS).encode())
        await producer.flush()
    finally:
        await producer.stop()


async def count_job(bootstrap: str, registry: str, topic: str, kind: str, count: int) -> tuple[float, float]:
    data_dir = tempfile.mkdtemp(prefix=f"bench-{kind}-")
    app = engine.App(f"bench-{uuid.uuid4().hex[:8]}", broker=f"kafka://{bootstrap}", data_dir=data_dir,
                     schema_registry_url=registry)
    events = declared(app, topic, kind)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    done = asyncio.Event()
    seen = 0
    first: list[float] = []

    @app.agent(events)
    async def count_users(stream):
        nonlocal seen
        async for event in stream.events():
            if not first:
                first.extend((time.perf_counter(), time.process_time()))
            value = event.value
            counts[event.key] += 1 if (value["ok"] if kind == "json" else value.ok) else 0
            seen += 1
            if seen == count:
                done.set()

    worker = engine.Worker(app, app.settings())
    await worker.start()
    settle_heap()
    try:
        await done.wait()
        rate = count / (time.perf_counter() - first[0])
        cpu = (time.process_time() - first[1]) / count * 1e6
        truth = Counter(str(i % USERS) for i in range(count))
        assert dict(counts.items()) == dict(truth), f"{kind}: counts differ from the input"
        return rate, cpu
    finally:
        gc.unfreeze()
        worker.request_stop()
        await worker.run_until_stopped()
        shutil.rmtree(data_dir, ignore_errors=True)


async def run(bootstrap: str, registry: str, messages: int, rounds: int, partitions: int) -> None:
    topics = {kind: f"bench-{kind}-{uuid.uuid4().hex[:6]}" for kind in KINDS}
    await create_topics(bootstrap, list(topics.values()), partitions)
    for kind, topic in topics.items():
        await preload(bootstrap, registry, topic, kind, messages)
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for n in range(rounds):
        order = KINDS if n % 2 == 0 else KINDS[::-1]
        line = []
        for kind in order:
            rate, cpu = await count_job(bootstrap, registry, topics[kind], kind, messages)
            rates[kind].append(rate)
            line.append(f"{kind} {rate:,.0f}/s ({cpu:.1f} µs CPU/event)")
        print(f"round {n + 1}: " + ", ".join(line), flush=True)
    for kind, base in (*((kind, "json") for kind in KINDS[1:]), ("avro", "dataclass")):
        ratios = [r / j for r, j in zip(rates[kind], rates[base], strict=True)]
        print(f"{kind}/{base}: median {median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--registry", help="the Confluent API URL of a running registry (default: start one)")
    args = p.parse_args()
    with broker(args.broker) as bootstrap:
        if args.registry:
            asyncio.run(run(bootstrap, args.registry, args.messages, args.rounds, args.partitions))
            return
        with SchemaRegistry() as registry:
            asyncio.run(run(bootstrap, registry.url, args.messages, args.rounds, args.partitions))


if __name__ == "__main__":
    main()
