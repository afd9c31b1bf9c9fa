from __future__ import annotations

from pathlib import Path

import pytest

from sparkiq.core.tables import TableDef
from sparkiq.node.restore.replica import Replica
from sparkiq.node.restore.truncation import go_on_from_log_start, resume_offset
from sparkiq.node.stores.registry import StoreRegistry


@pytest.mark.parametrize(
    ("position", "log_start", "end", "expected"),
    [
        (100, 250, 400, 250),  # records removed before the replica applied them
        (100, 400, 400, 400),  # every record removed: goes on at the end
        (500, 0, 400, 0),  # past the end (the topic made again): replayed from its start
        (300, 250, 400, None),  # in range again: fetched once more from where it is
        (250, 250, 400, None),
        (400, 250, 400, None),
    ],
)
def test_resume_offset(position: int, log_start: int, end: int, expected: int | None) -> None:
    assert resume_offset(position, log_start, end) == expected


def test_a_replica_goes_on_from_the_log_start_keeping_what_it_holds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = TableDef("t", "t-changelog", 2)
    store = StoreRegistry(tmp_path).open(table, 1)
    store.apply([(b"k", b"v")], 100)
    replica = Replica(("t-changelog", 1), table, store)
    assert go_on_from_log_start(replica, 250, 400) == 150
    assert (replica.position, store.next_offset, store.get(b"k")) == (250, 250, b"v")
    assert "t-changelog[1]: offsets 100 to 249 were removed" in caplog.text
    assert go_on_from_log_start(replica, 250, 400) == 0  # in range: nothing moves
    assert replica.position == 250
