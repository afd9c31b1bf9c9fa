"""Stores whose files failed them: rebuilt from the changelog, or reopened once there is space.

A replica whose store's files fail it (RocksDB corruption or an I/O error, on a read, a write
or at open; `sparkiq.core.errors.StorageFault`) turns FAILED at once, so no read uses it; on
the restorer's next turn its store directory is moved aside and the partition rebuilt from the
changelog. A full disk (`DiskFull`) keeps the files: the store is reopened every
`HEAL_RETRY_S` and resumes from its checkpoint once there is space again.
"""

from __future__ import annotations

import logging
import threading
import time

from sparkiq.core.errors import DiskFull, StateDirLockedError, StateDirMismatchError, StorageFault
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore.replica import PartitionStatus, Replica, ReplicaState
from sparkiq.node.stores.partitionstore import PartitionStore
from sparkiq.node.stores.registry import StoreRegistry

log = logging.getLogger(__name__)

HEAL_RETRY_S = 2.0  # between attempts to reopen a store whose disk was full
_FAILED = ReplicaState.FAILED


class Healing:
    """The `Restorer`'s handling of failed stores (a mixin: the restorer sets the state
    declared here)."""

    registry: StoreRegistry
    storage_faults: int
    rebuilds: int
    _heal_at: float
    _lock: threading.RLock
    _replicas: dict[TopicPartition, Replica]
    _statuses: dict[TopicPartition, PartitionStatus]
    _dirty: threading.Event
    _unsettled: set[TopicPartition]  # replicas `_finish_restores` looks at
    _expiry_stale: bool  # window expiry is handed the replicas again

    def _publish(self) -> None:
        raise NotImplementedError

    def _notify(self) -> None:
        raise NotImplementedError

    def _open_or_rebuild(self, table: TableDef, partition: int) -> tuple[PartitionStore, bool]:
        """The store of (table, partition); one that cannot be opened (corrupt, from another
        table or layout) is moved aside and started empty. True if it was."""
        try:
            return self.registry.open(table, partition), False
        except (StateDirLockedError, DiskFull):
            raise
        except (StorageFault, StateDirMismatchError) as exc:
            self.storage_faults += 1
            log.error("table %r partition %d: %s", table.name, partition, exc)
            return self._rebuild(table, partition), True

    def _rebuild(self, table: TableDef, partition: int) -> PartitionStore:
        """Move the (closed) store of (table, partition) aside and open it anew, empty: the
        partition is restored from the changelog's start."""
        aside = self.registry.quarantine(table.name, partition)
        store = self.registry.open(table, partition)
        self.rebuilds += 1
        log.warning(
            "table %r partition %d: its store is rebuilt from the changelog (the failed files "
            "are kept at %s)",
            table.name,
            partition,
            aside,
        )
        return store

    def _on_fault(self, store: PartitionStore, fault: StorageFault) -> None:
        """A store's files failed it (any thread): its replica turns FAILED at once."""
        tp = (store.table.topic, store.partition)
        with self._lock:
            replica = self._replicas.get(tp)
            if replica is None or replica.store is not store or not replica.fail(fault):
                return
            self.storage_faults += 1
            self._expiry_stale = True
            self._publish()
        if isinstance(fault, DiskFull):
            log.error(
                "table %r partition %d: %s; the replica stops applying records and serves "
                "no reads until there is space again (retried every %.0f s)",
                store.table.name,
                store.partition,
                fault,
                HEAL_RETRY_S,
            )
        else:
            log.error(
                "table %r partition %d: %s; its reads go to other replicas while it is "
                "rebuilt from the changelog",
                store.table.name,
                store.partition,
                fault,
            )
        self._dirty.set()
        self._notify()

    def _heal(self) -> None:
        """Rebuild FAILED replicas, or reopen those of a full disk when due (caller holds the
        lock; restorer thread)."""
        now = time.monotonic()
        for replica in [r for r in self._replicas.values() if r.state is _FAILED]:
            self._expiry_stale = True  # swept again once healed
            table, partition = replica.table, replica.tp[1]
            full = isinstance(replica.fault, DiskFull)
            if full and now < self._heal_at:
                continue
            self.registry.close(table.name, partition)
            try:
                if full:
                    store = self.registry.open(table, partition)
                    store.apply((), store.next_offset or 0)  # a write proves there is space
                    log.info("table %r partition %d: space again; resuming", table.name, partition)
                    replica.replace_store(store, rebuilt=False)
                    self._unsettled.add(replica.tp)
                    continue
                replica.replace_store(self._rebuild(table, partition), rebuilt=True)
                self._unsettled.add(replica.tp)
            except DiskFull as exc:
                self.registry.close(table.name, partition)
                replica.fault = exc
                self._heal_at = now + HEAL_RETRY_S
            except StorageFault as exc:
                self.registry.close(table.name, partition)
                replica.fault = exc  # rebuilt at the next attempt

    def _healing_due(self) -> bool:
        """Whether a FAILED replica waits for its next attempt (the run loop wakes for it).
        Read from the published snapshot: `assign` may change the replicas meanwhile."""
        return any(st.state is _FAILED for st in self._statuses.values())
