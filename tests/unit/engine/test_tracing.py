"""Tracing (engine-streams[otel]) on the in-memory broker: the spans an app's OpenTelemetry SDK records, read
from the SDK's in-memory exporter, and the trace context in the records agents send, checked against the
context the test put into the input records' headers."""

from __future__ import annotations

import importlib
import secrets
import sys
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import engine
from engine import testing
from engine.errors import ConfigError, MissingDependency
from engine.settings_load import load_settings
from engine.testing import TestDriver


def _install() -> InMemorySpanExporter:
    """The process's tracer provider (OpenTelemetry allows one per process): the SDK's, with its default
    sampler (parent-based, always on at the root), exporting to memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


EXPORTER = _install()


@pytest.fixture
def spans() -> Any:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


class Parent:
    """A trace context as an upstream service would put it into a record: trace id, span id, sampled flag."""

    def __init__(self, sampled: bool = True) -> None:
        self.trace_id = secrets.token_hex(16)
        self.span_id = secrets.token_hex(8)
        self.flags = "01" if sampled else "00"

    @property
    def header(self) -> tuple[str, bytes]:
        return "traceparent", f"00-{self.trace_id}-{self.span_id}-{self.flags}".encode()


def traceparent(headers: Any) -> tuple[str, str, str]:
    """(trace id, parent span id, flags) of the one traceparent header in `headers`."""
    found = [value.decode() for name, value in headers if name == "traceparent"]
    assert len(found) == 1, headers
    _, trace_id, span_id, flags = found[0].split("-")
    return trace_id, span_id, flags


def hexes(span: ReadableSpan) -> tuple[str, str, str | None]:
    """(trace id, span id, parent span id) of a recorded span, as hex."""
    context = span.get_span_context()
    parent = span.parent
    return (f"{context.trace_id:032x}", f"{context.span_id:016x}",
            f"{parent.span_id:016x}" if parent is not None else None)


def regrouping_app(tracing: bool = True) -> tuple[engine.App, Any, Any]:
    """Orders keyed by order id, regrouped by customer through a repartition topic, then sent on."""
    app = engine.App("traced", broker=testing.memory_url(), store="memory://", topic_partitions=2,
                     tracing=tracing)
    orders = app.topic("orders", key_type=str, value_type=dict)
    totals = app.topic("totals", key_type=str, value_type=dict)

    @app.agent(orders)
    async def regroup(stream: Any) -> None:
        async for customer, order in stream.group_by(lambda o: o["customer"], name="by-customer").items():
            await totals.send(key=customer, value={"order": order["id"]})

    return app, orders, totals


def test_one_trace_from_the_input_record_through_the_repartition_to_the_output(spans):
    app, orders, totals = regrouping_app()
    parents = {f"o{i}": Parent() for i in range(3)}
    with TestDriver(app) as driver:
        for order, parent in parents.items():
            driver.send(orders, key=order, value={"id": order, "customer": f"c{order}"},
                        headers=[parent.header, ("tenant", b"t1")])
        outputs = {record.value["order"]: record for record in driver.read(totals)}
        repartition = driver.read("traced-by-customer-repartition")
        repartitioned = {record.value["id"]: record for record in repartition}

    assert set(outputs) == set(parents)
    recorded = {hexes(span)[1]: span for span in spans.get_finished_spans()}
    for order, parent in parents.items():
        # The input record's span: a child of the upstream service's, in its trace.
        first = [s for s in recorded.values() if s.name == "process orders" and hexes(s)[2] == parent.span_id]
        assert len(first) == 1, order
        trace_id, first_id, _ = hexes(first[0])
        assert trace_id == parent.trace_id
        assert first[0].kind is SpanKind.CONSUMER
        assert first[0].attributes["engine.agent"] == "regroup"
        # The repartition record carries it (its own traceparent replaced, its other headers kept)...
        assert traceparent(repartitioned[order].headers) == (parent.trace_id, first_id, "01")
        assert ("tenant", b"t1") in repartitioned[order].headers
        # ...and its span is the parent of the regrouped record's span, whose context the output carries.
        out_trace, out_parent, flags = traceparent(outputs[order].headers)
        assert (out_trace, flags) == (parent.trace_id, "01")
        second = recorded[out_parent]
        assert second.name == "process traced-by-customer-repartition"
        assert hexes(second) == (parent.trace_id, out_parent, first_id)


def test_a_record_without_trace_context_starts_a_trace(spans):
    app, orders, totals = regrouping_app()
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value={"id": "o1", "customer": "c1"})
        [output] = driver.read(totals)

    trace_id, parent_id, _ = traceparent(output.headers)
    in_trace = [s for s in spans.get_finished_spans() if hexes(s)[0] == trace_id]
    [root] = [s for s in in_trace if s.parent is None]
    assert root.name == "process orders"
    assert sorted(s.name for s in in_trace) == ["process orders", "process traced-by-customer-repartition"]
    assert hexes(next(s for s in in_trace if s.parent is not None))[1:] == (parent_id, hexes(root)[1])


def test_an_unsampled_trace_records_no_span_and_passes_the_decision_on(spans):
    """The app's sampler decides: the SDK's default follows the parent, which said not to sample."""
    app, orders, totals = regrouping_app()
    parent = Parent(sampled=False)
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value={"id": "o1", "customer": "c1"}, headers=[parent.header])
        [output] = driver.read(totals)

    assert [s for s in spans.get_finished_spans() if s.name.startswith("process")] == []
    trace_id, _, flags = traceparent(output.headers)
    assert (trace_id, flags) == (parent.trace_id, "00")


def test_the_apps_own_spans_nest_in_the_events_and_what_they_send_carries_theirs(spans):
    app = engine.App("nested", broker=testing.memory_url(), store="memory://", tracing=True)
    orders = app.topic("orders", key_type=str, value_type=dict)
    out = app.topic("out", key_type=str, value_type=dict)
    tracer = trace.get_tracer("the-app")

    @app.agent(orders)
    async def enrich(stream: Any) -> None:
        async for order in stream:
            with tracer.start_as_current_span("lookup"):
                await out.send(key="k", value=order)

    parent = Parent()
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value={"id": 1}, headers=[parent.header])
        [output] = driver.read(out)

    by_name = {s.name: s for s in spans.get_finished_spans() if hexes(s)[0] == parent.trace_id}
    lookup, process = by_name["lookup"], by_name["process orders"]
    assert hexes(lookup)[2] == hexes(process)[1]
    assert traceparent(output.headers) == (parent.trace_id, hexes(lookup)[1], "01")


def test_a_dead_lettered_event_ends_its_span_with_the_error_and_the_letter_carries_it(spans):
    app = engine.App("failing", broker=testing.memory_url(), store="memory://", tracing=True)
    orders = app.topic("orders", key_type=str, value_type=dict)

    @app.agent(orders)
    async def strict(stream: Any) -> None:
        async for order in stream:
            if order["id"] == 2:
                raise ValueError("order 2 is bad")

    parent = Parent()
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value={"id": 1})
        driver.send(orders, key="o2", value={"id": 2}, headers=[parent.header])
        [letter] = driver.read("failing-strict-dlq")

    [failed] = [s for s in spans.get_finished_spans() if hexes(s)[0] == parent.trace_id]
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.attributes["exception.type"] for e in failed.events] == ["ValueError"]
    assert traceparent(letter.headers) == (parent.trace_id, hexes(failed)[1], "01")
    ok = [s for s in spans.get_finished_spans() if s.name == "process orders" and s is not failed]
    assert [s.status.status_code for s in ok] == [StatusCode.UNSET]


def test_an_error_upstream_of_a_group_by_ends_its_events_span_and_the_letter_carries_it(spans):
    app = engine.App("upstream", broker=testing.memory_url(), store="memory://", tracing=True)
    orders = app.topic("orders", key_type=str, value_type=dict)
    out = app.topic("out", key_type=str, value_type=dict)

    @app.agent(orders)
    async def regroup(stream: Any) -> None:
        async for order in stream.group_by(lambda o: o["customer"], name="by-customer"):
            await out.send(key="k", value=order)

    good, bad = Parent(), Parent()
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value={"customer": "c1"}, headers=[good.header])
        driver.send(orders, key="o2", value={"no customer": True}, headers=[bad.header])  # KeyError
        [letter] = driver.read("upstream-regroup-dlq")
        assert len(driver.read(out)) == 1

    [failed] = [s for s in spans.get_finished_spans() if hexes(s)[0] == bad.trace_id]
    assert (failed.name, hexes(failed)[2]) == ("process orders", bad.span_id)
    assert failed.status.status_code is StatusCode.ERROR
    assert traceparent(letter.headers) == (bad.trace_id, hexes(failed)[1], "01")


def test_checkpoints_that_commit_and_assignments_have_spans(spans):
    app, orders, _ = regrouping_app()
    with TestDriver(app) as driver:
        driver.send(orders, key="o1", value={"id": "o1", "customer": "c1"})
    names = [s.name for s in spans.get_finished_spans()]
    assert "engine rebalance assigned" in names
    assert "engine rebalance revoked" in names  # the driver's worker leaves the group at close
    checkpoints = [s for s in spans.get_finished_spans() if s.name == "engine checkpoint"]
    assert checkpoints
    assert all(s.attributes["engine.checkpoint.tasks"] >= 1 for s in checkpoints)
    [assigned] = [s for s in spans.get_finished_spans() if s.name == "engine rebalance assigned"]
    assert assigned.parent is None
    assert assigned.attributes["engine.partition_count"] >= 1


def test_without_tracing_records_keep_their_headers_and_no_span_is_made(spans):
    app, orders, totals = regrouping_app(tracing=False)
    parent = Parent()
    with TestDriver(app) as driver:
        assert driver.worker.tracing is None
        driver.send(orders, key="o1", value={"id": "o1", "customer": "c1"}, headers=[parent.header])
        [output] = driver.read(totals)
        [repartitioned] = driver.read("traced-by-customer-repartition")
    assert list(repartitioned.headers) == [parent.header]  # forwarded as they came
    assert list(output.headers) == []
    assert spans.get_finished_spans() == ()


def test_tracing_is_a_setting_of_the_app_and_the_environment():
    assert load_settings("a", {}, environ={"ENGINE_TRACING": "true"}).tracing is True
    assert load_settings("a", {"tracing": True}, environ={"ENGINE_TRACING": "0"}).tracing is False
    with pytest.raises(ConfigError, match="ENGINE_TRACING=maybe: expected true or false"):
        load_settings("a", {}, environ={"ENGINE_TRACING": "maybe"})


def test_tracing_without_opentelemetry_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry fails
    monkeypatch.delitem(sys.modules, "engine.tracing")
    with pytest.raises(MissingDependency,
                       match=r"tracing .* needs opentelemetry-api.*'engine-streams\[otel\]'"):
        importlib.import_module("engine.tracing")


def test_a_traced_worker_runs_a_pipeline_event_by_event_with_a_span_for_each(spans):
    """Fused pipelines (engine.fused) have no span per event: a worker that traces runs them through the
    stream operators, which do."""
    app = engine.App("traced-pipe", broker=testing.memory_url(), store="memory://", topic_partitions=2,
                     tracing=True)
    orders = app.topic("orders", key_type=str, value_type=dict)
    per_customer = app.stream(orders).group_by(lambda o: o["customer"], key_type=str).count("per-customer")
    sent = [(f"o{i}", f"c{i % 3}") for i in range(7)]
    with TestDriver(app) as driver:
        for order, customer in sent:
            driver.send(orders, key=order, value={"id": order, "customer": customer})
        assert driver.table("per-customer") == {"c0": 3, "c1": 2, "c2": 2}
    names = [s.name for s in spans.get_finished_spans() if s.name.startswith("process")]
    assert sorted(set(names)) == ["process orders", "process traced-pipe-per-customer-0-repartition"]
    assert len(names) == 2 * len(sent)
    assert per_customer.name == "per-customer"
