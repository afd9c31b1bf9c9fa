from __future__ import annotations

from pathlib import Path

from sparkiq.core.tables import TableDef
from sparkiq.node.restore.replica import Replica
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
