"""Restore progress: fractions, rounds, and the console display (restoreprogress.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import pytest

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore import PartitionStatus, ReplicaState
from sparkiq.node.restore.progress import (
    RestoreProgress,
    RestoreRound,
    RestoreSnapshot,
    fraction_done,
    report_progress,
)

USERS = TableDef("users", "users-changelog", 4)


def status(
    table: TableDef, p: int, state: ReplicaState, position: int, end: int
) -> PartitionStatus:
    return PartitionStatus(
        (table.topic, p), table.name, state, position, end, max(end - position, 0)
    )


def test_fraction_done() -> None:
    assert fraction_done(100, 100, 200) == 0.0
    assert fraction_done(100, 150, 200) == 0.5
    assert fraction_done(100, 250, 200) == 1.0  # the end seen was stale
    assert fraction_done(100, 100, 100) == 1.0  # nothing to restore
    assert fraction_done(100, 50, 100) == 0.0


def test_a_round_from_start_to_end() -> None:
    progress = RestoreProgress()
    a, b, s = (USERS.topic, 0), (USERS.topic, 1), (USERS.topic, 2)
    assert progress.update({}, 0, now=0.0) is None
    standby = status(USERS, 2, ReplicaState.STANDBY, 10, 10)
    statuses = {
        a: status(USERS, 0, ReplicaState.RESTORING, 0, 1_000),
        b: status(USERS, 1, ReplicaState.RESTORING, 500, 1_500),
        s: standby,
    }
    first = progress.update(statuses, 100, now=10.0)
    assert isinstance(first, RestoreSnapshot)
    assert (first.done, first.partitions, first.remaining, first.records) == (0, 2, 2_000, 0)
    assert first.eta_s is None  # no rate yet
    statuses[a] = status(USERS, 0, ReplicaState.ACTIVE, 1_000, 1_000)
    statuses[b] = status(USERS, 1, ReplicaState.RESTORING, 1_000, 1_500)
    mid = progress.update(statuses, 1_600, now=12.0)
    assert isinstance(mid, RestoreSnapshot)
    assert (mid.done, mid.partitions, mid.remaining, mid.records) == (1, 2, 500, 1_500)
    assert mid.rate == 750.0  # 1500 offsets in 2 s
    assert mid.eta_s == pytest.approx(500 / 750)
    assert progress.start_of(b) == 500
    assert "1/2 partitions done" in mid.describe()
    assert "ETA 1s" in mid.describe()
    statuses[b] = status(USERS, 1, ReplicaState.ACTIVE, 1_500, 1_500)
    end = progress.update(statuses, 2_100, now=13.0)
    assert isinstance(end, RestoreRound)
    assert (end.partitions, end.records, end.elapsed_s) == (2, 2_000, 3.0)
    assert end.describe().startswith("restored 2 partitions in 3.0 s")
    assert progress.start_of(b) is None
    assert progress.update(statuses, 2_100, now=14.0) is None  # idle until the next round


def test_a_partition_moved_away_is_not_counted_as_restored() -> None:
    progress = RestoreProgress()
    a, b = (USERS.topic, 0), (USERS.topic, 1)
    progress.update(
        {
            a: status(USERS, 0, ReplicaState.RESTORING, 0, 100),
            b: status(USERS, 1, ReplicaState.RESTORING, 0, 100),
        },
        0,
        now=0.0,
    )
    end = progress.update({a: status(USERS, 0, ReplicaState.ACTIVE, 100, 100)}, 100, now=1.0)
    assert isinstance(end, RestoreRound)
    assert end.partitions == 1


class Script:
    """Statuses a fake restorer reports, one step per read, the last one repeated.

    `done` is set once it has been read `reads_wanted` times.
    """

    def __init__(
        self, steps: list[tuple[dict[TopicPartition, PartitionStatus], int]], reads_wanted: int
    ) -> None:
        self.steps = steps
        self.reads = 0
        self.reads_wanted = reads_wanted
        self.done = asyncio.Event()

    def __call__(self) -> tuple[Mapping[TopicPartition, PartitionStatus], int]:
        step = self.steps[min(self.reads, len(self.steps) - 1)]
        self.reads += 1
        if self.reads >= self.reads_wanted:
            self.done.set()
        return step


def restoring_script() -> Script:
    a = (USERS.topic, 0)
    return Script(
        [
            ({}, 0),
            ({a: status(USERS, 0, ReplicaState.RESTORING, 0, 100)}, 0),
            ({a: status(USERS, 0, ReplicaState.RESTORING, 50, 100)}, 50),
            ({a: status(USERS, 0, ReplicaState.ACTIVE, 100, 100)}, 100),
        ],
        reads_wanted=6,
    )


async def run_until_read(
    script: Script,
    *,
    interval_s: float = 0.0,
    status_line: Callable[[str], None] | None = None,
    clear_status: Callable[[], None] | None = None,
) -> None:
    task = asyncio.create_task(
        report_progress(
            RestoreProgress(),
            script,
            interval_s=interval_s,
            status_line=status_line,
            clear_status=clear_status,
            tick_s=0.001,
        )
    )
    await asyncio.wait_for(script.done.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_progress_as_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sparkiq.node.restore.progress")
    await run_until_read(restoring_script())
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("restoring: 0/1 partitions done")
    assert "50 offsets to go" in messages[1]
    assert messages[2].startswith("restored 1 partitions in ")
    assert len(messages) == 3  # nothing more once the round ended


async def test_progress_on_a_status_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sparkiq.node.restore.progress")
    shown: list[str] = []
    cleared: list[bool] = []
    await run_until_read(
        restoring_script(),
        status_line=shown.append,
        clear_status=lambda: cleared.append(True),
    )
    assert [s.split(",")[0] for s in shown] == ["restoring: 0/1 partitions done"] * 2
    assert cleared == [True]
    # The end of the round is logged, above the (now cleared) status line.
    assert [r.getMessage()[:20] for r in caplog.records] == ["restored 1 partition"]
