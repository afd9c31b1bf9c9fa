"""The state dir (`StoreRegistry`): one store per partition, restarts, lock, quarantine."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkiq.core.errors import StateDirLockedError, StateDirMismatchError, StoreError
from sparkiq.core.tables import TableDef
from sparkiq.node.stores.registry import QUARANTINE_DIR, StoreRegistry

TABLE = TableDef(name="users", topic="users-changelog", partitions=3)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[StoreRegistry]:
    reg = StoreRegistry(tmp_path / "state")
    yield reg
    reg.close_all()


def test_checkpoint_survives_close_and_reopen(registry: StoreRegistry, tmp_path: Path) -> None:
    store = registry.open(TABLE, 2)
    store.apply([(b"x", b"1")], next_offset=41)
    store.apply([(b"y", b"2")], next_offset=42)
    registry.close(TABLE.name, 2)
    assert store.is_closed

    # A new registry over the same dir, as after a node restart.
    again = StoreRegistry(registry.state_dir)
    assert again.on_disk() == {("users", 2): 42}
    reopened = again.open(TABLE, 2)
    assert reopened is not store
    assert reopened.next_offset == 42
    assert reopened.get(b"x") == b"1"
    assert reopened.get(b"y") == b"2"
    again.close_all()


def test_on_disk_lists_open_and_closed_stores(registry: StoreRegistry) -> None:
    other = dataclasses.replace(TABLE, name="orders", topic="orders-changelog")
    registry.open(TABLE, 0).apply([(b"a", b"1")], 7)
    registry.open(other, 1).apply([(b"a", b"1")], 3)
    registry.close("orders", 1)
    registry.open(TABLE, 2)  # no checkpoint yet: not listed
    assert registry.on_disk() == {("users", 0): 7, ("orders", 1): 3}
    tables = registry.on_disk_tables()
    assert tables[("orders", 1)] == (other, 3)
    assert tables[("users", 0)] == (TABLE, 7)


def test_open_returns_the_same_store_until_closed(registry: StoreRegistry) -> None:
    assert registry.open(TABLE, 0) is registry.open(TABLE, 0)
    assert registry.get(TABLE.name, 0) is not None
    registry.close(TABLE.name, 0)
    assert registry.get(TABLE.name, 0) is None


def test_mismatch_is_also_detected_while_open(registry: StoreRegistry) -> None:
    registry.open(TABLE, 0)
    with pytest.raises(StateDirMismatchError):
        registry.open(dataclasses.replace(TABLE, topic="elsewhere"), 0)


def test_a_second_node_on_one_state_dir_is_refused(tmp_path: Path) -> None:
    first, second = StoreRegistry(tmp_path / "state"), StoreRegistry(tmp_path / "state")
    first.lock()
    with pytest.raises(StateDirLockedError, match="another node is using the state dir"):
        second.lock()
    first.unlock()
    second.lock()  # free again once the first let go
    second.unlock()


def test_quarantine_keeps_the_newest_copy_only(registry: StoreRegistry) -> None:
    kept = []
    for i in range(3):
        store = registry.open(TABLE, 1)
        store.apply([(b"round", str(i).encode())], next_offset=i + 1)
        registry.close(TABLE.name, 1)
        aside = registry.quarantine(TABLE.name, 1)
        assert aside is not None
        assert aside.parent.name == QUARANTINE_DIR
        kept.append(aside)
    assert [p for p in kept if p.exists()] == [kept[-1]]
    assert not registry.path_for(TABLE.name, 1).exists()
    assert registry.quarantine(TABLE.name, 1) is None  # nothing left to move
    assert registry.on_disk() == {}  # quarantined stores are not offered as state
    registry.open(TABLE, 1)
    with pytest.raises(StoreError, match="close it first"):
        registry.quarantine(TABLE.name, 1)
