"""A traced app (tracing=True) that regroups orders by customer through a repartition topic and sends each
on: what `engine worker -A tests.integration.tracing_apps:app` runs (ITEST_APP, ITEST_TOPIC: its input; the
output is `<ITEST_TOPIC>-out`). It installs the OpenTelemetry SDK as an app would, with the SDK's in-memory
exporter, and writes the finished spans to ITEST_SPANS (JSON lines) when the worker's process exits."""

import atexit
import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import engine

exporter = InMemorySpanExporter()
provider = TracerProvider()  # the default sampler: parent-based, always on at the root
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


def as_json(span: ReadableSpan) -> str:
    context, parent = span.get_span_context(), span.parent
    return json.dumps({
        "name": span.name, "kind": span.kind.name, "status": span.status.status_code.name,
        "trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "attributes": dict(span.attributes or {}),
    })


@atexit.register
def write_spans() -> None:
    with open(os.environ["ITEST_SPANS"], "w") as out:
        out.writelines(as_json(span) + "\n" for span in exporter.get_finished_spans())


app = engine.App(os.environ.get("ITEST_APP", "itracing"), commit_interval=0.2,
                 processing_guarantee="exactly_once", tracing=True)
orders = app.topic(os.environ.get("ITEST_TOPIC", "orders"), key_type=str, value_type=dict)
totals = app.topic(f"{orders.name}-out", key_type=str, value_type=dict)


@app.agent(orders)
async def regroup(stream):
    async for customer, order in stream.group_by(lambda o: o["customer"], name="by-customer").items():
        await totals.send(key=customer, value={"order": order["id"]})
