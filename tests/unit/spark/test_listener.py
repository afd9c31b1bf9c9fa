"""The runner's Spark listener: each committed batch's source offsets reach the publisher.

Progress is given as Spark writes it in JSON (`StreamingQueryProgress.json()`); a source's
end offset is JSON there, or JSON text from sources whose offsets Spark keeps as text."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkiq.core.progress import QueryBatch
from sparkiq.core.triggers import TriggerMode
from sparkiq.spark.listener import ProgressTracker

pytest_plugins = ["tests.support.spark"]


def progress_event(name: str, batch: int, *ends: object) -> dict[str, Any]:
    return {
        "name": name,
        "batchId": batch,
        "sources": [{"endOffset": end} for end in ends],
        "observedMetrics": {},
        "numInputRows": 3,
        "inputRowsPerSecond": 1.0,
        "processedRowsPerSecond": 2.0,
        "durationMs": {"triggerExecution": 5},
    }


def test_every_source_of_a_batch_is_reported_once() -> None:
    batches: list[tuple[str, int, dict[str, dict[str, int]]]] = []
    tracker = ProgressTracker(lambda *batch: batches.append(batch))
    tracker.on_progress(
        progress_event(
            "customers", 4, {"pos": {"0": 10, "1": 7}}, json.dumps({"returns": {"0": 2}})
        )
    )
    tracker.on_progress(progress_event("idle", 5))  # no source offsets: nothing to say
    tracker.on_progress(progress_event("odd", 6, "not json"))
    assert batches == [("customers", 4, {"pos": {"0": 10, "1": 7}, "returns": {"0": 2}})]


def test_each_batch_gives_its_figures_with_dead_letters_summed_since_start() -> None:
    figures: list[QueryBatch] = []
    tracker = ProgressTracker(on_query=figures.append)
    first = progress_event("routes", 1, json.dumps({"pos": {"0": 10}}))
    first["observedMetrics"] = {"routes": {"dead_letters": 2, "other": 5}}
    first["stateOperators"] = [{"numRowsTotal": 7}, {"numRowsTotal": 4}]
    second = progress_event("routes", 2, json.dumps({"pos": {"0": 12}}))
    second["observedMetrics"] = {"routes": {"dead_letters": 3}}
    tracker.on_progress(first)
    tracker.on_progress(second)
    tracker.on_progress(progress_event("stateless", 9))
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


def test_the_status_says_when_the_last_batch_finished() -> None:
    # A batch's end is its start (Spark's progress timestamp) plus its whole duration, so a
    # reader of the status file times work to the millisecond, not to the file's refresh.
    tracker = ProgressTracker()
    event = progress_event("tables", 3, {"pos": {"0": 10}})
    event["timestamp"] = "2026-11-28T15:37:50.190Z"
    event["durationMs"] = {"triggerExecution": 1810}
    tracker.on_progress(event)
    query = SimpleNamespace(name="tables", id="q-1", isActive=True)
    status = tracker.status(query)  # type: ignore[arg-type]
    started = datetime(2026, 11, 28, 15, 37, 50, 190_000, tzinfo=UTC).timestamp()
    assert status["finished_at"] == pytest.approx(started + 1.81)
    # Without Spark's figures, the time the progress arrived.
    before = time.time()
    tracker.on_progress(progress_event("bare", 1) | {"durationMs": {}})
    bare = tracker.status(SimpleNamespace(name="bare", id="q-2", isActive=True))  # type: ignore[arg-type]
    assert before <= bare["finished_at"] <= time.time()


def test_a_real_time_epoch_is_told_as_such_with_the_time_between_epochs() -> None:
    # Spark 4.2's progress of a Kafka-to-Kafka query in Real-Time Mode (an epoch of a planned
    # 5 s): the duration is the epoch's; its tasks ran for addBatch of it.
    figures: list[QueryBatch] = []
    modes = {"routes": TriggerMode.REALTIME}
    tracker = ProgressTracker(
        on_query=figures.append, mode_of=lambda q: modes.get(q, TriggerMode.MICROBATCH)
    )
    epoch = progress_event("routes", 1, {"pos": {"0": 304}})
    epoch["durationMs"] = {
        "addBatch": 5028,
        "commitOffsets": 63,
        "getBatch": 1,
        "latestOffset": 9,
        "queryPlanning": 20,
        "triggerExecution": 5216,
        "walCommit": 91,
    }
    tracker.on_progress(epoch)
    tracker.on_progress(
        progress_event("tables", 7, {"pos": {"0": 300}}) | {"durationMs": epoch["durationMs"]}
    )
    tracker.on_progress(progress_event("routes", 2) | {"durationMs": {"triggerExecution": 5100}})
    assert [(f.query, f.trigger, f.batch_ms, f.between_epochs_ms) for f in figures] == [
        ("routes", TriggerMode.REALTIME, 5216, 188),
        ("tables", TriggerMode.MICROBATCH, 5216, None),  # a micro-batch's time is its duration
        ("routes", TriggerMode.REALTIME, 5100, None),  # Spark gave no addBatch
    ]
    status = tracker.status(SimpleNamespace(name="routes", id="q", isActive=True))  # type: ignore[arg-type]
    assert (status["trigger"], status["batch_ms"]) == ("realtime", 5100)
    # Spark refused Real-Time Mode and the query runs in micro-batches now: the status says so.
    modes.clear()
    status = tracker.status(SimpleNamespace(name="routes", id="q", isActive=True))  # type: ignore[arg-type]
    assert status["trigger"] == "microbatch"


@pytest.mark.spark
def test_a_running_query_reports_every_batch_with_its_offsets_and_metrics(
    spark: Any, tmp_path: Path
) -> None:
    """Attached to a real session: Spark's own progress JSON reaches the tracker, batch by
    batch, with the source's end offset and the query's observed metrics."""
    from pyspark.sql import functions as F

    batches: list[tuple[str, int, dict[str, dict[str, int]]]] = []
    figures: list[QueryBatch] = []
    tracker = ProgressTracker(lambda *batch: batches.append(batch), figures.append)
    tracker.attach(spark)
    rows = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .observe("counts", F.count(F.lit(1)).alias("rows"))
    )
    query = (
        rows.writeStream.format("noop")
        .queryName("listened")
        .trigger(processingTime="200 milliseconds")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while len([f for f in figures if f.input_rows > 0]) < 3:
            assert time.monotonic() < deadline, "no progress reached the tracker"
            time.sleep(0.2)
        status = tracker.status(query)
    finally:
        query.stop()
    mine = [f for f in figures if f.query == "listened"]
    ids = [f.batch for f in mine]
    assert ids == sorted(set(ids))  # each batch once, in order
    busy = [f for f in mine if f.input_rows > 0]
    assert all(f.batch_ms is not None and f.batch_ms >= 0 for f in busy)
    # The rate source's offset is not a topic map: no batch claims to have read a topic.
    assert batches == []
    assert status["batch"] == ids[-1]
    assert status["observed_total"]["counts"]["rows"] == sum(f.input_rows for f in mine)
