"""What a pipeline's committed micro-batches covered: source offsets -> changelog positions.

After each micro-batch of a table's query commits, the pipeline (`sparkiq run`) records a
`BatchProgress`: the source offsets the batch read up to (per topic and partition, the
next offset to read) and the end of the table's changelog once the batch was written. Every
record of the sources before those offsets is then reflected in the changelog before those
ends, so a replica at or past the ends answers with it: that is how a read with
`after_source=TOPIC:PARTITION:OFFSET` becomes a consistency token (`covering`).

Besides, after every micro-batch of every query (a table's or not), the pipeline records a
`QueryBatch`: the figures a person watching the pipeline wants (batch id, input and
processing rates, batch duration, rows in the query's state, dead letters). They are for the
console's pipeline page (`GET /v1/pipeline`), not for consistency. A query in Spark's
Real-Time Mode reports a batch too, but there a batch is an epoch: its tasks run for the
epoch's planned length (5 s) and pass each record on as it arrives, so its duration says how
often offsets are checkpointed, not how long a record takes. What such a query's records may
wait for is the time between two epochs' tasks (`QueryBatch.between_epochs_ms`); Spark 4.2's
progress gives no per-record latency.

`PipelineProgress` keeps the recent batches of each table and of each query (a node's view
of the progress topics, `sparkiq.kafka.progress`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sparkiq.core.positions import Positions
from sparkiq.core.triggers import TriggerMode

SourcePosition = tuple[str, int, int]  # topic, partition, offset of a record
# Batches kept per table: a read names a source offset it just produced, so the newest
# batches answer it; an older offset is covered by the oldest batch kept (it is past it).
KEEP_BATCHES = 1_000
# Batches kept per query: ten minutes at one micro-batch a second, for the console's charts.
KEEP_QUERY_BATCHES = 600
# The observed metric a pipeline counts its dead letters in (`df.observe(..., F.sum(...)
# .alias("dead_letters"))`): summed over every observation of a query that has one.
DEAD_LETTERS_METRIC = "dead_letters"


class BadProgress(ValueError):
    """A progress record or an `after_source` text that does not parse."""


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One committed micro-batch of the query that writes `table`."""

    table: str
    batch: int
    sources: Mapping[tuple[str, int], int]  # (topic, partition) -> next offset to read
    changelog: Positions  # changelog partition -> its end once the batch was written
    time_ms: int = 0

    def to_json(self) -> bytes:
        sources: dict[str, dict[str, int]] = {}
        for (topic, p), offset in sorted(self.sources.items()):
            sources.setdefault(topic, {})[str(p)] = offset
        return orjson.dumps(
            {
                "table": self.table,
                "batch": self.batch,
                "sources": sources,
                "changelog": {str(p): o for p, o in sorted(self.changelog.items())},
                "time_ms": self.time_ms,
            }
        )

    @staticmethod
    def from_json(data: bytes) -> BatchProgress:
        try:
            doc: Any = orjson.loads(data)
            sources = {
                (str(topic), int(p)): int(o)
                for topic, parts in doc["sources"].items()
                for p, o in parts.items()
            }
            changelog = {int(p): int(o) for p, o in doc["changelog"].items()}
            return BatchProgress(
                str(doc["table"]), int(doc["batch"]), sources, changelog, int(doc["time_ms"])
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadProgress(f"not a progress record: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class QueryBatch:
    """The figures of one finished micro-batch of a pipeline's streaming query."""

    query: str  # the query's name
    batch: int
    time_ms: int  # when the pipeline saw the batch finish (epoch ms)
    tables: tuple[str, ...] = ()  # the tables the query writes (none: a branch to topics)
    input_rows: int = 0
    input_rows_per_s: float = 0.0
    processed_rows_per_s: float = 0.0
    # The batch's duration (Spark's triggerExecution); in Real-Time Mode the epoch's length.
    batch_ms: int | None = None
    state_rows: int | None = None  # rows in the query's state stores; None: stateless
    dead_letters: int = 0  # counted by this batch (`DEAD_LETTERS_METRIC`)
    dead_letters_total: int = 0  # counted since the pipeline started
    trigger: TriggerMode = TriggerMode.MICROBATCH  # how the query runs
    # Real-Time Mode: the epoch's time outside its tasks (Spark's triggerExecution less its
    # addBatch: the offset and commit logs, planning), when arriving records wait for the next
    # epoch's tasks. None in micro-batches.
    between_epochs_ms: int | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "query": self.query,
                "batch": self.batch,
                "time_ms": self.time_ms,
                "tables": list(self.tables),
                "input_rows": self.input_rows,
                "input_rows_per_s": self.input_rows_per_s,
                "processed_rows_per_s": self.processed_rows_per_s,
                "batch_ms": self.batch_ms,
                "state_rows": self.state_rows,
                "dead_letters": self.dead_letters,
                "dead_letters_total": self.dead_letters_total,
                "trigger": self.trigger.value,
                "between_epochs_ms": self.between_epochs_ms,
            }
        )

    @staticmethod
    def from_json(data: bytes) -> QueryBatch:
        """A record of the queries topic; fields a later version adds are ignored, and the
        figures an earlier one did not send take their defaults."""
        try:
            doc: Any = orjson.loads(data)
            batch_ms, state_rows = doc.get("batch_ms"), doc.get("state_rows")
            between = doc.get("between_epochs_ms")
            return QueryBatch(
                query=str(doc["query"]),
                batch=int(doc["batch"]),
                time_ms=int(doc["time_ms"]),
                tables=tuple(str(t) for t in doc.get("tables", ())),
                input_rows=int(doc.get("input_rows", 0)),
                input_rows_per_s=float(doc.get("input_rows_per_s", 0.0)),
                processed_rows_per_s=float(doc.get("processed_rows_per_s", 0.0)),
                batch_ms=None if batch_ms is None else int(batch_ms),
                state_rows=None if state_rows is None else int(state_rows),
                dead_letters=int(doc.get("dead_letters", 0)),
                dead_letters_total=int(doc.get("dead_letters_total", 0)),
                trigger=TriggerMode(doc.get("trigger", TriggerMode.MICROBATCH.value)),
                between_epochs_ms=None if between is None else int(between),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadProgress(f"not a query progress record: {exc!r}") from exc


def parse_source_positions(text: str) -> list[SourcePosition]:
    """`TOPIC:PARTITION:OFFSET[,...]` (the offsets of records a caller produced)."""
    out: list[SourcePosition] = []
    for part in text.split(","):
        rest, _, offset = part.rpartition(":")
        topic, _, partition = rest.rpartition(":")
        if not topic or not partition.isdigit() or not offset.isdigit():
            raise BadProgress(f"{part!r} is not TOPIC:PARTITION:OFFSET")
        out.append((topic, int(partition), int(offset)))
    if len(out) > 1_000:
        raise BadProgress("names more than 1000 source positions")
    return out


class PipelineProgress:
    """The recent committed batches of every table, as the progress topic has them.

    Written by the thread that follows the topic, read by the HTTP layer: thread-safe.
    """

    def __init__(self, keep: int = KEEP_BATCHES, keep_queries: int = KEEP_QUERY_BATCHES) -> None:
        self._lock = threading.Lock()
        self._keep = keep
        self._keep_queries = keep_queries
        self._tables: dict[str, deque[BatchProgress]] = {}
        self._queries: dict[str, deque[QueryBatch]] = {}

    def add_query(self, batch: QueryBatch) -> None:
        """A finished micro-batch of a query. The same batch id as the last one kept replaces
        it (a batch Spark ran again); a lower one means the query started anew (a new
        checkpoint): the batches before are another run's, and are dropped."""
        with self._lock:
            kept = self._queries.get(batch.query)
            if kept is None:
                kept = self._queries[batch.query] = deque(maxlen=self._keep_queries)
            elif kept and batch.batch == kept[-1].batch:
                kept.pop()
            elif kept and batch.batch < kept[-1].batch:
                kept.clear()
            kept.append(batch)

    def queries(self) -> dict[str, list[QueryBatch]]:
        """The recent batches of every query, oldest first, by query name."""
        with self._lock:
            return {name: list(kept) for name, kept in sorted(self._queries.items())}

    def add(self, batch: BatchProgress) -> None:
        with self._lock:
            kept = self._tables.get(batch.table)
            if kept is None:
                kept = self._tables[batch.table] = deque(maxlen=self._keep)
            kept.append(batch)

    def latest(self, table: str) -> BatchProgress | None:
        with self._lock:
            kept = self._tables.get(table)
            return kept[-1] if kept else None

    def covering(self, table: str, wanted: Sequence[SourcePosition]) -> Positions | None:
        """The changelog positions at which `table` reflects every record of `wanted`, or
        None while no committed batch has read past all of them (or none is known).

        The earliest batch past each record is enough; a later one would do too, but would
        make the read wait for more than it needs.
        """
        with self._lock:
            kept = tuple(self._tables.get(table, ()))
        if not kept:
            return None
        need: Positions = {}
        for topic, partition, offset in wanted:
            found = _earliest_past(kept, (topic, partition), offset)
            if found is None:
                return None
            for p, end in found.changelog.items():
                if end > need.get(p, -1):
                    need[p] = end
        return need


def _earliest_past(
    kept: Sequence[BatchProgress], tp: tuple[str, int], offset: int
) -> BatchProgress | None:
    """The earliest of the newest run of batches that read past `offset` of `tp`."""
    found: BatchProgress | None = None
    for batch in reversed(kept):
        end = batch.sources.get(tp)
        if end is None or end <= offset:
            break
        found = batch
    return found
