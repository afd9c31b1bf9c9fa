"""Which replica answers a read: this node's, the active's over HTTP, or nobody yet.

A pure function of the partition's `Placement` and the caller's `max_lag`, so the rules are
tested without servers. The HTTP layer acts on the decision (read, forward, wait).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sparkiq.core.queries import ReplicaRole
from sparkiq.core.topology import Placement


class RouteKind(Enum):
    LOCAL = "local"  # this node's active replica is ready
    STANDBY = "standby"  # this node's standby is ready and within the caller's max_lag
    FORWARD = "forward"  # another node is the active: ask it
    WAIT = "wait"  # no replica can answer now: wait for the map or the replica to change


@dataclass(frozen=True, slots=True)
class Route:
    kind: RouteKind
    url: str | None = None  # the active's URL, for FORWARD
    reason: str = ""  # why WAIT, in words for the eventual 503


LOCAL = Route(RouteKind.LOCAL)
STANDBY = Route(RouteKind.STANDBY)
# FORWARD routes by URL, made once: every forwarded read asks for one.
_FORWARD: dict[str, Route] = {}
_MAX_FORWARD = 1024  # URLs remembered (a cluster's nodes; cleared past this)


def _forward(url: str) -> Route:
    found = _FORWARD.get(url)
    if found is None:
        if len(_FORWARD) >= _MAX_FORWARD:
            _FORWARD.clear()
        found = _FORWARD[url] = Route(RouteKind.FORWARD, url=url)
    return found


def route(placement: Placement, *, self_url: str, max_lag: int | None) -> Route:
    """Decide who answers a read of `placement.tp` on the node whose URL is `self_url`."""
    if placement.is_local_active:
        return LOCAL
    if (
        max_lag is not None
        and placement.local_role is ReplicaRole.STANDBY
        and placement.local_ready
        and placement.local_lag_known
        and placement.local_lag is not None
        and placement.local_lag <= max_lag
    ):
        return STANDBY
    active = placement.active
    topic, partition = placement.tp
    if active is None:
        return Route(RouteKind.WAIT, reason=f"partition {partition} of {topic} has no active node")
    if active == self_url:
        # The map names this node but its replica is not ready: restoring, or the map moved
        # the partition here before the local state caught up.
        return Route(
            RouteKind.WAIT, reason=f"partition {partition} of {topic} is restoring on {active}"
        )
    return _forward(active)


def may_stand_in(placement: Placement, bound: int) -> bool:
    """Whether this node's replica may answer for an active that cannot (down, restoring).

    A standby, or a replica given the active role that is still restoring, whose lag is
    measured against a real end and is at most `bound` offsets.
    """
    return (
        placement.local_role is not None
        and placement.local_lag_known
        and placement.local_lag is not None
        and placement.local_lag <= bound
    )


def standby_urls(placement: Placement, self_url: str) -> tuple[str, ...]:
    """The other nodes that follow `placement.tp` without being its active, in map order."""
    return tuple(u for u in placement.standbys if u != self_url and u != placement.active)
