from __future__ import annotations

from dataclasses import replace

import pytest

from sparkiq.core.progress import (
    BadProgress,
    BatchProgress,
    PipelineProgress,
    QueryBatch,
    parse_source_positions,
)
from sparkiq.core.triggers import TriggerMode


def batch(n: int, pos_end: int, changelog: dict[int, int], table: str = "rewards") -> BatchProgress:
    return BatchProgress(table, n, {("pos", 0): pos_end, ("pos", 1): 5}, changelog, 1000 + n)


def test_a_record_round_trips_as_json() -> None:
    b = batch(3, 40, {0: 7, 2: 9})
    assert BatchProgress.from_json(b.to_json()) == b
    for bad in (b"{", b"{}", b'{"table":"t","batch":1,"sources":[],"changelog":{},"time_ms":0}'):
        with pytest.raises(BadProgress):
            BatchProgress.from_json(bad)


def test_source_positions_parse_topics_with_dots_and_colons_last() -> None:
    assert parse_source_positions("pos:0:41,my.topic-a:12:7") == [
        ("pos", 0, 41),
        ("my.topic-a", 12, 7),
    ]
    for bad in ("pos", "pos:0", ":0:1", "pos:x:1", "pos:0:-1", "pos:0:1,"):
        with pytest.raises(BadProgress):
            parse_source_positions(bad)


def test_the_earliest_batch_past_a_record_gives_the_positions() -> None:
    progress = PipelineProgress()
    assert progress.covering("rewards", [("pos", 0, 0)]) is None
    progress.add(batch(1, 10, {0: 3, 1: 4}))
    progress.add(batch(2, 20, {0: 5, 1: 4}))
    progress.add(batch(3, 30, {0: 9, 1: 8}))
    # Record 15 was read by batch 2 (its end 20 is past it), not by batch 1 (end 10).
    assert progress.covering("rewards", [("pos", 0, 15)]) == {0: 5, 1: 4}
    # Records older than every batch kept: the oldest one covers them.
    assert progress.covering("rewards", [("pos", 0, 2)]) == {0: 3, 1: 4}
    # Two records: the positions of both batches, the newer per partition.
    assert progress.covering("rewards", [("pos", 0, 2), ("pos", 0, 25)]) == {0: 9, 1: 8}
    # Not committed yet, another partition or topic never read, another table.
    assert progress.covering("rewards", [("pos", 0, 30)]) is None
    assert progress.covering("rewards", [("other", 0, 1)]) is None
    assert progress.covering("orders", [("pos", 0, 1)]) is None
    last = progress.latest("rewards")
    assert last is not None
    assert last.batch == 3


def test_only_the_newest_batches_are_kept() -> None:
    progress = PipelineProgress(keep=2)
    for n in range(1, 5):
        progress.add(batch(n, n * 10, {0: n}))
    assert progress.covering("rewards", [("pos", 0, 0)]) == {0: 3}


def figures(n: int, query: str = "routes", time_ms: int = 0) -> QueryBatch:
    return QueryBatch(query, n, time_ms or 1000 + n, ("rewards",), 10, 2.5, 4.0, 300, 12, 1, n)


def test_query_figures_round_trip_and_an_older_record_takes_the_defaults() -> None:
    f = figures(4)
    assert QueryBatch.from_json(f.to_json()) == f
    epoch = replace(f, trigger=TriggerMode.REALTIME, batch_ms=5_216, between_epochs_ms=188)
    assert QueryBatch.from_json(epoch.to_json()) == epoch
    old = QueryBatch.from_json(b'{"query":"q","batch":1,"time_ms":5,"later_field":[1]}')
    assert old == QueryBatch("q", 1, 5)
    assert (old.trigger, old.between_epochs_ms) == (TriggerMode.MICROBATCH, None)
    unknown_mode = b'{"query":"q","batch":1,"time_ms":1,"trigger":"continuous"}'
    for bad in (b"[", b"{}", b'{"query":"q","batch":"x","time_ms":1}', unknown_mode):
        with pytest.raises(BadProgress):
            QueryBatch.from_json(bad)


def test_query_batches_are_kept_per_query_and_a_new_run_replaces_the_old() -> None:
    progress = PipelineProgress(keep_queries=3)
    for n in range(5):
        progress.add_query(figures(n))
    progress.add_query(figures(7, "customers"))
    progress.add_query(figures(4, time_ms=2000))  # the same batch again: replaces it
    kept = progress.queries()
    assert list(kept) == ["customers", "routes"]
    assert [(b.batch, b.time_ms) for b in kept["routes"]] == [(2, 1002), (3, 1003), (4, 2000)]
    progress.add_query(figures(0))  # a query started anew: the old run's batches go
    assert [b.batch for b in progress.queries()["routes"]] == [0]
