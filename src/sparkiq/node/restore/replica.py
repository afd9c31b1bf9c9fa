"""The restorer's bookkeeping of one assigned partition, and the snapshot it publishes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from sparkiq.core.errors import DiskFull, StorageFault
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore.batches import NewestStart, StoreKeyFn, store_key_fn
from sparkiq.node.stores.partitionstore import PartitionStore

log = logging.getLogger(__name__)

# The longest a replica that turned ACTIVE leaves its store unflushed while others restore.
SETTLE_WITHIN_S = 30.0


class ReplicaState(StrEnum):
    """What a node's copy of a partition is doing."""

    RESTORING = "restoring"  # active role, catching up to the end seen at assignment
    ACTIVE = "active"  # active role, caught up: serves reads
    STANDBY = "standby"  # follows the changelog; may answer reads within a lag bound
    FAILED = "failed"  # its store's files failed it: never read; rebuilt (or, for a full
    # disk, reopened) by the restorer


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """A snapshot of one assigned partition."""

    tp: TopicPartition
    table: str
    state: ReplicaState
    position: int  # next offset to apply
    end: int  # true end offset last seen
    lag: int  # end - position, >= 0
    misplaced: int = 0  # records stored here that the table's partitioner puts elsewhere
    fault: str | None = None  # why it is FAILED
    disk_full: bool = False  # FAILED for want of disk space: resumes once there is some
    rebuilds: int = 0  # times this node rebuilt the partition's store from the changelog
    # Kafka timestamp (ms) of the newest record this replica applied since the node started
    # (None: none yet): how fresh the replica is (`sparkiq.node.freshness`).
    newest_record_ms: int | None = None


