"""When a node asks its group for a rebalance: once per generation, again when none follows;
misplaced counts shared on discovery, doubling and catching up. No Kafka: the restorer is a
stand-in with the statuses and fault count the asker reads."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from sparkiq.core.topology import ClusterMap, PartitionOwners, TopicPartition
from sparkiq.node.group import rebalance
from sparkiq.node.group.rebalance import RebalanceAsker, misplaced_to_share, rebalance_due
from sparkiq.node.restore import PartitionStatus, ReplicaState, Restorer

URL = "http://node-a:8100"


class FakeRestorer:
    def __init__(self, statuses: dict[TopicPartition, PartitionStatus]) -> None:
        self.storage_faults = 0
        self._statuses = statuses

    def statuses(self) -> dict[TopicPartition, PartitionStatus]:
        return self._statuses


async def asked_for(
    monkeypatch: pytest.MonkeyPatch,
    restorer: FakeRestorer,
    cluster_map: ClusterMap,
    settle_s: float = 0.0,
) -> int:
    """How often the asker asks for a rebalance in about 20 checks, a generation having to
    hold `settle_s` first."""
    monkeypatch.setattr(rebalance, "_WARMUP_CHECK_S", 0.005)
    monkeypatch.setattr(rebalance, "_SETTLE_S", settle_s)
    monkeypatch.setattr(rebalance, "_SETTLE_JITTER_S", 0.0)
    asked: list[None] = []
    asker = RebalanceAsker(
        URL,
        cast(Restorer, restorer),
        cluster_map=lambda: cluster_map,
        topics=lambda: {"t"},
        request=lambda: asked.append(None),
        acceptable_lag=10,
        session_timeout_ms=10_000,
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(asker.run(stopping))
    await asyncio.sleep(0.1)
    stopping.set()
    await task
    return len(asked)


async def test_a_caught_up_warm_up_asks_once_per_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tp: TopicPartition = ("t", 0)
    warming = ClusterMap(4, {tp: PartitionOwners("http://other:1", warming=(URL,))})
    caught_up = {tp: PartitionStatus(tp, "t", ReplicaState.STANDBY, 95, 100, 5)}
    assert await asked_for(monkeypatch, FakeRestorer(caught_up), warming) == 1
    behind = {tp: PartitionStatus(tp, "t", ReplicaState.STANDBY, 50, 100, 50)}
    assert await asked_for(monkeypatch, FakeRestorer(behind), warming) == 0


async def test_no_node_asks_before_its_generation_has_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tp: TopicPartition = ("t", 0)
    warming = ClusterMap(4, {tp: PartitionOwners("http://other:1", warming=(URL,))})
    caught_up = {tp: PartitionStatus(tp, "t", ReplicaState.STANDBY, 95, 100, 5)}
    assert await asked_for(monkeypatch, FakeRestorer(caught_up), warming, settle_s=10.0) == 0
    assert await asked_for(monkeypatch, FakeRestorer(caught_up), warming, settle_s=0.05) == 1


@pytest.mark.parametrize(
    ("since", "now", "settle_s", "settled"),
    [(100.0, 100.5, 1.0, False), (100.0, 101.0, 1.0, True), (100.0, 100.0, 0.0, True)],
)
def test_a_generation_has_settled_once_it_held_the_settle_time(
    since: float, now: float, settle_s: float, settled: bool
) -> None:
    assert rebalance.has_settled(since, now, settle_s) is settled


async def test_a_new_storage_fault_asks_once(monkeypatch: pytest.MonkeyPatch) -> None:
    restorer = FakeRestorer({})
    restorer.storage_faults = 1
    assert await asked_for(monkeypatch, restorer, ClusterMap(2)) == 1


@pytest.mark.parametrize(
    ("asked_for", "asked_at", "generation", "now", "due"),
    [
        (-2, 0.0, 1, 5.0, True),  # never asked: ask
        (1, 100.0, 2, 101.0, True),  # asked at an earlier generation: ask at this one
        (2, 100.0, 2, 101.0, False),  # asked at this generation just now: wait
        (2, 100.0, 2, 111.9, False),  # not yet reask_s (12 s) later
        (2, 100.0, 2, 112.0, True),  # no new generation 12 s later: ask again
    ],
)
def test_a_rebalance_is_asked_once_per_generation_and_again_when_none_follows(
    asked_for: int, asked_at: float, generation: int, now: float, due: bool
) -> None:
    assert rebalance_due(asked_for, asked_at, generation, now, reask_s=12.0) is due


def _status(tp: TopicPartition, misplaced: int, lag: int) -> PartitionStatus:
    return PartitionStatus(tp, "t", ReplicaState.ACTIVE, 100 - lag, 100, lag, misplaced)


@pytest.mark.parametrize(
    ("local", "lag", "known", "caught_up_shared", "shared"),
    [
        (0, 5, 0, False, False),  # nothing misplaced
        (3, 5, 0, False, True),  # the map knows none: every node must learn
        (3, 5, 3, False, False),  # known already
        (5, 5, 3, False, False),  # more, but neither doubled nor caught up
        (6, 5, 3, False, True),  # doubled
        (5, 0, 3, False, True),  # caught up: the restore's final count
        (5, 0, 3, True, False),  # ... shared once only
        (7, 0, 3, True, True),  # doubled again
    ],
)
def test_misplaced_counts_are_shared_on_discovery_doubling_and_catching_up(
    local: int, lag: int, known: int, caught_up_shared: bool, shared: bool
) -> None:
    tp = ("topic", 0)
    found = misplaced_to_share(
        {tp: _status(tp, local, lag)},
        {tp: known} if known else {},
        {tp} if caught_up_shared else set(),
        {"topic"},
    )
    assert found == ({tp} if shared else set())
    assert not misplaced_to_share({tp: _status(tp, local, lag)}, {}, set(), {"other"})
