"""HTTP metrics: request series, forward errors by reason and target (http/metrics.py).

Forward errors are counted where the HTTP layer meets an `Unreachable`: a key read whose
active is down, a multi-get and a range whose owner is down (all in the read loop). Real
servers (`HttpServer`) on loopback; a dead node is a free port nobody listens on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.messages.responses import Outcome
from sparkiq.http.metrics import ForwardError, HttpMetrics, forward_error
from sparkiq.http.staticview import StaticView

USERS = TableDef("users", "users-changelog", 2)
SETTINGS = HttpSettings(request_budget_s=0.3, reconnect_pause_s=0.02, active_timeout_s=0.1)


def url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


class Samples:
    """The samples `metrics` renders, by name and labels."""

    def __init__(self, metrics: HttpMetrics) -> None:
        text = metrics.render().decode()
        self._values = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def sample(self, name: str, **labels: str) -> float:
        return self._values[(name, tuple(sorted(labels.items())))]


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("no answer within 0.200s", ForwardError.TIMEOUT),
        ("ConnectionRefusedError: [Errno 111] Connect call failed", ForwardError.REFUSED),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", ForwardError.RESET),
        ("_Broken: connection closed: EOF", ForwardError.RESET),
        ("BrokenPipeError: [Errno 32] Broken pipe", ForwardError.RESET),
        ("cannot forward to 'ftp://x': only http://host:port", ForwardError.BAD_URL),
        ("OSError: [Errno 113] No route to host", ForwardError.OTHER),
    ],
)
def test_forward_error_reasons(message: str, reason: ForwardError) -> None:
    assert forward_error(Unreachable("http://b:1", message)) is reason


def test_request_and_forward_error_series() -> None:
    metrics = HttpMetrics()
    metrics.observe("key", Outcome.LOCAL, 200, 0.0004)
    metrics.observe("key", Outcome.LOCAL, 200, 0.002)
    metrics.observe("range", Outcome.FORWARDED, 503, 1.5)
    metrics.forward_failed(Unreachable("http://b:1", "ConnectionRefusedError: x"))
    metrics.forward_failed(Unreachable("http://b:1", "ConnectionRefusedError: x"))
    metrics.forward_failed(Unreachable("http://c:1", "no answer within 1.000s"))
    sample = Samples(metrics).sample

    key_local = {"endpoint": "key", "outcome": "local"}
    assert sample("sparkiq_http_requests_total", **key_local, status="200") == 2
    assert sample("sparkiq_http_request_seconds_count", **key_local) == 2
    assert sample("sparkiq_http_request_seconds_bucket", **key_local, le="0.0005") == 1
    assert sample("sparkiq_http_request_seconds_bucket", **key_local, le="+Inf") == 2
    range_fw = {"endpoint": "range", "outcome": "forwarded", "status": "503"}
    assert sample("sparkiq_http_requests_total", **range_fw) == 1
    assert sample("sparkiq_forward_errors_total", reason="refused", target="http://b:1") == 2
    assert sample("sparkiq_forward_errors_total", reason="timeout", target="http://c:1") == 1
    assert metrics.forward_errors() == 3
    assert metrics.forward_errors(ForwardError.REFUSED) == 2


def test_an_observer_counts_in_the_series_observe_counts_in() -> None:
    metrics = HttpMetrics()
    found = metrics.observer("key", Outcome.LOCAL, 200)
    # Bound before any answer: the series is there, at 0.
    assert metrics.count("key", Outcome.LOCAL) == 0
    found(0.0004)
    metrics.observe("key", Outcome.LOCAL, 200, 0.002)
    metrics.observe("key", Outcome.LOCAL, 404, 0.0001)
    found(0.03)
    sample = Samples(metrics).sample

    key_local = {"endpoint": "key", "outcome": "local"}
    assert sample("sparkiq_http_requests_total", **key_local, status="200") == 3
    assert sample("sparkiq_http_requests_total", **key_local, status="404") == 1
    # One latency histogram per (endpoint, outcome), whichever way it was counted.
    assert sample("sparkiq_http_request_seconds_count", **key_local) == 4
    assert sample("sparkiq_http_request_seconds_bucket", **key_local, le="0.0005") == 2
    assert sample("sparkiq_http_request_seconds_bucket", **key_local, le="0.025") == 3
    assert sample("sparkiq_http_request_seconds_sum", **key_local) == pytest.approx(0.0325)


async def test_forwards_to_a_dead_node_are_counted(stack: AsyncExitStack) -> None:
    me, dead = url(), url()
    view = StaticView(me, [USERS])
    for p in range(USERS.partitions):
        view.set_placement((USERS.topic, p), dead, [])
    server = HttpServer(view, "127.0.0.1", int(me.rsplit(":", 1)[1]), SETTINGS)
    await stack.enter_async_context(server)
    metrics = server.api.metrics
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        r = await client.get("/v1/tables/users/keys/alice")
        assert r.status_code == 503
        after_key = metrics.forward_errors(ForwardError.REFUSED)
        assert after_key >= 1  # the active, asked and asked again until the budget
        r = await client.post("/v1/tables/users/multi-get", json={"keys": ["alice", "bob"]})
        assert r.status_code == 503
        after_multi = metrics.forward_errors(ForwardError.REFUSED)
        assert after_multi > after_key  # the owner of each group of keys
        r = await client.get("/v1/tables/users/range")
        assert r.status_code == 503
        assert metrics.forward_errors(ForwardError.REFUSED) > after_multi  # fanout: range
        text = (await client.get("/metrics")).text
    assert f'sparkiq_forward_errors_total{{reason="refused",target="{dead}"}}' in text
    assert metrics.forward_errors() == metrics.forward_errors(ForwardError.REFUSED)
