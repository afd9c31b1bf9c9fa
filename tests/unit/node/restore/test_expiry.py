"""Window retention against a real store: what a sweep keeps, removes and when it looks again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkiq.core.serde import window_store_key
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.core.topology import TopicPartition
from sparkiq.node.partitionstore import PartitionStore
from sparkiq.node.restore.expiry import AGAIN_S, WindowExpiry, interval_s
from sparkiq.node.store import StoreRegistry

MINUTE = 60_000
TABLE = TableDef(
    "sales",
    "sales-changelog",
    2,
    key_format=Format.STRING,
    kind=TableKind.WINDOWED,
    window_size_ms=MINUTE,
    retention_ms=2 * MINUTE,
)


class Held:
    def __init__(self, table: TableDef, store: PartitionStore) -> None:
        self.tp: TopicPartition = (table.topic, store.partition)
        self.table = table
        self.store = store


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[StoreRegistry]:
    reg = StoreRegistry(tmp_path)
    yield reg
    reg.close_all()


def fill(store: PartitionStore, keys: list[str], minutes: range) -> None:
    records: list[tuple[bytes, bytes | None]] = [
        (window_store_key(k.encode(), m * MINUTE), b"{}") for k in keys for m in minutes
    ]
    store.apply(records, (store.next_offset or 0) + len(records))


def starts(store: PartitionStore) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for key, _ in store.scan(limit=1_000_000):
        out.setdefault(key[:-8].decode(), []).append(
            (int.from_bytes(key[-8:], "big") - (1 << 63)) // MINUTE
        )
    return out


def sweep_until_idle(expiry: WindowExpiry, held: list[Held], now: float) -> float:
    """Step until no pass is due at `now`; returns `now`."""
    for _ in range(10_000):
        if expiry.step(held, now=now) == 0:
            return now
    raise AssertionError("the sweep never finished")


def test_windows_older_than_the_retention_before_the_newest_are_removed(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 0)
    keys = [f"store-{i:03d}" for i in range(40)]
    fill(store, keys, range(0, 10))  # windows starting at minutes 0..9 for every key
    expiry = WindowExpiry(chunk=7)  # small chunks: passes span many steps
    held = [Held(TABLE, store)]
    sweep_until_idle(expiry, held, now=0.0)
    # Newest window: minute 9 (ends at 10); kept: those ending at 8 or later (start >= 7).
    assert starts(store) == {k: [7, 8, 9] for k in keys}
    assert expiry.removed == 40 * 7
    # New data moves the cutoff; the next pass comes after the interval.
    fill(store, keys[:1], range(12, 13))
    assert expiry.step(held, now=1.0) == 0  # not due yet
    now = sweep_until_idle(expiry, held, now=interval_s(TABLE))
    # That pass found minute 12; the one AGAIN_S later removes what it expires.
    sweep_until_idle(expiry, held, now=now + AGAIN_S)
    assert starts(store) == {keys[0]: [12]}  # every other key's windows ended too early
    assert expiry.removed == 40 * 7 + 40 * 3


def test_tables_without_a_retention_are_left_alone(registry: StoreRegistry) -> None:
    forever = TableDef(
        "forever", "t2", 1, kind=TableKind.WINDOWED, window_size_ms=MINUTE, retention_ms=None
    )
    store = registry.open(forever, 0)
    fill(store, ["a"], range(0, 100))
    expiry = WindowExpiry()
    assert expiry.step([Held(forever, store)], now=0.0) == 0
    assert len(starts(store)["a"]) == 100


def test_a_closed_store_ends_its_sweep_and_a_reopened_one_starts_over(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 1)
    fill(store, ["a", "b"], range(0, 20))
    expiry = WindowExpiry(chunk=5)
    held = [Held(TABLE, store)]
    expiry.step(held, now=0.0)
    registry.close(TABLE.name, 1)
    expiry.step(held, now=0.0)  # the store is closed: no error, the sweep is dropped
    reopened = registry.open(TABLE, 1)
    sweep_until_idle(expiry, [Held(TABLE, reopened)], now=0.0)
    assert starts(reopened) == {"a": [17, 18, 19], "b": [17, 18, 19]}


def test_the_interval_is_a_tenth_of_the_retention_within_bounds() -> None:
    def with_retention(ms: int) -> TableDef:
        return TableDef("w", "t", 1, kind=TableKind.WINDOWED, window_size_ms=1, retention_ms=ms)

    assert interval_s(with_retention(2 * MINUTE)) == 12.0
    assert interval_s(with_retention(1_000)) == 1.0
    assert interval_s(with_retention(24 * 60 * MINUTE)) == 60.0
