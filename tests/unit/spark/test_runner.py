"""The runner's Spark listener: each committed batch's source offsets reach the publisher."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from sparkiq.core.progress import QueryBatch
from sparkiq.spark.runner import ProgressTracker


def progress_event(name: str, batch: int, *ends: object) -> Any:
    sources = [SimpleNamespace(endOffset=end) for end in ends]
    progress = SimpleNamespace(
        name=name,
        batchId=batch,
        sources=sources,
        observedMetrics={},
        numInputRows=3,
        inputRowsPerSecond=1.0,
        processedRowsPerSecond=2.0,
        durationMs={"triggerExecution": 5},
    )
    return SimpleNamespace(progress=progress)


def test_every_source_of_a_batch_is_reported_once() -> None:
    batches: list[tuple[str, int, dict[str, dict[str, int]]]] = []
    tracker = ProgressTracker(lambda *batch: batches.append(batch))
    tracker.onQueryProgress(
        progress_event(
            "customers", 4, json.dumps({"pos": {"0": 10, "1": 7}}), {"returns": {"0": 2}}
        )
    )
    tracker.onQueryProgress(progress_event("idle", 5))  # no source offsets: nothing to say
    tracker.onQueryProgress(progress_event("odd", 6, "not json"))
    assert batches == [("customers", 4, {"pos": {"0": 10, "1": 7}, "returns": {"0": 2}})]


def test_each_batch_gives_its_figures_with_dead_letters_summed_since_start() -> None:
    figures: list[QueryBatch] = []
    tracker = ProgressTracker(on_query=figures.append)
    first = progress_event("routes", 1, json.dumps({"pos": {"0": 10}}))
    first.progress.observedMetrics = {"routes": {"dead_letters": 2, "other": 5}}
    first.progress.stateOperators = [
        SimpleNamespace(numRowsTotal=7),
        SimpleNamespace(numRowsTotal=4),
    ]
    second = progress_event("routes", 2, json.dumps({"pos": {"0": 12}}))
    second.progress.observedMetrics = {"routes": {"dead_letters": 3}}
    tracker.onQueryProgress(first)
    tracker.onQueryProgress(second)
    tracker.onQueryProgress(progress_event("stateless", 9))
    assert [(f.query, f.batch, f.dead_letters, f.dead_letters_total) for f in figures] == [
        ("routes", 1, 2, 2),
        ("routes", 2, 3, 5),
        ("stateless", 9, 0, 0),
    ]
    one = figures[0]
    assert (one.input_rows, one.input_rows_per_s, one.processed_rows_per_s) == (3, 1.0, 2.0)
    assert (one.batch_ms, one.state_rows) == (5, 11)
    assert figures[1].state_rows is None  # this batch reported no state operator
    assert figures[2].tables == ()  # the runner adds the tables a query writes
