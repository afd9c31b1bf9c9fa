"""Pure rules of who answers a read (sparkiq.http.reads.routing)."""

from __future__ import annotations

from sparkiq.core.queries import ReplicaRole
from sparkiq.core.topology import Placement
from sparkiq.http.reads.routing import RouteKind, route

ME, OTHER = "http://127.0.0.1:1", "http://127.0.0.1:2"
TP = ("t", 0)


def test_ready_local_active_reads_locally() -> None:
    p = Placement(TP, ME, (), ReplicaRole.ACTIVE, local_ready=True, local_offset=5, local_lag=0)
    assert route(p, self_url=ME, max_lag=None).kind is RouteKind.LOCAL


def test_restoring_local_active_waits_even_with_max_lag() -> None:
    p = Placement(TP, ME, (), ReplicaRole.ACTIVE, local_ready=False, local_lag=0)
    decision = route(p, self_url=ME, max_lag=100)
    assert decision.kind is RouteKind.WAIT
    assert "restoring" in decision.reason


def test_standby_answers_only_within_max_lag() -> None:
    p = Placement(TP, OTHER, (ME,), ReplicaRole.STANDBY, local_ready=True, local_lag=7)
    assert route(p, self_url=ME, max_lag=7).kind is RouteKind.STANDBY
    assert route(p, self_url=ME, max_lag=6) == route(p, self_url=ME, max_lag=None)
    forwarded = route(p, self_url=ME, max_lag=6)
    assert forwarded.kind is RouteKind.FORWARD
    assert forwarded.url == OTHER


def test_unready_standby_forwards_to_active() -> None:
    p = Placement(TP, OTHER, (ME,), ReplicaRole.STANDBY, local_ready=False, local_lag=0)
    assert route(p, self_url=ME, max_lag=1000).kind is RouteKind.FORWARD


def test_no_active_waits() -> None:
    decision = route(Placement(TP, None), self_url=ME, max_lag=None)
    assert decision.kind is RouteKind.WAIT
    assert "no active" in decision.reason
