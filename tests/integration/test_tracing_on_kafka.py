"""Tracing through `engine worker` on a real broker (tracing_apps.py, exactly-once): records produced with a
W3C `traceparent` (and one without), regrouped through a repartition topic, each output record in the trace
of its input, with the spans the worker's OpenTelemetry SDK recorded linked parent to child, and the spans of
checkpoints and of the revoke a second worker's joining makes."""

from __future__ import annotations

import json
import secrets

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.helpers import WorkerProcess, consume_until, create_topics, read_all, unique

pytestmark = pytest.mark.kafka


def traceparent(headers) -> tuple[str, str, str]:
    """(trace id, parent span id, flags) of the one traceparent header of a record."""
    found = [value.decode() for name, value in headers if name == "traceparent"]
    assert len(found) == 1, headers
    _, trace_id, span_id, flags = found[0].split("-")
    return trace_id, span_id, flags


async def test_one_trace_from_an_input_record_through_a_repartition_to_the_output_record(kafka, tmp_path):
    app_id, topic = unique("itrace"), unique("orders")
    await create_topics(kafka.bootstrap, [topic, f"{topic}-out"])
    # Upstream services' contexts: (trace id, span id) per order; o6 comes without one.
    parents = {f"o{i}": (secrets.token_hex(16), secrets.token_hex(8)) for i in range(6)}
    orders = {order: {"id": order, "customer": f"c{i % 3}"} for i, order in enumerate([*parents, "o6"])}
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic,
           "ENGINE_REPARTITION_PURGE_INTERVAL": "3600"}  # the repartition records stay, for the test to read
    spans_file = tmp_path / "spans.jsonl"
    worker = WorkerProcess("tests.integration.tracing_apps:app", kafka.url,
                           {**env, "ITEST_SPANS": str(spans_file)}, tmp_path / "worker.log")
    second = None
    try:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
        await producer.start()
        try:
            for order, value in orders.items():
                headers = [("tenant", b"t1")]
                if order in parents:
                    trace_id, span_id = parents[order]
                    headers.append(("traceparent", f"00-{trace_id}-{span_id}-01".encode()))
                await producer.send_and_wait(topic, orjson.dumps(value), key=order.encode(), headers=headers)
        finally:
            await producer.stop()
        outputs = await consume_until(kafka.bootstrap, f"{topic}-out", lambda rs: len(rs) >= len(orders),
                                      timeout=90, workers=[worker])
        repartition = await read_all(kafka.bootstrap, f"{app_id}-by-customer-repartition")
        # A second worker joins: the first gives up some partitions (a rebalance, with its span).
        second = WorkerProcess("tests.integration.tracing_apps:app", kafka.url,
                               {**env, "ITEST_SPANS": str(tmp_path / "spans-2.jsonl")},
                               tmp_path / "second.log")
        await worker.wait_for_output("revoked", timeout=90)
        await second.wait_for_output("ready", timeout=90)
    finally:
        worker.stop()
        if second is not None:
            second.stop()

    by_order = {orjson.loads(r.value)["order"]: r for r in outputs}
    assert set(by_order) == set(orders)
    regrouped = {orjson.loads(r.value)["id"]: r for r in repartition}
    assert set(regrouped) == set(orders)
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    by_id = {span["span_id"]: span for span in spans}
    for order, (trace_id, upstream) in parents.items():
        # The output record carries the context of the span of the regrouped record's processing...
        out_trace, second_id, flags = traceparent(by_order[order].headers)
        assert (out_trace, flags) == (trace_id, "01"), order
        second = by_id[second_id]
        assert second["name"] == f"process {app_id}-by-customer-repartition"
        assert second["kind"] == "CONSUMER"
        # ...whose parent is the span of the input record's processing, the child of the upstream service's
        # span: one trace, linked parent to child, end to end.
        first = by_id[second["parent_id"]]
        assert (first["name"], first["trace_id"], first["parent_id"]) == (f"process {topic}", trace_id,
                                                                          upstream)
        assert first["attributes"]["engine.agent"] == "regroup"
        assert first["attributes"]["messaging.destination.name"] == topic
        # The repartition record carried the first span's context, beside the record's own headers.
        assert traceparent(regrouped[order].headers) == (trace_id, first["span_id"], "01")
        assert ("tenant", b"t1") in regrouped[order].headers
    # The record without a context started a trace of its own, rooted at its input's span.
    new_trace, second_id, _ = traceparent(by_order["o6"].headers)
    assert new_trace not in {trace_id for trace_id, _ in parents.values()}
    root = by_id[by_id[second_id]["parent_id"]]
    assert (root["name"], root["trace_id"], root["parent_id"]) == (f"process {topic}", new_trace, None)
    # Checkpoints that committed, and the worker's assignment, have spans too.
    names = [span["name"] for span in spans]
    assert "engine rebalance assigned" in names
    revokes = [span for span in spans if span["name"] == "engine rebalance revoked"]
    assert revokes
    assert all(span["parent_id"] is None and span["attributes"]["engine.partition_count"] >= 1
               for span in revokes)
    assert any(span["name"] == "engine checkpoint" and span["attributes"]["engine.checkpoint.partitions"] >= 1
               for span in spans)
