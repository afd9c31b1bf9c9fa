"""Finds the replica that answers one partition, waiting inside the request's budget.

`Call` is what one request carries through the layer (hops so far, deadline, max_lag, its
path for forwarding). `Locator` turns a partition into a readable local replica, an owner URL
to forward to, or a `Failure`: it waits on the view's change signal while no replica can
answer, and gives up with UNAVAILABLE (503 + Retry-After) when the budget runs out. When the
active cannot answer, `stand_in` and `standby_urls` name the replicas that may answer instead
(within the call's lag bound).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sparkiq.core.positions import Positions
from sparkiq.core.progress import SourcePosition
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forwarder import Forwarder, Unreachable
from sparkiq.http.messages.responses import Response
from sparkiq.http.messages.wire import BUDGET_HEADER, HOPS_HEADER
from sparkiq.http.nodeview import NodeView, ReadableStore
from sparkiq.http.reads.routing import RouteKind, may_stand_in, route, standby_urls
from sparkiq.http.settings import FALLBACK_PARAM, HttpSettings

# Wait at most this long on the view between looks at the placement, so a change signal
# that slipped past (a view updated from another thread) costs a fraction of the budget.
RECHECK_S = 0.25
# Enum members as module constants: on Python 3.11 `RouteKind.FORWARD` goes through
# EnumType.__getattr__, several times the cost of reading a global.
_FORWARD, _WAIT, _STANDBY = RouteKind.FORWARD, RouteKind.WAIT, RouteKind.STANDBY


@dataclass(slots=True)
class Call:
    """One request on its way through the layer."""

    hops: int  # forwards behind this request (0 = from a client)
    deadline: float  # time.monotonic() after which the request answers 503
    budget_s: float  # the budget it started with, for messages
    max_lag: int | None  # a standby within this many offsets may answer
    target: str  # raw path + query, as forwarded
    # Set on a read another node sends after its active failed: answer from this node's own
    # replica within this many offsets, or 503 at once (never forward, never wait).
    fallback_lag: int | None = None
    # A consistency token's positions (`after=`): partition -> the position a replica must
    # have reached to answer for it (`sparkiq.core.positions`).
    after: Positions | None = None
    # `after_source=`: the table, and the source records it must reflect before the read
    # starts (`sparkiq.http.reads.aftersource`; None once the read loop has waited for them).
    after_source: tuple[str, list[SourcePosition]] | None = None

    def fresh(self, tp: TopicPartition, replica: LocalReplica) -> bool:
        """Whether `replica` has applied what the call's token needs of `tp`."""
        after = self.after
        if after is None:
            return True
        want = after.get(tp[1])
        return want is None or (replica.offset is not None and replica.offset >= want)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def stand_in_bound(self, settings: HttpSettings) -> int:
        """How far behind a replica answering for a failed active may be."""
        return settings.standby_max_lag if self.max_lag is None else self.max_lag


def fallback_target(target: str, bound: int) -> str:
    """`target` with the internal parameter that asks a standby to answer from its replica."""
    return f"{target}{'&' if '?' in target else '?'}{FALLBACK_PARAM}={bound}"


def new_call(
    settings: HttpSettings,
    raw_hops: str | bytes | None,
    raw_budget: str | bytes | None,
    target: str,
) -> Call | Failure:
    """A request's `Call` from its hops and budget headers (values as received, or None).

    `max_lag` starts as None; the caller sets it from the query string.
    """
    hops = 0
    budget = settings.request_budget_s
    if raw_hops is not None:
        try:
            hops = int(raw_hops)
        except ValueError:
            return Failure(FailureReason.BAD_REQUEST, f"{HOPS_HEADER} must be an integer")
        if raw_budget is not None:
            # A forwarded request has only what is left of the first node's budget.
            try:
                budget = min(budget, max(int(raw_budget), 1) / 1000)
            except ValueError:
                return Failure(FailureReason.BAD_REQUEST, f"{BUDGET_HEADER} must be ms")
    return Call(hops, time.monotonic() + budget, budget, None, target)


def ask_budget(call: Call, at_most_s: float | None) -> float:
    """How long one ask of another node may take: the rest of the call's budget (at least
    1 ms), and at most `at_most_s`."""
    budget_s = max(call.remaining(), 0.001)
    return budget_s if at_most_s is None else min(budget_s, at_most_s)


