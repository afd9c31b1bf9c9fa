"""When a serving node asks its group for a rebalance (`RebalanceAsker`).

A node asks once a warming replica has caught up (the assignor may then move the partition to
it), once its replicas found misplaced records the cluster map should learn of
(`misplaced_to_share`), and once one of its stores failed (the others may serve the partition
while it is rebuilt). A request that leads to no new generation is made again
(`rebalance_due`).

In a big group every rebalance costs every member a rejoin, and many nodes catch up at
about the same time (a group forming, empty partitions). Requests are coalesced: a node asks
only once its map's generation has held for a settle time, jittered per node
(`has_settled`), so the first to ask carries everyone's fresh lags (each member's report is
taken afresh when it rejoins) and the others see the new map instead of asking again; and
a request made while a rebalance is under way is dropped (`GroupMember.request_rebalance`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Container, Mapping, Set
from typing import TYPE_CHECKING

from sparkiq.core.topology import ClusterMap, TopicPartition

if TYPE_CHECKING:
    from sparkiq.node.restore import PartitionStatus, Restorer

log = logging.getLogger(__name__)

# How often a node with warming partitions checks whether one has caught up.
_WARMUP_CHECK_S = 1.0
# A rebalance asked for and not begun (no new generation) after twice the session timeout,
# and at least this long, is asked for again.
_REASK_MIN_S = 10.0
# A node asks only once its map's generation has held this long, plus up to the jitter (a
# random share fixed per node): at least one heartbeat, so a rebalance another node began
# has reached this one.
_SETTLE_S = 1.0
_SETTLE_JITTER_S = 1.5


class RebalanceAsker:
    """Asks the group of the node at `url` for a rebalance when one is due (`run`).

    `cluster_map` and `topics` give the node's current map and the changelog topics of its
    tables; `request` asks the group.
    """

    def __init__(
        self,
        url: str,
        restorer: Restorer,
        *,
        cluster_map: Callable[[], ClusterMap],
        topics: Callable[[], Container[str]],
        request: Callable[[], None],
        acceptable_lag: int,
        session_timeout_ms: int,
    ) -> None:
        self._url = url
        self._restorer = restorer
        self._map = cluster_map
        self._topics = topics
        self._request = request
        self._acceptable_lag = acceptable_lag
        self._asked_for = -2  # generation for which a rebalance was asked
        self._asked_at = 0.0  # monotonic time it was last asked
        # How long an asked-for rebalance may take to begin before it is asked for again.
        self._reask_s = max(_REASK_MIN_S, 2 * session_timeout_ms / 1000)
        self._faults_seen = 0  # the restorer's storage faults, when last acted on
        # Replicas whose misplaced count was shared once they had caught up.
        self._misplaced_final: set[TopicPartition] = set()
        # The generation of the map last seen, since when (monotonic), and how long a
        # generation must hold before this node asks (`has_settled`).
        self._generation = -2
        self._generation_since = 0.0
        self._settle_s = _SETTLE_S + random.random() * _SETTLE_JITTER_S

    async def run(self, stopping: asyncio.Event) -> None:
        """Check every second until `stopping` is set; ask for a rebalance when one is due."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=_WARMUP_CHECK_S)
            if stopping.is_set():
                return
            now, generation = time.monotonic(), self._map().generation
            if generation != self._generation:
                self._generation, self._generation_since = generation, now
            if not has_settled(self._generation_since, now, self._settle_s):
                continue
            warmed_up = self._warmup_done()
            unshared = self._misplaced_unshared()
            faults = self._restorer.storage_faults
            faulted = faults != self._faults_seen
            if not (warmed_up or unshared or faulted):
                continue
            asked_for = self._asked_for
            if rebalance_due(asked_for, self._asked_at, generation, now, self._reask_s):
                self._asked_for, self._asked_at = generation, now
                if faulted:
                    # A replica rebuilt from scratch: the others may serve it meanwhile.
                    self._faults_seen = faults
                    why = "a local store failed (see above)"
                elif warmed_up:
                    why = "warm-up caught up"
                else:
                    why = "misplaced records found"
                if asked_for == generation:
                    log.warning(
                        "node %s: no new generation %.0f s after asking for a rebalance at"
                        " generation %d (%s); asking again",
                        self._url,
                        self._reask_s,
                        generation,
                        why,
                    )
                else:
                    log.info("node %s: %s; asking for a rebalance", self._url, why)
                self._request()
                statuses = self._restorer.statuses()
                self._misplaced_final.update(
                    tp for tp in unshared if (st := statuses.get(tp)) and st.lag == 0
                )

    def _warmup_done(self) -> bool:
        warming = self._map().warming_of(self._url)
        if not warming:
            return False
        statuses = self._restorer.statuses()
        return any(
            (st := statuses.get(tp)) is not None and st.lag <= self._acceptable_lag
            for tp in warming
        )

    def _misplaced_unshared(self) -> set[TopicPartition]:
        """Local replicas whose misplaced records the cluster map should learn of."""
        return misplaced_to_share(
            self._restorer.statuses(), self._map().misplaced, self._misplaced_final, self._topics()
        )


def misplaced_to_share(
    statuses: Mapping[TopicPartition, PartitionStatus],
    shared: Mapping[TopicPartition, int],
    shared_caught_up: Set[TopicPartition],
    topics: Container[str],
) -> set[TopicPartition]:
    """The local replicas (of tables in `topics`) whose misplaced records the cluster map
    should learn of: a rebalance carries the counts to every node, with the lags.

    One is shared when the map (`shared`) knows of none in its partition (every node must
    then look further on a miss), when its count has doubled since, and once when it has
    caught up with the changelog (the count its restore ends with) unless that was done
    (`shared_caught_up`). A producer that keeps misplacing records so costs a few
    rebalances over a node's life, not one per record.
    """
    found: set[TopicPartition] = set()
    for tp, st in statuses.items():
        known = shared.get(tp, 0)
        if st.misplaced <= known or tp[0] not in topics:
            continue
        if known == 0 or st.misplaced >= 2 * known or (st.lag == 0 and tp not in shared_caught_up):
            found.add(tp)
    return found


def rebalance_due(
    asked_for: int, asked_at: float, generation: int, now: float, reask_s: float
) -> bool:
    """Whether a node whose warm-up has caught up asks for a rebalance now.

    Once per generation of the map; again at the same generation when `reask_s` has passed
    since it asked and no new generation came. A request that did not lead to a rebalance
    (the rejoin lost, or answered with the same generation) would otherwise leave the
    warm-up's partition where it is for good.
    """
    return asked_for != generation or now - asked_at >= reask_s


def has_settled(generation_since: float, now: float, settle_s: float) -> bool:
    """Whether the map's generation, seen since `generation_since`, has held long enough
    (`settle_s`) for this node to ask for a rebalance: a group forming or rebalancing is
    given time to end, and the nodes that catch up meanwhile ask once, together."""
    return now - generation_since >= settle_s
