"""Request counts and latencies of one node, by endpoint and outcome, for `/metrics`.

Each node (and each test server) gets its own registry, so several nodes in one process do
not share counters. Observing is plain integer arithmetic on dicts, read by a custom
collector at scrape time: prometheus_client's Counter/Histogram take a lock and walk their
buckets per observation, which measured as a sizeable share of a ~50 us local answer.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkiq.http.responses import Outcome

# Local reads take ~50 us, forwarded ones a few hundred; waits run to the budget (seconds).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST


class _Latency:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # last slot: above the largest bucket
        self.total = 0.0


class HttpMetrics(Collector):
    """The node's HTTP metrics, in a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._requests: dict[tuple[str, Outcome, int], int] = {}
        self._latency: dict[tuple[str, Outcome], _Latency] = {}
        self.registry.register(self)

    def observe(self, endpoint: str, outcome: Outcome, status: int, seconds: float) -> None:
        key = (endpoint, outcome, status)
        self._requests[key] = self._requests.get(key, 0) + 1
        latency = self._latency.get((endpoint, outcome))
        if latency is None:
            latency = self._latency[(endpoint, outcome)] = _Latency()
        latency.counts[bisect_left(BUCKETS, seconds)] += 1
        latency.total += seconds

    def count(self, endpoint: str, outcome: Outcome | None = None) -> int:
        """Requests answered so far for `endpoint` (optionally one outcome)."""
        return sum(
            n
            for (e, o, _), n in self._requests.items()
            if e == endpoint and (outcome is None or o is outcome)
        )

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "sparkiq_http_requests",
            "HTTP requests answered, by endpoint, outcome and status code.",
            labels=("endpoint", "outcome", "status"),
        )
        for (endpoint, outcome, status), n in sorted(self._requests.items()):
            requests.add_metric((endpoint, outcome.value, str(status)), n)
        yield requests
        latency = HistogramMetricFamily(
            "sparkiq_http_request_seconds",
            "Time to answer an HTTP request, by endpoint and outcome.",
            labels=("endpoint", "outcome"),
        )
        for (endpoint, outcome), hist in sorted(self._latency.items()):
            cumulative, buckets = 0, []
            for bound, n in zip((*BUCKETS, float("inf")), hist.counts, strict=True):
                cumulative += n
                buckets.append((str(bound) if bound != float("inf") else "+Inf", cumulative))
            latency.add_metric((endpoint, outcome.value), buckets, hist.total)
        yield latency

    def render(self) -> bytes:
        return generate_latest(self.registry)