class Replica:
    """One assigned partition: its store, role, position and restore target.

    Guarded by the restorer lock. Only the restorer thread writes to the store and moves
    `position`; `assign()` (any thread) may change the role.
    """

    __slots__ = (
        "active_since",
        "end",
        "fault",
        "is_active",
        "key_fn",
        "measuring",
        "misplaced_logged",
        "newest_record_ms",
        "newest_start",
        "position",
        "rebuilds",
        "role_epoch",
        "skipped",
        "state",
        "store",
        "table",
        "tail",
        "target",
        "tp",
    )

    def __init__(self, tp: TopicPartition, table: TableDef, store: PartitionStore) -> None:
        self.tp = tp
        self.table = table
        self.store = store
        # The newest window start of the records read for this partition, for window
        # retention (`expiry`); only windowed tables with a retention keep it.
        self.newest_start: NewestStart | None = (
            NewestStart() if table.is_windowed and table.retention_ms is not None else None
        )
        self.key_fn: StoreKeyFn | None = store_key_fn(table, self.newest_start)
        self.misplaced_logged = False
        self.newest_record_ms: int | None = None
        self.position = store.next_offset or 0
        self.end = self.position
        # Where the consumer last reported the end of what it can read (None: not yet).
        self.tail: int | None = None
        self.target: int | None = None  # true end measured when the active role arrived
        self.role_epoch = 0  # bumped on every role change; stale end measurements are dropped
        self.measuring: int | None = None  # role_epoch of the end measurement under way
        self.is_active = False
        self.state = ReplicaState.STANDBY
        self.skipped = 0
        self.fault: StorageFault | None = None  # set while FAILED
        self.rebuilds = 0
        self.active_since = 0.0  # monotonic time it last turned ACTIVE (`settle`)

    @property
    def wal(self) -> bool:
        """Whether writes go through RocksDB's write-ahead log.

        Not while RESTORING, nor after until the store has persisted what it wrote without
        it (`settle`): reads see those writes all the same (they are in the memtable); only
        durability waits, and a crash loses data and checkpoint together, so the changelog
        is read again from the last flushed checkpoint. A write with the WAL on top of
        unflushed ones would first have to flush them, holding the restorer thread.
        """
        return self.state is not ReplicaState.RESTORING and not self.store.unflushed

    def set_role(self, active: bool) -> None:
        if active == self.is_active:
            return
        self.is_active = active
        if self.state is not ReplicaState.FAILED:
            self.state = self._fresh_state()
        self.target = None
        self.role_epoch += 1

    def _fresh_state(self) -> ReplicaState:
        return ReplicaState.RESTORING if self.is_active else ReplicaState.STANDBY

    def fail(self, fault: StorageFault) -> bool:
        """Mark the replica FAILED by `fault`; False if it was already."""
        if self.state is ReplicaState.FAILED:
            return False
        self.state = ReplicaState.FAILED
        self.fault = fault
        return True

    def replace_store(self, store: PartitionStore, *, rebuilt: bool) -> None:
        """Go on with `store` (rebuilt empty, or the same files reopened) from its checkpoint:
        RESTORING or STANDBY again, its restore target measured anew. The end seen so far
        stays, so the lag says how much is left to apply."""
        self.store = store
        self.fault = None
        self.position = store.next_offset or 0
        self.target = None
        self.role_epoch += 1
        self.state = self._fresh_state()
        if rebuilt:
            self.rebuilds += 1

    def note_misplaced(self, example: bytes | None) -> None:
        """Warn (once per replica) that its changelog holds records of other partitions."""
        if self.misplaced_logged:
            return
        self.misplaced_logged = True
        table = self.table
        log.warning(
            "table %r: changelog %s[%d] holds records whose keys the table's partitioner "
            "(%s) puts in other partitions, e.g. key %r; they are kept and found by asking "
            "every partition when a key is missing from its own (slower). Register the table "
            "with the producer's partitioner (sparkiq table create --partitioner auto) to "
            "avoid that",
            table.name,
            self.tp[0],
            self.tp[1],
            table.partitioner.value,
            example,
        )

    def advance(self, position: int) -> None:
        """The store now holds the changelog up to *position* (exclusive)."""
        self.position = position
        if position > self.end:
            self.end = position

    def reach_tail(self, offset: int) -> None:
        """The consumer reports the end of what it can read at *offset*, where the replica
        now is: nothing is left to apply, so that is the end (below the high watermark while
        a transaction is open: a read_committed consumer reads up to the last stable offset)."""
        self.tail = offset
        self.end = max(offset, self.position)

    def raise_end(self, high_watermark: int) -> None:
        """Raise the end to a partition's *high_watermark*, unless the replica is still
        where the consumer last reported the end: then the records between are those of
        open transactions (or arrive with the next fetch, which moves the replica on)."""
        if high_watermark > self.end and self.tail != self.position:
            self.end = high_watermark

    def reached_target(self) -> bool:
        """RESTORING with its position at the restore target (ACTIVE once its store is flushed)."""
        return (
            self.state is ReplicaState.RESTORING
            and self.target is not None
            and self.position >= self.target
        )

    def check_caught_up(self, now: float = 0.0) -> bool:
        """Moves RESTORING -> ACTIVE once the target is reached (at monotonic time *now*);
        True if it did.

        It serves reads at once: its store persists what it wrote without the WAL after that,
        in RocksDB's background (`settle`), so the restore's last flush is not part of the
        time to ACTIVE (it was 5-15% of a 1M-record restore, `benchmarks/bench_restore.py`).
        """
        if not self.reached_target():
            return False
        self.state = ReplicaState.ACTIVE
        self.active_since = now
        return True

    def settle(self, now: float = 0.0, *, restore_under_way: bool = False) -> bool:
        """Persist what the store wrote without the WAL once the replica is no longer
        RESTORING, the bulk in RocksDB's background; True while that is under way (call it
        again until False; writes skip the WAL until then, see `wal`).

        While other replicas restore (*restore_under_way*) it waits, up to `SETTLE_WITHIN_S`
        after turning ACTIVE: its flush would take the CPU their restore runs on (~0.1 us
        per record of a 1M-record restore whose partitions end a little apart).
        """
        if self.state in (ReplicaState.RESTORING, ReplicaState.FAILED) or not self.store.unflushed:
            return False
        if restore_under_way and now - self.active_since < SETTLE_WITHIN_S:
            return False
        if self.store.start_flush():
            return True
        self.store.flush()  # what was written since the background flush, and the checkpoint
        return False

    def status(self) -> PartitionStatus:
        return PartitionStatus(
            tp=self.tp,
            table=self.table.name,
            state=self.state,
            position=self.position,
            end=self.end,
            lag=max(self.end - self.position, 0),
            misplaced=self.store.misplaced_records,
            fault=None if self.fault is None else str(self.fault),
            disk_full=isinstance(self.fault, DiskFull),
            rebuilds=self.rebuilds,
            newest_record_ms=self.newest_record_ms,
        )
