"""Hears of every finished micro-batch of a pipeline's queries (the runner's Spark listener).

`ProgressTracker` keeps each query's latest progress and its observed metrics summed since
start, and tells the runner of each batch: the source offsets it read (read-your-writes)
and its figures (the console's pipeline page). Spark calls it once per finished
micro-batch, so no batch is missed or counted twice and nothing polls the queries.

A query in Real-Time Mode (`mode_of` says which) reports an epoch per "batch": its
duration is the epoch's planned length, not a processing time, so the tracker tells the mode
with the figures, and the epoch's time outside its tasks, when records wait (`QueryBatch`).

It takes each progress as the JSON text Spark makes of it, in one call to the JVM, rather
than through pyspark's `StreamingQueryListener`: that one rebuilds each progress getter by
getter (tens of py4j round trips per batch), and its observed metrics through a class name
that py4j looks up by scanning every jar on Spark's classpath. On a 2-core machine running
three queries that cost a fifth of a core, on the thread that delivers every Spark event.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sparkiq.core.progress import DEAD_LETTERS_METRIC, QueryBatch
from sparkiq.core.triggers import TriggerMode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

# (query name, batch id, what the batch read: topic -> partition -> next offset)
BatchListener = Callable[[str, int, dict[str, dict[str, int]]], None]
# The figures of a query's finished micro-batch (its `tables` left for the caller to fill).
QueryListener = Callable[[QueryBatch], None]
Progress = Mapping[str, Any]
"""A `StreamingQueryProgress` as Spark writes it in JSON (its `json()`)."""


class ProgressTracker:
    """Every query's latest progress and its observed metrics summed since start."""

    def __init__(
        self,
        on_batch: BatchListener | None = None,
        on_query: QueryListener | None = None,
        mode_of: Callable[[str], TriggerMode] | None = None,
    ) -> None:
        self._on_batch = on_batch
        self._on_query = on_query
        # How a query (by name) runs; None: every query in micro-batches.
        self._mode_of = mode_of
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}
        self._totals: dict[str, dict[str, dict[str, float]]] = {}

    def attach(self, spark: SparkSession) -> None:
        """Hear of every finished micro-batch of *spark*'s streaming queries."""
        from pyspark.java_gateway import ensure_callback_server_started

        gateway: Any = spark.sparkContext._gateway
        ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
        # Spark calls the listener through that callback server (py4j, on 127.0.0.1).
        wrap = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
        wrapper = wrap(_JsonListener(self))
        spark._jsparkSession.streams().addListener(wrapper)

    def on_progress(self, progress: Progress) -> None:
        """One finished micro-batch of a query."""
        name = str(progress.get("name"))
        batch_id = int(progress.get("batchId", -1))
        ends = [_offsets(source.get("endOffset")) for source in progress.get("sources") or []]
        end_offset = ends[0] if ends else None
        if self._on_batch is not None:
            read: dict[str, dict[str, int]] = {}
            for each in ends:
                for topic, parts in (each or {}).items():
                    if isinstance(parts, dict):
                        read.setdefault(topic, {}).update(parts)
            if read:
                self._on_batch(name, batch_id, read)
        observed = {
            metric: dict(row)
            for metric, row in (progress.get("observedMetrics") or {}).items()
            if isinstance(row, Mapping)
        }
        durations = progress.get("durationMs") or {}
        mode = self._mode(name)
        latest = {
            "batch": batch_id,
            "trigger": mode.value,
            "input_rows": int(progress.get("numInputRows") or 0),
            "input_rows_per_s": round(float(progress.get("inputRowsPerSecond") or 0.0), 1),
            "processed_rows_per_s": round(float(progress.get("processedRowsPerSecond") or 0.0), 1),
            "batch_ms": durations.get("triggerExecution"),
            "between_epochs_ms": _between_epochs_ms(durations)
            if mode is TriggerMode.REALTIME
            else None,
            "finished_at": _finished_at(progress),
            "end_offsets": end_offset if isinstance(end_offset, dict) else None,
            "observed": observed,
        }
        with self._lock:
            self._latest[name] = latest
            sums = self._totals.setdefault(name, {})
            for metric, values in observed.items():
                into = sums.setdefault(metric, {})
                for key, value in values.items():
                    if isinstance(value, int | float):
                        into[key] = into.get(key, 0) + value
            dead_total = _dead_letters(sums)
        if self._on_query is not None:
            operators = progress.get("stateOperators") or []
            self._on_query(_query_batch(name, batch_id, latest, operators, observed, dead_total))

    def status(self, query: StreamingQuery) -> dict[str, Any]:
        """What a progress line shows about *query*, as plain JSON-able values."""
        with self._lock:
            latest = dict(self._latest.get(query.name, {}))
            totals = {k: dict(v) for k, v in self._totals.get(query.name, {}).items()}
        return {
            "name": query.name,
            "id": str(query.id),
            "active": query.isActive,
            "trigger": self._mode(query.name).value,
            "batch": latest.get("batch"),
            "input_rows": latest.get("input_rows", 0),
            "input_rows_per_s": latest.get("input_rows_per_s", 0.0),
            "processed_rows_per_s": latest.get("processed_rows_per_s", 0.0),
            "batch_ms": latest.get("batch_ms"),
            "between_epochs_ms": latest.get("between_epochs_ms"),
            "finished_at": latest.get("finished_at"),
            "end_offsets": latest.get("end_offsets"),
            "observed": latest.get("observed", {}),
            "observed_total": totals,
        }

    def _mode(self, name: str) -> TriggerMode:
        return TriggerMode.MICROBATCH if self._mode_of is None else self._mode_of(name)