@dataclass(slots=True)  # not frozen: built per request, and frozen __init__ costs 3x
class LocalReplica:
    """This node's replica of a partition, ready to read. Treat it as immutable."""

    store: ReadableStore
    offset: int | None  # next changelog offset it will apply (the answer's freshness)
    is_standby: bool


class Locator:
    """Resolves partitions to replicas for one node, and forwards within the hop limit."""

    def __init__(self, view: NodeView, settings: HttpSettings, forwarder: Forwarder) -> None:
        self.view = view
        self.settings = settings
        self.forwarder = forwarder

    def resolve(self, tp: TopicPartition, max_lag: int | None) -> LocalReplica | str | Failure:
        """Without waiting: a local replica, the owner's URL, or why neither (UNAVAILABLE)."""
        placement = self.view.placement(tp)
        decision = route(placement, self_url=self.view.url, max_lag=max_lag)
        kind = decision.kind
        if kind is _FORWARD:
            assert decision.url is not None
            return decision.url
        if kind is _WAIT:
            return Failure(FailureReason.UNAVAILABLE, decision.reason)
        store = self.view.store(tp)
        if store is None:
            return Failure(
                FailureReason.UNAVAILABLE, f"partition {tp[1]} of {tp[0]} has no open store yet"
            )
        return LocalReplica(store, placement.local_offset, kind is _STANDBY)

    def stand_in(self, tp: TopicPartition, bound: int) -> LocalReplica | None:
        """This node's replica, if it may answer for an active that cannot (see routing)."""
        placement = self.view.placement(tp)
        if placement.is_local_active or not may_stand_in(placement, bound):
            return None
        store = self.view.store(tp)
        if store is None:
            return None
        return LocalReplica(store, placement.local_offset, True)

    def local_only(self, tp: TopicPartition, bound: int) -> LocalReplica | Failure:
        """For a read asked of this node as a stand-in: its own replica within `bound`."""
        found = self.resolve(tp, bound)
        if isinstance(found, LocalReplica):
            return found
        local = self.stand_in(tp, bound)
        if local is not None:
            return local
        topic, partition = tp
        return Failure(
            FailureReason.UNAVAILABLE,
            f"{self.view.url} has no replica of partition {partition} of {topic} within "
            f"{bound} offsets of the end",
            retry_after_s=float(self.settings.retry_after_s),
        )

    def standby_urls(self, tp: TopicPartition) -> tuple[str, ...]:
        """Other nodes that follow `tp` as standbys (or warm up on it)."""
        return standby_urls(self.view.placement(tp), self.view.url)

    async def wait(self, call: Call, at_most_s: float) -> bool:
        """Wait for the view to change (at most `at_most_s`); False once the budget is spent."""
        remaining = call.remaining()
        if remaining <= 0:
            return False
        await self.view.changed(min(remaining, at_most_s))
        return call.remaining() > 0

    def behind(self, tp: TopicPartition, replica: LocalReplica, call: Call) -> Failure:
        """Why `replica` may not answer a read whose token asks for more of `tp`."""
        want = call.after.get(tp[1]) if call.after is not None else None
        topic, partition = tp
        return Failure(
            FailureReason.UNAVAILABLE,
            f"the replica of partition {partition} of {topic} on {self.view.url} has applied "
            f"the changelog up to offset {replica.offset}; the read's token needs {want}",
            retry_after_s=float(self.settings.retry_after_s),
        )

    def gave_up(self, call: Call, why: str) -> Failure:
        return Failure(
            FailureReason.UNAVAILABLE,
            f"{why}; no replica could answer within {call.budget_s:g}s, retry later",
            retry_after_s=float(self.settings.retry_after_s),
        )

    def loop_detected(self, call: Call, url: str) -> Failure:
        return Failure(
            FailureReason.LOOP_DETECTED,
            f"request was forwarded {call.hops} times and would go on to {url}; the nodes "
            "disagree on the owner (a rebalance in progress?), retry shortly",
        )

    async def ask(
        self,
        url: str,
        method: str,
        target: str,
        body: bytes | None,
        call: Call,
        at_most_s: float | None = None,
    ) -> Response | Failure | Unreachable:
        """Send once, waiting at most `at_most_s` (default: the rest of the budget).

        LOOP_DETECTED past the hop limit; `Unreachable` when no answer came in time.
        """
        if call.hops >= self.settings.hop_limit:
            return self.loop_detected(call, url)
        return await self.forwarder.send(
            url, method, target, body, hops=call.hops, budget_s=ask_budget(call, at_most_s)
        )
