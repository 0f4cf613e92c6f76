"""Metrics in Prometheus' text format (prometheus-client lives here and only here).

The worker keeps its numbers where they arise, as plain counters and engine.stats histograms (an
attribute increment on the per-event path, nothing more), and describes them as `Family`s when scraped;
this module turns those into the exposition format with prometheus-client's own families and encoder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from engine.stats import Histogram

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass
class Family:
    """One metric: `name` (a counter's without `_total`), what it means, and a value per label set."""

    name: str
    help: str
    kind: Literal["counter", "gauge", "histogram"]
    labels: Sequence[str] = ()
    samples: list[tuple[Sequence[str], float | Histogram]] = field(default_factory=list)

    def add(self, labels: Sequence[str], value: float | Histogram) -> Family:
        self.samples.append((labels, value))
        return self


def render(families: Iterable[Family]) -> bytes:
    """The families in Prometheus' text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(list(families)))
    return generate_latest(registry)


class _Collector:
    def __init__(self, families: list[Family]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield _convert(family)


def _convert(family: Family) -> Metric:
    labels = list(family.labels)
    if family.kind == "histogram":
        histogram = HistogramMetricFamily(family.name, family.help, labels=labels)
        for values, found in family.samples:
            assert isinstance(found, Histogram)
            buckets = [("+Inf" if bound == float("inf") else repr(bound), count)
                       for bound, count in found.cumulative()]
            histogram.add_metric(list(values), buckets, found.sum)
        return histogram
    kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
    metric = kind(family.name, family.help, labels=labels)
    for values, found in family.samples:
        assert not isinstance(found, Histogram)
        metric.add_metric(list(values), found)
    return metric