class _JsonListener:
    """The Python side of Spark's `PythonStreamingQueryListener` (called through py4j)."""

    def __init__(self, tracker: ProgressTracker) -> None:
        self._tracker = tracker

    def onQueryStarted(self, jevent: Any) -> None:
        return None

    def onQueryIdle(self, jevent: Any) -> None:
        return None

    def onQueryTerminated(self, jevent: Any) -> None:
        return None

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            progress = json.loads(jevent.progress().json())
            self._tracker.on_progress(progress)
        except Exception:
            # An exception here would reach Spark's listener bus and be logged there with
            # no word of what failed; the next batch's progress supersedes this one.
            log.exception("pipeline: a query's progress could not be read")

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def _dead_letters(observed: Mapping[str, Mapping[str, Any]]) -> int:
    """The dead letters counted in `observed` (metric -> column -> value)."""
    return int(
        sum(
            value
            for values in observed.values()
            for column, value in values.items()
            if column == DEAD_LETTERS_METRIC and isinstance(value, int | float)
        )
    )


def _query_batch(
    name: str,
    batch_id: int,
    latest: Mapping[str, Any],
    operators: list[Mapping[str, Any]],
    observed: Mapping[str, Mapping[str, Any]],
    dead_total: int,
) -> QueryBatch:
    """The figures of a finished micro-batch."""
    batch_ms, between = latest["batch_ms"], latest["between_epochs_ms"]
    return QueryBatch(
        query=name,
        batch=batch_id,
        time_ms=int(time.time() * 1000),
        input_rows=int(latest["input_rows"] or 0),
        input_rows_per_s=latest["input_rows_per_s"],
        processed_rows_per_s=latest["processed_rows_per_s"],
        batch_ms=None if batch_ms is None else int(batch_ms),
        state_rows=sum(int(op.get("numRowsTotal") or 0) for op in operators) if operators else None,
        dead_letters=_dead_letters(observed),
        dead_letters_total=dead_total,
        trigger=TriggerMode(latest["trigger"]),
        between_epochs_ms=None if between is None else int(between),
    )


def _between_epochs_ms(durations: Mapping[str, Any]) -> int | None:
    """A Real-Time epoch's time outside its tasks: its whole duration less the part its
    tasks ran (``addBatch``), i.e. its offset and commit logs and planning, when records
    that arrive wait for the next epoch's tasks. None without both figures."""
    whole, tasks = durations.get("triggerExecution"), durations.get("addBatch")
    if not isinstance(whole, int | float) or not isinstance(tasks, int | float):
        return None
    return max(0, int(whole - tasks))


def _finished_at(progress: Mapping[str, Any]) -> float:
    """When the micro-batch of *progress* finished (epoch seconds): its start (the progress's
    ``timestamp``) plus its whole duration; now if Spark did not give them."""
    started = progress.get("timestamp")
    took_ms = (progress.get("durationMs") or {}).get("triggerExecution")
    if isinstance(started, str) and isinstance(took_ms, int | float):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(started).timestamp() + took_ms / 1000
    return time.time()


def _offsets(end_offset: Any) -> dict[str, Any] | None:
    """A source's end offset as Spark reports it (JSON, or JSON text) as a dict, if it is one."""
    if isinstance(end_offset, str):
        try:
            end_offset = json.loads(end_offset)
        except ValueError:
            return None
    return end_offset if isinstance(end_offset, dict) else None
