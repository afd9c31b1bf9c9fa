"""Request counts and latencies of one node, by endpoint and outcome, for `/metrics`.

Each node (and each test server) gets its own registry, so several nodes in one process do
not share counters. Observing is plain integer arithmetic on dicts, read by a custom
collector at scrape time: prometheus_client's Counter/Histogram take a lock and walk their
buckets per observation, which measured as a sizeable share of a ~50 us local answer.

Also counted here: open watches and the events they sent (`watches_open`, `watch_events`,
`watches_dropped`: ended because their client read slower than the key changed), forwards
that got no answer (`forward_failed`, by reason and target node), and, when asked for, an
access log of one INFO line per answered request on the `sparkiq.access` logger. With the
access log off, `observe` is the plain counting function: the log costs nothing unless it
is on.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Iterator
from enum import StrEnum
from functools import partial

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sparkiq.http.forwarder import Unreachable
from sparkiq.http.messages.responses import Outcome

# Local reads take ~50 us, forwarded ones a few hundred; waits run to the budget (seconds).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST

access_log = logging.getLogger("sparkiq.access")


class ForwardError(StrEnum):
    """Why a forward got no answer; a label of `sparkiq_forward_errors`."""

    TIMEOUT = "timeout"  # no answer within the request's budget (or the active's timeout)
    REFUSED = "refused"  # nothing listens at the target (node down or restarting)
    RESET = "reset"  # the connection broke: reset, closed early, or not HTTP/1.1
    BAD_URL = "bad_url"  # the target URL in the cluster map cannot be used
    OTHER = "other"  # any other socket error (no route, name resolution...)


def forward_error(unreachable: Unreachable) -> ForwardError:
    """The reason behind an `Unreachable`, read off the message `PoolForwarder` wrote.

    Its messages are "no answer within ...", "<exception class>: ..." for a socket error or
    a broken exchange, and "cannot forward to ..." for a URL it cannot use.
    """
    message = unreachable.message
    if message.startswith(("no answer within", "TimeoutError")):
        return ForwardError.TIMEOUT
    if message.startswith("ConnectionRefusedError"):
        return ForwardError.REFUSED
    if message.startswith(
        ("ConnectionResetError", "ConnectionAbortedError", "BrokenPipeError", "_Broken")
    ):
        return ForwardError.RESET
    if message.startswith("cannot forward to"):
        return ForwardError.BAD_URL
    return ForwardError.OTHER


class _Latency:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # last slot: above the largest bucket
        self.total = 0.0


class _Slot:
    """The request count of one (endpoint, outcome, status), and the latency histogram of
    its (endpoint, outcome), shared by every status: what one observation adds to, found
    with one dict lookup."""

    __slots__ = ("latency", "n")

    def __init__(self, latency: _Latency) -> None:
        self.n = 0
        self.latency = latency

    def add(self, seconds: float) -> None:
        """Count one answer that took `seconds`."""
        self.n += 1
        latency = self.latency
        latency.counts[bisect_left(BUCKETS, seconds)] += 1
        latency.total += seconds


Observe = Callable[[str, Outcome, int, float], None]


class HttpMetrics(Collector):
    """The node's HTTP metrics, in a registry of its own.

    `observe(endpoint, outcome, status, seconds)` counts one answered request; with
    `access_log=True` it also logs it. Callers may bind `observe` once (the key path does), so
    the choice is made here, when the metrics are built.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, access_log: bool = False
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._requests: dict[tuple[str, Outcome, int], _Slot] = {}
        self._latency: dict[tuple[str, Outcome], _Latency] = {}
        self._forward_errors: dict[tuple[ForwardError, str], int] = {}
        self._read_errors: dict[tuple[str, str], int] = {}
        self._access_log = access_log
        self.watches_open = 0  # event streams of keys' and ranges' changes open now (relayed too)
        self.watch_events = 0  # events sent on them (changes and first states)
        self.watches_dropped = 0  # ended because their client fell `watch_queue` behind
        self.observe: Observe = self._count_and_log if access_log else self._count
        self.registry.register(self)

    def observer(self, endpoint: str, outcome: Outcome, status: int) -> Callable[[float], None]:
        """`observe` for one (endpoint, outcome, status), bound now: a caller that counts one
        kind of answer far more often than others (the key path, a key found) skips looking
        up its counters at every answer. The series shows from now on, at 0 until counted."""
        if self._access_log:
            return partial(self._count_and_log, endpoint, outcome, status)
        return self._slot(endpoint, outcome, status).add

    def forward_failed(self, unreachable: Unreachable) -> None:
        """Count a forward to another node that got no answer."""
        key = (forward_error(unreachable), unreachable.url)
        self._forward_errors[key] = self._forward_errors.get(key, 0) + 1

    def read_failed(self, endpoint: str, kind: str) -> None:
        """Count a read that raised (`kind`: storage, or unexpected) and was answered again."""
        key = (endpoint, kind)
        self._read_errors[key] = self._read_errors.get(key, 0) + 1

    def read_errors(self, kind: str | None = None) -> int:
        """Reads that raised so far (optionally of one kind)."""
        return sum(n for (_, k), n in self._read_errors.items() if kind in (None, k))

    def forward_errors(self, reason: ForwardError | None = None) -> int:
        """Forwards that got no answer so far (optionally for one reason)."""
        return sum(n for (r, _), n in self._forward_errors.items() if reason in (None, r))

    def _count_and_log(self, endpoint: str, outcome: Outcome, status: int, seconds: float) -> None:
        self._count(endpoint, outcome, status, seconds)
        ms = round(seconds * 1000, 3)
        access_log.info(
            "%s %s %d %.3fms",
            endpoint,
            outcome.value,
            status,
            ms,
            extra={"endpoint": endpoint, "outcome": outcome.value, "status": status, "ms": ms},
        )

    def _count(self, endpoint: str, outcome: Outcome, status: int, seconds: float) -> None:
        slot = self._requests.get((endpoint, outcome, status))
        if slot is None:
            slot = self._slot(endpoint, outcome, status)
        slot.add(seconds)

    def _slot(self, endpoint: str, outcome: Outcome, status: int) -> _Slot:
        """The counters of (endpoint, outcome, status), made on first use."""
        slot = self._requests.get((endpoint, outcome, status))
        if slot is None:
            latency = self._latency.get((endpoint, outcome))
            if latency is None:
                latency = self._latency[(endpoint, outcome)] = _Latency()
            slot = self._requests[(endpoint, outcome, status)] = _Slot(latency)
        return slot

    def count(self, endpoint: str, outcome: Outcome | None = None) -> int:
        """Requests answered so far for `endpoint` (optionally one outcome)."""
        return sum(
            slot.n
            for (e, o, _), slot in self._requests.items()
            if e == endpoint and (outcome is None or o is outcome)
        )

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "sparkiq_http_requests",
            "HTTP requests answered, by endpoint, outcome and status code.",
            labels=("endpoint", "outcome", "status"),
        )
        for (endpoint, outcome, status), slot in sorted(self._requests.items()):
            requests.add_metric((endpoint, outcome.value, str(status)), slot.n)
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
        errors = CounterMetricFamily(
            "sparkiq_forward_errors",
            "Requests forwarded to another node that got no answer, by reason and target.",
            labels=("reason", "target"),
        )
        for (reason, target), n in sorted(self._forward_errors.items()):
            errors.add_metric((reason.value, target), n)
        yield errors
        reads = CounterMetricFamily(
            "sparkiq_read_errors",
            "Reads that raised on this node (kind storage: a local store failed; unexpected: "
            "anything else) and were answered again by another replica, or 503.",
            labels=("endpoint", "kind"),
        )
        for (endpoint, kind), n in sorted(self._read_errors.items()):
            reads.add_metric((endpoint, kind), n)
        yield reads
        yield GaugeMetricFamily(
            "sparkiq_watches_open",
            "Watches (event streams of a key's or a range's changes) open on this node, "
            "relayed ones included.",
            value=self.watches_open,
        )
        yield CounterMetricFamily(
            "sparkiq_watch_events",
            "Events sent on watches: first states (positions of ranges) and changes.",
            value=self.watch_events,
        )
        yield CounterMetricFamily(
            "sparkiq_watches_dropped",
            "Watches ended because their client read slower than the keys changed.",
            value=self.watches_dropped,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
