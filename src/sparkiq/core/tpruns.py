"""Topic-partitions as flat runs of small integers, for the compact encodings.

Topic names are numbered once, in order of first use (`Numbering`); a set of partitions is
then a run ``topic index, partition, ...`` and a value per partition a run ``topic index,
partition, value, ...``, both in partition order. The compact member subscription
(`sparkiq.core.topology.MemberInfo`) and the compact cluster map (`sparkiq.core.mapcodec`)
are written with these.
"""

from __future__ import annotations

from collections.abc import Iterable

# As `sparkiq.core.topology.TopicPartition` (which imports this module).
_TP = tuple[str, int]


class Numbering:
    """Strings numbered in order of first use; `items` lists them by number."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def index(self, item: str) -> int:
        found = self._index.get(item)
        if found is None:
            found = self._index[item] = len(self.items)
            self.items.append(item)
        return found


def pair_run(topics: Numbering, tps: Iterable[_TP]) -> list[int]:
    """``[topic index, partition, ...]`` in partition order."""
    out: list[int] = []
    for topic, p in sorted(tps):
        out.extend((topics.index(topic), p))
    return out


def value_run(topics: Numbering, values: Iterable[tuple[_TP, int]]) -> list[int]:
    """``[topic index, partition, value, ...]`` in partition order."""
    out: list[int] = []
    for (topic, p), value in sorted(values):
        out.extend((topics.index(topic), p, value))
    return out


def from_pair_run(names: list[str], run: list[int]) -> frozenset[_TP]:
    """The partitions of a `pair_run`, with *names* by topic index."""
    return frozenset((names[run[i]], int(run[i + 1])) for i in range(0, len(run), 2))


def from_value_run(names: list[str], run: list[int]) -> dict[_TP, int]:
    """The values of a `value_run`, with *names* by topic index."""
    return {(names[run[i]], int(run[i + 1])): int(run[i + 2]) for i in range(0, len(run), 3)}
