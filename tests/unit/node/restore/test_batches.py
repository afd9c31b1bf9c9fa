"""The restore loop's batches: a session store's merges (the old session deleted, the merged
one written) end as one stored session per key and start, with its end; misplaced keys are
counted per run, whether the batch's keys are placed one by one or in bulk."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rocksdict import WriteBatch

from sparkiq.core.kstreams import (
    session_changelog_key,
    window_end_and_value,
)
from sparkiq.core.partitioner import Partitioner, placer
from sparkiq.core.serde import split_window_store_key, window_wire_key
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.node.restore.batches import Run, check_placement, split_batch, store_key_fn
from sparkiq.node.stores.partitionstore import PartitionStore
from tests.support.kstreamstables import be, session_table

START = 1_764_000_000_000  # 2025-11-24, ms
END = START + 4_321


@dataclass
class Msg:
    """The part of a consumed message `split_batch` reads."""

    p: int
    o: int
    k: bytes
    v: bytes | None

    def topic(self) -> str:
        return "shop-sessions-changelog"

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def timestamp(self) -> tuple[int, int]:
        return (1, START)

    def error(self) -> None:
        return None


@dataclass
class Target:
    table: TableDef
    store: PartitionStore

    def __post_init__(self) -> None:
        self.key_fn = store_key_fn(self.table)


def test_a_session_changelog_batch_stores_each_session_with_its_end(tmp_path: Path) -> None:
    table = session_table()
    store = PartitionStore(tmp_path / "s", table, 0)
    try:
        target = Target(table, store)
        # Kafka Streams merges a session: the old one deleted, the merged one written.
        msgs = [
            Msg(0, 0, session_changelog_key(b"k", START, START), be(1, 8)),
            Msg(0, 1, session_changelog_key(b"k", START, START), None),
            Msg(0, 2, session_changelog_key(b"k", END, START), be(2, 8)),
            Msg(0, 3, session_changelog_key(b"j", END + 9, END), be(1, 8)),
        ]
        runs, _, _ = split_batch(msgs, {(msgs[0].topic(), 0): target}, lambda *a: None)
        store.write(runs[(msgs[0].topic(), 0)].batch, 4)
        rows = store.scan(lo=None, hi=None, prefix=None, after=None, limit=10)
        got = [
            (
                split_window_store_key(k),
                window_end_and_value(table, split_window_store_key(k)[1], v),
            )
            for k, v in rows
        ]
        assert got == [((b"j", END), (END + 9, be(1, 8))), ((b"k", START), (END, be(2, 8)))]
    finally:
        store.close()


class BatchStore:
    """What a `Run` asks of a store: an empty write batch."""

    def new_batch(self) -> WriteBatch:
        return WriteBatch(raw_mode=True)


@dataclass
class PlacementTarget:
    table: TableDef
    store: Any = field(default_factory=BatchStore)
    key_fn: Any = None


@pytest.mark.parametrize("per_run", [2, 5, 40, 2000])  # a few keys one by one, many in bulk
@pytest.mark.parametrize("windowed", [False, True])
def test_misplaced_keys_are_counted_per_run_whatever_the_batch_size(
    per_run: int, windowed: bool
) -> None:
    table = TableDef(
        "t",
        "t-changelog",
        3,
        Format.STRING,
        partitioner=Partitioner.MURMUR2,
        kind=TableKind.WINDOWED if windowed else TableKind.KV,
        window_size_ms=60_000 if windowed else None,
    )
    place = placer(table.partitioner)
    assert place is not None
    rng = random.Random(per_run)
    runs: dict[tuple[str, int], Run] = {}
    expected: dict[int, tuple[int, bytes | None]] = {}
    for p in range(3):
        run = runs[("t-changelog", p)] = Run(PlacementTarget(table))
        assert run.keys is not None
        first: bytes | None = None
        wrong = 0
        for _ in range(per_run):
            key = b"k%d" % rng.randrange(10**6)
            wire = window_wire_key(key, rng.randrange(10**12)) if windowed else key
            run.keys.append(wire)
            if place(key, 3) != p:
                wrong += 1
                first = first or wire
        expected[p] = (wrong, first)
    check_placement(runs)
    assert {p: (run.misplaced, run.example) for (_, p), run in runs.items()} == expected
    assert any(wrong for wrong, _ in expected.values())  # the check had something to find
