"""Deleting the stores a node no longer holds (`StateCleanup`), after a delay.

When a partition moves away (neither active, standby nor warming here any more) the restorer
closes its store at once, which frees its memory and descriptors; its directory stays, so a
partition that comes back soon (a node that left for a moment, a move undone) resumes from
its checkpoint and replays only the tail. Once a store has stayed closed for the cleanup
delay (`--state-cleanup-delay-s`, like Kafka Streams' `state.cleanup.delay.ms`) its
directory is deleted; quarantined copies of failed stores (`StoreRegistry.quarantine`) are
deleted the same time after they were moved aside.

A store directory found on disk that this process never opened counts as closed at the
later of its last change and the node's start: a node that restarts gives its group time to
hand its partitions back before anything is deleted.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkiq.node.stores.registry import StoreRegistry

log = logging.getLogger(__name__)

_NAMED_IN_LOG = 10  # stores named in one log line of a sweep; the rest are counted


@dataclass(frozen=True)
class PendingCleanup:
    """A store directory waiting to be deleted."""

    table: str
    partition: int
    path: Path
    closed_at: float  # Unix time the store was closed (or moved aside, if quarantined)
    delete_at: float  # Unix time it is deleted from, unless it is opened again first
    quarantined: bool

    def fields(self) -> dict[str, object]:
        """As listed in `/v1/metadata`."""
        return {
            "table": self.table,
            "partition": self.partition,
            "path": str(self.path),
            "quarantined": self.quarantined,
            "closed_ms": int(self.closed_at * 1000),
            "delete_at_ms": int(self.delete_at * 1000),
        }


class StateCleanup:
    """Deletes the directories of stores closed for longer than `delay_s`; counts them."""

    def __init__(
        self,
        registry: StoreRegistry,
        delay_s: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.delay_s = delay_s
        self._clock = clock
        self._started_at = clock()
        self._lock = threading.Lock()  # one sweep at a time
        self.deleted = 0  # store directories deleted since start (quarantined ones too)

    def pending(self) -> list[PendingCleanup]:
        """Every store directory not open here, with when it is deleted; soonest first."""
        out: list[PendingCleanup] = []
        for (table, partition), (path, closed_at) in self.registry.closed_stores().items():
            if closed_at is None:
                closed_at = max(_changed_at(path), self._started_at)
            out.append(
                PendingCleanup(
                    table, partition, path, closed_at, closed_at + self.delay_s, quarantined=False
                )
            )
        for path, table, partition, moved_at in self.registry.quarantined():
            out.append(
                PendingCleanup(
                    table, partition, path, moved_at, moved_at + self.delay_s, quarantined=True
                )
            )
        return sorted(out, key=lambda p: (p.delete_at, p.table, p.partition))

    def sweep(self) -> list[PendingCleanup]:
        """Delete the directories whose time has come; those it deleted."""
        with self._lock:
            now = self._clock()
            self.registry.empty_trash()
            done: list[PendingCleanup] = []
            for item in self.pending():
                if item.delete_at > now:
                    break
                if item.quarantined:
                    shutil.rmtree(item.path, ignore_errors=True)
                    gone = not item.path.exists()
                else:
                    # False if the partition came back meanwhile: the registry opened it.
                    gone = self.registry.discard(item.table, item.partition)
                if gone:
                    done.append(item)
            self.deleted += len(done)
        if done:
            names = ", ".join(
                f"{p.table}[{p.partition}]{' (quarantined)' if p.quarantined else ''}"
                for p in done[:_NAMED_IN_LOG]
            )
            more = f" and {len(done) - _NAMED_IN_LOG} more" if len(done) > _NAMED_IN_LOG else ""
            log.info(
                "deleted %d store director%s this node no longer holds, closed for over "
                "%.0f s (--state-cleanup-delay-s): %s%s",
                len(done),
                "y" if len(done) == 1 else "ies",
                self.delay_s,
                names,
                more,
            )
        return done

    @property
    def sweep_every_s(self) -> float:
        """How often a node sweeps: a few times per delay, from twice a second to every 30 s."""
        return min(max(self.delay_s / 4, 0.5), 30.0)


def _changed_at(path: Path) -> float:
    """When the directory last changed (a file was added or removed); 0 if it is gone."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
