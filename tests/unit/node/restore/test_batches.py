from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from rocksdict import WriteBatch

from sparkiq.core.partitioner import Partitioner, placer
from sparkiq.core.serde import window_wire_key
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.node.restore.batches import Run, check_placement


class BatchStore:
    """What a `Run` asks of a store: an empty write batch."""

    def new_batch(self) -> WriteBatch:
        return WriteBatch(raw_mode=True)


@dataclass
class Target:
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
        run = runs[("t-changelog", p)] = Run(Target(table))
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
