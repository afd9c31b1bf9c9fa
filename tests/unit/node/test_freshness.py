"""A table's freshness on a node (node/freshness.py): its replicas' newest record, its
pipeline's last batch."""

from __future__ import annotations

from sparkiq.node.freshness import TableFreshness, table_freshness
from sparkiq.node.restore import PartitionStatus, ReplicaState


def status(p: int, newest_ms: int | None) -> PartitionStatus:
    return PartitionStatus(
        ("t", p), "t", ReplicaState.ACTIVE, 10, 10, 0, newest_record_ms=newest_ms
    )


def test_the_newest_record_of_any_local_replica_counts() -> None:
    fresh = table_freshness([status(0, 5_000), None, status(2, 7_000), status(3, None)], 6_000)
    assert fresh == TableFreshness(newest_record_ms=7_000, last_batch_ms=6_000)
    assert fresh.newest_record_age_s(now_ms=9_500) == 2.5
    assert fresh.last_batch_age_s(now_ms=9_500) == 3.5


def test_unknown_until_a_record_is_applied_and_a_batch_is_heard_of() -> None:
    fresh = table_freshness([status(0, None), None], None)
    assert fresh.newest_record_age_s(now_ms=1) is None
    assert fresh.last_batch_age_s(now_ms=1) is None


def test_an_instant_a_little_ahead_of_this_clock_is_age_zero() -> None:
    fresh = TableFreshness(newest_record_ms=10_050, last_batch_ms=10_020)
    assert fresh.newest_record_age_s(now_ms=10_000) == 0.0
    assert fresh.last_batch_age_s(now_ms=10_000) == 0.0
