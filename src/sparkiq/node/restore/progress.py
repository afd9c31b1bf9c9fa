"""How far the node's restores have come: per partition, per round, and on the console.

A *round* begins when a partition starts restoring while none was, and ends when none is
restoring any more (each partition caught up, or moved away). `RestoreProgress` is fed the
restorer's statuses now and then (`update`) and answers with a `RestoreSnapshot` while a
round runs (partitions done k/n, offsets to go, rate, ETA) and a `RestoreRound` once, when
it ends. It remembers where each partition's restore began, so the metrics can say what
fraction of it is done (`fraction_done`).

`report_progress` is the `sparkiq serve` display: every `interval_s` a log line while a round
runs, or a live status line when stderr is a terminal (see `sparkiq.cli.logs.StatusLineHandler`),
and "restored N partitions in T s" at the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore import PartitionStatus, ReplicaState

log = logging.getLogger("sparkiq.node.restore.progress")


def fraction_done(start: int, position: int, end: int) -> float:
    """How much of the way from `start` to `end` a replica at `position` has come, 0..1."""
    if end <= start:
        return 1.0 if position >= end else 0.0
    return min(max((position - start) / (end - start), 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """One restoring partition: where its restore began, where it is, where it must get to."""

    tp: TopicPartition
    table: str
    start: int
    position: int
    end: int

    @property
    def remaining(self) -> int:
        return max(self.end - self.position, 0)

    @property
    def fraction(self) -> float:
        return fraction_done(self.start, self.position, self.end)


@dataclass(frozen=True, slots=True)
class RestoreSnapshot:
    """A round in progress."""

    restoring: tuple[PartitionProgress, ...]
    partitions: int  # partitions of this round: restored so far plus still restoring
    records: int  # records the restorer applied since the round began (standbys' too)
    restored_offsets: int  # offsets the round's partitions advanced since it began
    elapsed_s: float

    @property
    def done(self) -> int:
        return self.partitions - len(self.restoring)

    @property
    def remaining(self) -> int:
        return sum(p.remaining for p in self.restoring)

    @property
    def rate(self) -> float:
        """Offsets restored per second, averaged over the round."""
        return self.restored_offsets / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.rate
        return self.remaining / rate if rate > 0 else None

    def describe(self) -> str:
        eta = self.eta_s
        return (
            f"restoring: {self.done}/{self.partitions} partitions done, "
            f"{self.records:,} records applied, {self.remaining:,} offsets to go, "
            f"{self.rate:,.0f} offsets/s, ETA {'?' if eta is None else f'{eta:.0f}s'}"
        )


@dataclass(frozen=True, slots=True)
class RestoreRound:
    """A round that has ended."""

    partitions: int  # partitions that caught up (moved-away ones are not counted)
    records: int
    elapsed_s: float

    def describe(self) -> str:
        return (
            f"restored {self.partitions} partitions in {self.elapsed_s:.1f} s "
            f"({self.records:,} records applied)"
        )


class RestoreProgress:
    """Follows restore rounds across `update` calls (one caller at a time: the node's loop)."""

    def __init__(self) -> None:
        self._began: float | None = None  # monotonic start of the current round
        self._records_at_start = 0
        self._starts: dict[TopicPartition, int] = {}  # position when first seen restoring
        self._reached: dict[TopicPartition, int] = {}  # last position seen, this round
        self._caught_up: set[TopicPartition] = set()

    def start_of(self, tp: TopicPartition) -> int | None:
        """Where `tp`'s restore in the current round began, if it is part of one."""
        return self._starts.get(tp)

    def update(
        self,
        statuses: Mapping[TopicPartition, PartitionStatus],
        records_applied: int,
        now: float | None = None,
    ) -> RestoreSnapshot | RestoreRound | None:
        """Take in the restorer's statuses: the round so far, the round just ended, or None."""
        now = time.monotonic() if now is None else now
        restoring = [st for st in statuses.values() if st.state is ReplicaState.RESTORING]
        if self._began is None:
            if not restoring:
                return None
            self._began, self._records_at_start = now, records_applied
        for tp in [tp for tp in self._starts if tp not in statuses]:
            # Moved to another node before it caught up: no longer part of this round.
            del self._starts[tp]
            self._reached.pop(tp, None)
            self._caught_up.discard(tp)
        for st in statuses.values():
            if st.tp in self._starts:
                self._reached[st.tp] = st.position
                if st.state is not ReplicaState.RESTORING:
                    self._caught_up.add(st.tp)
        progress = []
        for st in restoring:
            start = self._starts.setdefault(st.tp, st.position)
            self._reached[st.tp] = st.position
            self._caught_up.discard(st.tp)  # restoring again (promoted after a rebalance)
            progress.append(PartitionProgress(st.tp, st.table, start, st.position, st.end))
        records = records_applied - self._records_at_start
        elapsed = now - self._began
        if not progress:
            done = RestoreRound(len(self._caught_up), records, elapsed)
            self._began = None
            self._starts.clear()
            self._reached.clear()
            self._caught_up.clear()
            return done
        return RestoreSnapshot(
            restoring=tuple(sorted(progress, key=lambda p: p.tp)),
            partitions=len(self._starts),
            records=records,
            restored_offsets=sum(self._reached[tp] - s for tp, s in self._starts.items()),
            elapsed_s=elapsed,
        )


async def report_progress(
    progress: RestoreProgress,
    read: Callable[[], tuple[Mapping[TopicPartition, PartitionStatus], int]],
    *,
    interval_s: float = 2.0,
    status_line: Callable[[str], None] | None = None,
    clear_status: Callable[[], None] | None = None,
    tick_s: float = 0.5,
) -> None:
    """Show restore progress until cancelled.

    `read()` gives the restorer's statuses and its records-applied count. With `status_line`
    (a terminal), the line is redrawn every `tick_s`; otherwise a log line every
    `interval_s` while a round runs. The end of a round is always logged.
    """
    last_line = float("-inf")
    while True:
        statuses, records = read()
        now = time.monotonic()
        seen = progress.update(statuses, records, now)
        if isinstance(seen, RestoreRound):
            if clear_status is not None:
                clear_status()
            if seen.partitions:
                log.info("%s", seen.describe())
        elif isinstance(seen, RestoreSnapshot):
            if status_line is not None:
                status_line(seen.describe())
            elif now - last_line >= interval_s:
                last_line = now
                log.info("%s", seen.describe())
        await asyncio.sleep(tick_s)
