from __future__ import annotations

import time
from pathlib import Path

from sparkiq.core.tables import TableDef
from sparkiq.node.restore.replica import SETTLE_WITHIN_S, Replica, ReplicaState
from sparkiq.node.stores.registry import StoreRegistry


def replica_at(tmp_path: Path, position: int) -> Replica:
    table = TableDef("t", "t-changelog", 1)
    store = StoreRegistry(tmp_path).open(table, 0)
    replica = Replica(("t-changelog", 0), table, store)
    replica.advance(position)
    return replica


def test_an_open_transaction_past_the_tail_is_not_lag(tmp_path: Path) -> None:
    replica = replica_at(tmp_path, 100)
    replica.raise_end(130)  # the high watermark, before the consumer got there
    assert replica.status().lag == 30
    # read_committed: the consumer stops at the last stable offset, 110; the records
    # between it and the high watermark are those of a transaction still open.
    replica.advance(110)
    replica.reach_tail(110)
    replica.raise_end(130)
    assert (replica.status().end, replica.status().lag) == (110, 0)
    # Once the replica moves past the tail, the high watermark counts again.
    replica.advance(131)
    replica.raise_end(140)
    assert (replica.status().end, replica.status().lag) == (140, 9)


def test_active_at_its_target_at_once_then_flushed_in_the_background(tmp_path: Path) -> None:
    replica = replica_at(tmp_path, 0)
    replica.set_role(active=True)
    assert replica.state is ReplicaState.RESTORING
    assert not replica.wal
    records = [(b"k%05d" % i, b"v" * 100) for i in range(5000)]
    replica.store.apply(records, 5000, wal=replica.wal)
    replica.advance(5000)
    replica.target = 5000
    assert replica.store.unflushed
    # ACTIVE without waiting for the flush; writes go on without the WAL until it is done.
    assert replica.check_caught_up()
    assert replica.state is ReplicaState.ACTIVE
    assert not replica.wal
    assert replica.store.get(b"k04999") == b"v" * 100
    deadline = time.monotonic() + 30
    while replica.settle():
        assert time.monotonic() < deadline, "the background flush did not end within 30 s"
        time.sleep(0.005)
    assert not replica.store.unflushed
    assert replica.wal
    assert list(replica.store.path.glob("*.sst")), "expected the memtable flushed to a file"
    # Settled: nothing left to do, and a later write goes through the WAL without a flush.
    assert not replica.settle()
    replica.store.apply([(b"k00000", b"w")], 5001, wal=replica.wal)
    assert not replica.store.unflushed


def test_a_restoring_replica_is_not_settled_and_a_standby_is(tmp_path: Path) -> None:
    replica = replica_at(tmp_path, 0)
    replica.set_role(active=True)
    replica.store.apply([(b"k", b"v")], 1, wal=replica.wal)
    replica.advance(1)
    assert not replica.check_caught_up()  # no target measured yet
    assert not replica.settle()
    assert replica.store.unflushed
    replica.set_role(active=False)  # to STANDBY before the target: settled all the same
    while replica.settle():
        time.sleep(0.005)
    assert not replica.store.unflushed
    assert replica.wal


def test_settling_waits_while_others_restore_up_to_its_bound(tmp_path: Path) -> None:
    replica = replica_at(tmp_path, 0)
    replica.set_role(active=True)
    replica.store.apply([(b"k", b"v")], 1, wal=replica.wal)
    replica.advance(1)
    replica.target = 1
    assert replica.check_caught_up(now=100.0)
    # Others still restore: its flush waits, and its writes go on without the WAL.
    assert not replica.settle(100.0 + SETTLE_WITHIN_S - 1, restore_under_way=True)
    assert replica.store.unflushed
    assert not replica.wal
    # Past the bound it settles all the same.
    now = 100.0 + SETTLE_WITHIN_S
    while replica.settle(now, restore_under_way=True):
        time.sleep(0.005)
    assert not replica.store.unflushed
    assert replica.wal
