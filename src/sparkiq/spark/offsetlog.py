"""How many records a micro-batch reads, from its query's offset log.

Before it runs micro-batch N, Spark writes the end offsets of every source to
``<checkpoint>/offsets/N``: a version line, a metadata line, then one line per source (``-``
for a source without offsets yet). Kafka sources (sparkiq's and Spark's own) write
``{"topic": {"partition": next_offset}}``, so the records of batch N are the offsets between
the files of N - 1 and N. The sink reads them to decide where to produce a batch
(`sparkiq.spark.kafkawrite.BatchProducer`) before the batch runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

KafkaOffsets = dict[tuple[str, str], int]
"""(topic, partition as written) -> next offset, of one source."""


def local_checkpoint_dir(location: str) -> Path | None:
    """*location* as a directory of this machine's file system, or None (``hdfs://``,
    ``s3a://``... or any other scheme)."""
    parsed = urlparse(location)
    if parsed.scheme == "":
        return Path(location)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(parsed.path)
    return None


def _kafka_offsets(line: str) -> KafkaOffsets | None:
    if line == "-":
        return {}
    try:
        raw: Any = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(raw, dict):
        return None
    out: KafkaOffsets = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            return None
        for partition, offset in parts.items():
            if not isinstance(offset, int) or isinstance(offset, bool):
                return None
            out[(str(topic), str(partition))] = offset
    return out


def read_offsets(path: Path) -> list[KafkaOffsets] | None:
    """The Kafka end offsets of each source in the offset log file *path*; None if the file
    is missing, unreadable, or names a source whose offsets are not Kafka offsets."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) < 3 or not lines[0].startswith("v"):
        return None
    sources: list[KafkaOffsets] = []
    for line in lines[2:]:
        offsets = _kafka_offsets(line.strip())
        if offsets is None:
            return None
        sources.append(offsets)
    return sources


def batch_records(checkpoint_location: str, batch_id: int) -> int | None:
    """The records micro-batch *batch_id* reads from its Kafka sources, or None when that is
    not known (the first batch, a checkpoint off this machine, a log already purged, a source
    other than Kafka)."""
    directory = local_checkpoint_dir(checkpoint_location)
    if directory is None or batch_id < 1:
        return None
    end = read_offsets(directory / "offsets" / str(batch_id))
    start = read_offsets(directory / "offsets" / str(batch_id - 1))
    if end is None or start is None or len(end) != len(start):
        return None
    return sum(
        max(0, offset - before.get(tp, 0))
        for before, after in zip(start, end, strict=True)
        for tp, offset in after.items()
    )
