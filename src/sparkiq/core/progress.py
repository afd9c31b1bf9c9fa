"""What a pipeline's committed micro-batches covered: source offsets -> changelog positions.

After each micro-batch of a table's query commits, the pipeline (`sparkiq run`) records a
`BatchProgress`: the source offsets the batch read up to (per topic and partition, the
next offset to read) and the end of the table's changelog once the batch was written. Every
record of the sources before those offsets is then reflected in the changelog before those
ends, so a replica at or past the ends answers with it: that is how a read with
`after_source=TOPIC:PARTITION:OFFSET` becomes a consistency token (`covering`).

`PipelineProgress` keeps the recent batches of each table (a node's view of the progress
topic, `sparkiq.kafka.progress`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sparkiq.core.positions import Positions

SourcePosition = tuple[str, int, int]  # topic, partition, offset of a record
# Batches kept per table: a read names a source offset it just produced, so the newest
# batches answer it; an older offset is covered by the oldest batch kept (it is past it).
KEEP_BATCHES = 1_000


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

    def __init__(self, keep: int = KEEP_BATCHES) -> None:
        self._lock = threading.Lock()
        self._keep = keep
        self._tables: dict[str, deque[BatchProgress]] = {}

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
