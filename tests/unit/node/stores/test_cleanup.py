"""Deleting stores a node no longer holds (`StateCleanup`): after the delay, not before, never
an open store, a partition that comes back keeps its checkpoint; quarantined copies too."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkiq.core.tables import TableDef
from sparkiq.node.stores.cleanup import StateCleanup
from sparkiq.node.stores.registry import QUARANTINE_DIR, TRASH_DIR, StoreRegistry

TABLE = TableDef(name="users", topic="users-changelog", partitions=4)
DELAY_S = 600.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[StoreRegistry]:
    reg = StoreRegistry(tmp_path / "state")
    yield reg
    reg.close_all()


def on_disk(registry: StoreRegistry) -> set[int]:
    table_dir = registry.state_dir / TABLE.name
    return {int(p.name) for p in table_dir.iterdir()} if table_dir.is_dir() else set()


def write(registry: StoreRegistry, partition: int, offset: int) -> None:
    registry.open(TABLE, partition).apply([(b"k%d" % partition, b"v")], next_offset=offset)


def test_a_closed_store_is_deleted_after_the_delay_and_an_open_one_never(
    registry: StoreRegistry,
) -> None:
    clock = Clock(registry_time := 1_000_000.0)
    cleanup = StateCleanup(registry, DELAY_S, clock=clock)
    for p in range(3):
        write(registry, p, 10 + p)
    clock.now = registry_time + 5
    registry.close(TABLE.name, 1)
    closed_at = registry.closed_stores()[(TABLE.name, 1)][1]
    assert closed_at is not None  # the real time of the close, not the test's clock
    clock.now = closed_at + DELAY_S - 1
    assert cleanup.sweep() == []
    assert on_disk(registry) == {0, 1, 2}
    [pending] = cleanup.pending()
    assert (pending.table, pending.partition, pending.quarantined) == (TABLE.name, 1, False)
    assert pending.delete_at == closed_at + DELAY_S

    clock.now = closed_at + DELAY_S + 1
    [deleted] = cleanup.sweep()
    assert (deleted.table, deleted.partition) == (TABLE.name, 1)
    assert on_disk(registry) == {0, 2}
    assert cleanup.deleted == 1
    assert cleanup.pending() == []
    assert not any((registry.state_dir / TRASH_DIR).iterdir())
    # The open stores are untouched, however long they have been open.
    clock.now += 10 * DELAY_S
    assert cleanup.sweep() == []
    assert registry.open(TABLE, 0).next_offset == 10


def test_a_store_that_comes_back_before_the_delay_keeps_its_checkpoint(
    registry: StoreRegistry,
) -> None:
    clock = Clock(0.0)
    cleanup = StateCleanup(registry, DELAY_S, clock=clock)
    write(registry, 2, 42)
    registry.close(TABLE.name, 2)
    assert [p.partition for p in cleanup.pending()] == [2]
    again = registry.open(TABLE, 2)  # the partition came back
    clock.now = 1e12  # long past any delay
    assert cleanup.sweep() == []
    assert again.next_offset == 42
    # Closed again later: its delay starts over from that close.
    registry.close(TABLE.name, 2)
    [pending] = cleanup.pending()
    assert pending.delete_at > clock.now - 1e12 + DELAY_S - 60


def test_stores_found_on_disk_wait_the_delay_from_the_node_start(tmp_path: Path) -> None:
    first = StoreRegistry(tmp_path / "state")
    write(first, 0, 5)
    first.close_all()
    old = 1_000.0  # the directory's last change, long ago
    os.utime(first.path_for(TABLE.name, 0), (old, old))

    restarted = StoreRegistry(tmp_path / "state")
    clock = Clock(start := 2_000_000.0)
    cleanup = StateCleanup(restarted, DELAY_S, clock=clock)
    [pending] = cleanup.pending()
    assert pending.delete_at == start + DELAY_S  # not old + DELAY_S: it may come back
    clock.now = start + DELAY_S - 1
    assert cleanup.sweep() == []
    clock.now = start + DELAY_S
    assert [p.partition for p in cleanup.sweep()] == [0]
    assert on_disk(restarted) == set()


def test_quarantined_copies_are_deleted_the_delay_after_they_were_moved_aside(
    registry: StoreRegistry,
) -> None:
    write(registry, 3, 7)
    registry.close(TABLE.name, 3)
    aside = registry.quarantine(TABLE.name, 3)
    assert aside is not None
    write(registry, 3, 1)  # the rebuilt store, open
    moved_at = int(aside.name.rpartition(".")[2]) / 1000
    clock = Clock(moved_at + DELAY_S - 1)
    cleanup = StateCleanup(registry, DELAY_S, clock=clock)
    [pending] = cleanup.pending()
    assert (pending.table, pending.partition, pending.quarantined) == (TABLE.name, 3, True)
    assert cleanup.sweep() == []
    clock.now = moved_at + DELAY_S
    assert [(p.partition, p.quarantined) for p in cleanup.sweep()] == [(3, True)]
    assert not any((registry.state_dir / QUARANTINE_DIR).iterdir())
    assert registry.open(TABLE, 3).next_offset == 1


def test_a_delay_of_zero_deletes_at_the_next_sweep(registry: StoreRegistry) -> None:
    cleanup = StateCleanup(registry, 0.0)
    write(registry, 0, 1)
    write(registry, 1, 1)
    registry.close(TABLE.name, 0)
    assert [p.partition for p in cleanup.sweep()] == [0]
    assert on_disk(registry) == {1}
    # Opened again after the delete: an empty store, restored from the changelog's start.
    assert registry.open(TABLE, 0).next_offset is None


def test_trash_left_by_a_dead_process_is_emptied(registry: StoreRegistry) -> None:
    left = registry.state_dir / TRASH_DIR / "users.1.123"
    left.mkdir(parents=True)
    (left / "000001.sst").write_bytes(b"x")
    StateCleanup(registry, DELAY_S).sweep()
    assert not left.exists()
