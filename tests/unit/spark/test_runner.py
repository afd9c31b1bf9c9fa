"""The runner's Spark listener: each committed batch's source offsets reach the publisher."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

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
