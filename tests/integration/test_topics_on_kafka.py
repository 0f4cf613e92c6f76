"""Topics on a real broker: engine's clients never let the broker auto-create a topic, `engine send` refuses a
misspelled topic, and a topology that does not fit the broker's topics is refused at start with its exact
message."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

import engine
from engine.errors import TopologyError
from engine.transport import open_transport
from tests.integration.helpers import ROOT, consume_until, create_topics, unique

pytestmark = pytest.mark.kafka


async def existing(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


def send(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", "send", "-A", "examples.wordcount:app",
                           "--broker", url, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


async def test_engine_clients_never_auto_create_a_topic(kafka):
    missing = unique("never-created")
    transport = open_transport(kafka.url, {})
    consumer = transport.consumer(group_id=unique("g"))
    await consumer.start()
    try:
        consumer.subscribe([missing])  # (subscribed before start, aiokafka refuses a missing topic at once)
        await consumer.getmany(2.0, 10)
    finally:
        await consumer.stop()
    producer = transport.producer()
    await producer.start()
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011  # aiokafka's timeout: the topic never appears
            await asyncio.wait_for(producer.send(missing, None, b"x"), 5)
    finally:
        await producer.stop()
    assert missing not in await existing(kafka.bootstrap)


async def test_engine_send_refuses_a_misspelled_topic_and_creates_on_request(kafka):
    misspelled = unique("lnes")
    result = await asyncio.to_thread(send, kafka.url, misspelled, "hello")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"engine: topic {misspelled!r} does not exist on {kafka.url} and app 'wordcount' does not declare it "
        "(it declares lines, words); check the name, or pass --create to create it")
    assert misspelled not in await existing(kafka.bootstrap)

    result = await asyncio.to_thread(send, kafka.url, misspelled, "hello", "--create")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"created topic {misspelled} with 4 partitions"
    assert result.stdout.splitlines()[1].startswith(f"sent to {misspelled}[")


async def test_engine_send_sends_a_file_of_json_lines_with_keys_timestamps_and_headers(kafka, tmp_path):
    topic = unique("lines")
    records = [{"key": f"k{i}", "value": f"line {i}", "timestamp_ms": 1_700_000_000_000 + i,
                "headers": {"source": "file"}} for i in range(25)]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(orjson.dumps(r).decode() for r in records) + "\n\n")
    result = await asyncio.to_thread(send, kafka.url, topic, "--file", str(path), "--create")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"sent 25 records to {topic}"
    got = await consume_until(kafka.bootstrap, topic, lambda rs: len(rs) >= 25)
    assert sorted((r.key.decode(), r.value.decode(), r.timestamp, list(r.headers)) for r in got) == sorted(
        (f'"{r["key"]}"', f'"{r["value"]}"', r["timestamp_ms"], [("source", b"file")]) for r in records)

    path.write_text('{"value": "ok"}\nnot json\n')
    result = await asyncio.to_thread(send, kafka.url, topic, "--file", str(path))
    assert result.returncode == 1
    assert result.stderr.startswith(f"engine: {path}, line 2: ")

    one = await asyncio.to_thread(send, kafka.url, topic, "single", "--key", "k", "--timestamp-ms", "1234")
    assert one.returncode == 0, one.stderr
    got = await consume_until(kafka.bootstrap, topic, lambda rs: len(rs) >= 27)
    assert [(r.key, r.timestamp) for r in got if r.value == b'"single"'] == [(b'"k"', 1234)]


async def test_a_topology_that_does_not_fit_the_broker_is_refused_at_start(kafka, tmp_path):
    orders, source = unique("orders"), unique("fx")
    await create_topics(kafka.bootstrap, [orders], partitions=2)
    await create_topics(kafka.bootstrap, [source], partitions=4)  # cleanup.policy: the default, delete
    app = engine.App(unique("fit"), broker=kafka.url, data_dir=str(tmp_path))
    rates = app.Table("rates", source_topic=source, key_type=str)

    @app.agent(app.topic(orders, key_type=str))
    async def convert(stream):
        async for _ in stream.join(rates):
            pass

    worker = engine.Worker(app, app.settings())
    try:
        with pytest.raises(TopologyError) as raised:
            await worker.start()
    finally:
        await worker.stop()
    assert str(raised.value) == (
        f"the topology does not fit the broker: topic {source!r} is the source of table 'rates' but its "
        "cleanup.policy is 'delete', not compact: old keys would be deleted by retention and the table would "
        "lose them on recovery; set cleanup.policy=compact on the topic; agent 'convert' joins stream "
        f"{orders!r} with table 'rates', so their topics must have the same number of partitions, but "
        f"{orders!r} has 2, {source!r} has 4; declare the same partitions= on both, or recreate the smaller "
        "one (and re-key with group_by if the source cannot change)")
