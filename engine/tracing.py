"""Tracing with OpenTelemetry (the extra engine-streams[otel]; opentelemetry only here): what a worker with
`tracing=True` does with each event, send, checkpoint and rebalance.

engine speaks the OpenTelemetry API and leaves the rest to the app, as instrumentation libraries do: spans go
to the global tracer provider (its sampler decides which are recorded, its processors where they go), and
trace context is read from and written to record headers by the global propagator (W3C `traceparent`,
`tracestate` and `baggage` unless the app configured others).

- An agent's processing of an event is a CONSUMER span `process <topic>`, the child of the context found in
  the record's headers (or the root of a new trace). It is made current in the agent's task while the agent
  is inside the event, so the app's own spans nest under it, and it ends when the agent pulls the next event
  (engine.streams.stream), or with the error that dead-lettered the event.
- Every record an agent sends (to a topic, through `through` or `group_by`, to a dead-letter topic, as an
  `ask`) carries the context current where it is sent: the event's span, or a span of the app inside it
  (engine.transport.traced). The record's own trace headers, forwarded from its source, are replaced.
- A checkpoint that commits something or fails is an INTERNAL span `engine checkpoint`; a change of ownership
  (assigned, revoked, lost, a rewind) is the root span `engine rebalance <kind>`, the parent of the
  checkpoint a revoke runs.

Nothing of this module is imported by a worker whose `tracing` setting is off: the per-event path then pays
one attribute read.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from engine.events import describe
from engine.optional import needs

with needs("opentelemetry-api", "tracing (the tracing setting)", extra="otel"):
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.propagators.textmap import Getter
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator, Mapping

    from engine.events import TP, Event, Headers

__all__ = ["AgentSpans", "Span", "Tracing"]

PROCESS = "process"
CHECKPOINT = "engine checkpoint"
REBALANCE = "engine rebalance"


class _HeadersGetter(Getter["Headers"]):
    """Reads propagation fields from Kafka headers: (name, bytes) pairs, a name possibly repeated."""

    def get(self, carrier: Headers, key: str) -> list[str] | None:
        values = [value.decode("latin-1") for name, value in carrier if name == key]
        return values or None

    def keys(self, carrier: Headers) -> list[str]:
        return [name for name, _ in carrier]


_HEADERS = _HeadersGetter()


class Tracing:
    """A worker's tracer and propagator (the global ones, as the app configured them)."""

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self.tracer = trace.get_tracer("engine")
        self.propagator = propagate.get_global_textmap()
        self._fields = frozenset(self.propagator.fields)

    def agent(self, name: str) -> AgentSpans:
        """The spans of one agent's events."""
        return AgentSpans(self, name)

    def inject(self, headers: Headers | None) -> Headers | None:
        """`headers` with the trace context current here in place of any they carry (None: no context)."""
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier)
        if not carrier:
            return headers
        fields = self._fields
        return [*(header for header in headers or () if header[0] not in fields),
                *((name, value.encode("latin-1")) for name, value in carrier.items())]

    def checkpoint(self, started_ns: int, attributes: Mapping[str, int],
                   error: BaseException | None = None) -> None:
        """A checkpoint that began at `started_ns` (time.time_ns()) ends now: its span, recorded after the
        fact so that the many that had nothing to commit make none."""
        span = self.tracer.start_span(CHECKPOINT, start_time=started_ns, attributes=attributes)
        _finish(span, error)

    @contextlib.contextmanager
    def rebalance(self, kind: str, tps: Collection[TP]) -> Iterator[None]:
        """A change of ownership of `tps`: the root of a trace of its own (not the child of whatever the
        group's callback runs in), current while it runs, so the checkpoint of a revoke is its child."""
        with self.tracer.start_as_current_span(
                f"{REBALANCE} {kind}", context=otel_context.Context(),
                attributes={"engine.partitions": describe(tps), "engine.partition_count": len(tps),
                            "messaging.consumer.group.name": self.app_id}):
            yield


class AgentSpans:
    """The spans of one agent's events: begun when the agent is handed an event, ended when it is done."""

    __slots__ = ("_agent", "_group", "_propagator", "_tracer")

    def __init__(self, tracing: Tracing, agent: str) -> None:
        self._tracer = tracing.tracer
        self._propagator = tracing.propagator
        self._agent = agent
        self._group = tracing.app_id

    def begin(self, event: Event) -> Span:
        """The span of `event`'s processing, child of the context in its headers, made current in the
        running task. (Never detached: the next event's replaces it, and detaching would have to happen in
        the same task, which a forwarding stream's pump does not guarantee.)"""
        record, tp = event.record, event.tp
        parent = self._propagator.extract(record.headers, getter=_HEADERS)
        span = self._tracer.start_span(
            f"{PROCESS} {tp.topic}", context=parent, kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": PROCESS,
                "messaging.operation.name": PROCESS,
                "messaging.destination.name": tp.topic,
                "messaging.destination.partition.id": str(tp.partition),
                "messaging.kafka.offset": record.offset,
                "messaging.consumer.group.name": self._group,
                "engine.agent": self._agent,
            })
        otel_context.attach(trace.set_span_in_context(span, parent))
        return span

    @staticmethod
    def end(span: Span, error: BaseException | None = None) -> None:
        """End `span`; an event failed with `error` has its span made current where the failure is handled
        (the agent's task, also for an error upstream of a group_by, met in the stream's pump), so that its
        dead letter carries it."""
        _finish(span, error)
        if error is not None:
            otel_context.attach(trace.set_span_in_context(span))


def _finish(span: Span, error: BaseException | None) -> None:
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()

