"""Tells which partitioner placed a topic's records, from a sample of them.

A table must name the rule its producers placed keys by (`sparkiq.core.partitioner`), and the
person registering it rarely knows which: librdkafka's default differs from Java's, and Go
clients differ again. `detect` judges each named rule on a sample of (partition, key)
pairs and chooses the one that places *every* sampled record where it is. A rule that
misplaces even one record cannot be the producers': lookups by it would miss that key.

When several rules fit (one partition, or a sample so small they agree by chance), the
preference is murmur2, crc32, fnv1a: Kafka's own default first. When none fits, the topic
was placed by a custom rule (or by several producers with different rules): `ANY`, so a
lookup asks every partition. An empty sample cannot tell anything; murmur2, Kafka's
default, is assumed.

librdkafka's ``consistent_random`` (its default) places a record whose key is *empty*
(``b""``, not null) at random, while plain ``consistent`` puts it in partition
``crc32(b"") % n == 0``. An empty key therefore counts as in place for crc32 wherever it
is: either way the producer could have been librdkafka's. ``murmur2_random`` and
``fnv1a_random`` hash an empty key like any other; only null keys are random there, and
null keys are never sampled.

Pure: no I/O. `sparkiq.kafka.sample.sample_keys` reads the sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from sparkiq.core.partitioner import Partitioner, PlaceFn, placer

__all__ = ["NAMED", "Detection", "detect"]

# Every rule that can compute a partition, in order of preference when several fit.
NAMED: tuple[Partitioner, ...] = (Partitioner.MURMUR2, Partitioner.CRC32, Partitioner.FNV1A)


@dataclass(frozen=True, slots=True)
class Detection:
    """Which partitioner was chosen for a sample, and how well each named one fits it."""

    chosen: Partitioner
    sampled: int
    """Records judged (keyed records of the sample)."""
    in_place: Mapping[Partitioner, int]
    """Per named partitioner: how many sampled records it places where they are."""

    def evidence(self) -> str:
        """One line that says why `chosen` was chosen, for a person to check it."""
        if self.sampled == 0:
            return (
                "no keyed record was found, so the placement could not be told; "
                f"{Partitioner.MURMUR2} (Kafka's default) is assumed"
            )
        first = [self.chosen] if self.chosen in NAMED else []
        order = first + [p for p in NAMED if p not in first]
        parts = [f"{p}: {self.in_place.get(p, 0):,} of {self.sampled:,}" for p in order]
        parts[0] += " sampled records in place"
        if not first:
            parts.insert(0, f"{self.chosen}: no named partitioner places every sampled record")
        return "; ".join(parts)


def detect(samples: Iterable[tuple[int, bytes]], num_partitions: int) -> Detection:
    """The partitioner that placed *samples*, (partition, key) pairs of one topic.

    *num_partitions* is the topic's partition count (>= 1). The keys are the bytes the
    partitioner saw (for a windowed table, the key without its window).
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    records = list(samples)
    in_place = {p: _count_in_place(p, records, num_partitions) for p in NAMED}
    chosen = next((p for p in NAMED if in_place[p] == len(records)), Partitioner.ANY)
    return Detection(chosen, len(records), MappingProxyType(in_place))


def _count_in_place(
    partitioner: Partitioner, records: Sequence[tuple[int, bytes]], num_partitions: int
) -> int:
    """How many of *records* *partitioner* places in the partition they are in."""
    place: PlaceFn | None = placer(partitioner)
    if place is None:  # pragma: no cover - NAMED holds only rules that compute
        raise ValueError(f"{partitioner} does not compute partitions")
    # consistent_random puts an empty key anywhere (module docstring).
    empty_anywhere = partitioner is Partitioner.CRC32
    return sum(
        1
        for partition, key in records
        if (empty_anywhere and not key) or place(key, num_partitions) == partition
    )
