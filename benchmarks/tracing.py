"""Tracing's cost per event on an agent's stream, no broker: events pulled from a mailbox through the root
stream an agent iterates, without tracing, and with it (the OpenTelemetry SDK with an in-memory exporter;
every record carries a traceparent, its trace sampled or not).

    .venv/bin/python -m benchmarks.tracing [--events 50000] [--rounds 7]

Prints ns per event (the best and the median round) for each: the stream's own cost, then what a traced
event adds (extracting the context, starting, making current and ending its span).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents import Mailbox
from engine.events import Event
from engine.streams.stream import open_stream
from engine.tracing import AgentSpans, Tracing


class _Record:
    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(self, offset: int, headers: list[tuple[str, bytes]]) -> None:
        self.topic, self.partition, self.offset, self.timestamp = "bench", 0, offset, 0
        self.key, self.value, self.headers = None, offset, headers


class _Context:
    """An agent instance's StreamContext, without the worker: no quiesce gate, no timings."""

    quiesce = None
    timings = None

    def __init__(self, tracing: AgentSpans | None) -> None:
        self.tracing = tracing

    def opened(self, stream: Any) -> None:
        pass

    def pulling(self) -> None:
        pass


async def _round(events: int, tracing: AgentSpans | None, headers: list[tuple[str, bytes]]) -> float:
    mailbox: Mailbox[Event] = Mailbox(events + 1)
    mailbox.put_many_nowait([Event(_Record(i, headers), None, i, None) for i in range(events)])
    mailbox.close()
    stream = open_stream(mailbox, _Context(tracing), None)
    started = time.perf_counter()
    async for _ in stream:
        pass
    return (time.perf_counter() - started) / events * 1e9


async def main(events: int, rounds: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # parent-based: the traceparent's flag decides
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    spans = Tracing("bench").agent("bench")
    cases = {
        "tracing off": (None, []),
        "tracing on, trace not sampled": (spans, [("traceparent", f"00-{'1' * 32}-{'2' * 16}-00".encode())]),
        "tracing on, trace sampled": (spans, [("traceparent", f"00-{'1' * 32}-{'2' * 16}-01".encode())]),
    }
    for name, (tracing, headers) in cases.items():
        times = []
        for _ in range(rounds):
            times.append(await _round(events, tracing, headers))
            exporter.clear()
        print(f"{name}: {min(times):,.0f} ns/event (median {statistics.median(times):,.0f})")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    asyncio.run(main(args.events, args.rounds))
