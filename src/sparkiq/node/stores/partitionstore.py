"""One partition store: a RocksDB database holding one changelog partition of one table.

A `PartitionStore` keeps a changelog partition's latest value per store key, plus the offset
checkpoint (`next_offset`, the next changelog offset to apply). Data and checkpoint are
written in one RocksDB write batch, so after a crash the store reflects the changelog prefix
its checkpoint names (see below for writes without the WAL) and a restart replays the tail.

Its column families::

    "default"                store key -> wire value
    "meta"                   b"next_offset" -> 8-byte big-endian offset
                             b"table" -> TableDef JSON it was written for

The checkpoint and table definition live in their own column family so no store key can
collide with them and scans never see them.

A write may skip RocksDB's write-ahead log (`write(..., wal=False)`, used while a partition is
restoring). Reads see it at once; it reaches disk only when the memtables are flushed, and
data and checkpoint are lost together if the process dies before that: the store then
reopens at the last checkpoint that was flushed (or written with the WAL) and the restore
replays the rest from Kafka. The checkpoint on disk is never ahead of the data on disk:

- background flushes (a full memtable) are atomic across both column families
  (`atomic_flush`), so they persist data and checkpoint together;
- an explicit flush (`flush`, `start_flush`) persists the data before the checkpoint; a
  crash between the two leaves data ahead of the checkpoint, which the replay from the
  checkpoint makes right again (every record sets its key's latest value);
- a write that uses the WAL first flushes any earlier writes that skipped it, so no write
  recovered from the WAL ever sits on top of lost ones;
- `flush_deletes` starts both flushes without waiting, in no set order, and only while no
  write skipped the WAL since the last flush: the WAL recovers whatever they missed;
- `close()` flushes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from pathlib import Path

from rocksdict import ColumnFamily, Rdict, RdictIter, WriteBatch

from sparkiq.core.errors import (
    CatalogError,
    DiskFull,
    StateDirLockedError,
    StorageFault,
    StoreError,
)
from sparkiq.core.queries import Order
from sparkiq.core.tables import TableDef
from sparkiq.node.stores.storemeta import META_CF, OFFSET_KEY, TABLE_KEY, compatible, mismatch
from sparkiq.node.stores.storeoptions import SharedMemory, store_options, write_options

log = logging.getLogger(__name__)

# Records found in this partition although the table's partitioner puts their keys in
# another one: kept with the checkpoint, so a restart that replays only the tail still knows.
_MISPLACED_KEY = b"misplaced"
_IMMUTABLE_MEMTABLES = "rocksdb.num-immutable-mem-table"  # full memtables not yet flushed
_MEMTABLE_DELETES = "rocksdb.num-deletes-active-mem-table"
_LIVE_KEYS = "rocksdb.estimate-num-keys"  # keys written minus twice the deletes, estimated

# Hears of a store whose files failed it (a read, write or flush raised a StorageFault).
FaultListener = Callable[["PartitionStore", StorageFault], None]


def storage_fault(what: str, path: Path, exc: BaseException) -> StorageFault:
    """The StorageFault (DiskFull for ENOSPC) for RocksDB's error `exc` on `what`."""
    text = str(exc)
    full = "No space left" in text or "ENOSPC" in text or "space limit" in text.lower()
    kind = DiskFull if full else StorageFault
    return kind(f"{what} the store at {path} failed: {text}")


class _Background(Enum):
    """How far `PartitionStore.start_flush` has got."""

    IDLE = "idle"
    DATA = "data"  # flushing the data column family
    CHECKPOINT = "checkpoint"  # the data is on disk; flushing the meta column family


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with *prefix* (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class PartitionStore:
    """One RocksDB directory holding one changelog partition of one table."""

    def __init__(
        self,
        path: Path,
        table: TableDef,
        partition: int,
        on_fault: FaultListener | None = None,
        memory: SharedMemory | None = None,
    ) -> None:
        """*memory*: the budget the node's stores share (None: RocksDB's defaults)."""
        if not 0 <= partition < table.partitions:
            raise StoreError(
                f"table {table.name!r} has partitions 0..{table.partitions - 1}, "
                f"not {partition}; check the table definition"
            )
        self.path = path
        self.table = table
        self.partition = partition
        # Set once a read, write or flush found the store's files failing; never cleared
        # (the restorer replaces a failed store with a rebuilt one).
        self.failed: StorageFault | None = None
        self._on_fault = on_fault
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._db = Rdict(
                str(path),
                store_options(table, memory),
                column_families={META_CF: store_options(None, memory)},
            )
        except Exception as exc:
            if "LOCK" in str(exc):  # RocksDB names its lock file in the message
                # The state dir's own lock (StoreRegistry.lock) keeps other nodes out, so this
                # is another process that opened the store directly.
                raise StateDirLockedError(
                    f"cannot open the store at {path}: another process holds its lock ({exc})"
                ) from exc
            raise storage_fault("opening", path, exc) from exc
        # Both the column family handle and the column family view keep the database (and
        # its LOCK file) alive until dropped, so `_release` drops them explicitly.
        self._meta_cf: ColumnFamily | None = self._db.get_column_family_handle(META_CF)
        self._meta = self._db.get_column_family(META_CF)
        try:
            self._check_table(path, table)
            raw = self._meta.get(OFFSET_KEY)
            raw_misplaced = self._meta.get(_MISPLACED_KEY)
        except BaseException:
            self._release()
            raise
        self._next_offset: int | None = int.from_bytes(raw, "big") if raw is not None else None
        self._misplaced = int.from_bytes(raw_misplaced, "big") if raw_misplaced else 0
        self._wo = write_options(wal=True)
        self._wo_no_wal = write_options(wal=False)
        self._unflushed = False  # written without the WAL since the last flush
        self._writes = 0
        self._background = _Background.IDLE  # of `start_flush`, since the last flush
        self._writes_at_start = 0  # `_writes` when `start_flush` began
        self._closed = False

    def _check_table(self, path: Path, table: TableDef) -> None:
        raw = self._meta.get(TABLE_KEY)
        if raw is not None:
            try:
                written: TableDef | str = TableDef.from_json(raw)
            except CatalogError:
                written = "an unreadable table definition"
            if not isinstance(written, TableDef) or not compatible(written, table):
                raise mismatch(path, written, table)
            if written == table:
                return
        # New store, or a compatible definition whose free-text fields changed.
        self._meta.put(TABLE_KEY, table.to_json())

    # -- reads ------------------------------------------------------------------------------

    def get(self, store_key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._db.get(store_key)
        except Exception as exc:
            raise self._fault("reading", exc) from exc
        return value

    def multi_get(self, store_keys: Sequence[bytes]) -> list[bytes | None]:
        if not store_keys:
            return []
        try:
            values = self._db.get(list(store_keys))
        except Exception as exc:
            raise self._fault("reading", exc) from exc
        return values if values is not None else [None] * len(store_keys)

    def _fault(self, what: str, exc: BaseException) -> StorageFault:
        """Mark the store failed (once) and tell the listener; the fault to raise.

        A store closed under a reader (its partition moved away) is not a fault of its
        files: that raises a StorageFault too, so the reader goes elsewhere, but nobody is
        told.
        """
        if self._closed:
            return StorageFault(f"{what} the store at {self.path}: it was closed meanwhile")
        fault = storage_fault(what, self.path, exc)
        if self.failed is None:
            self.failed = fault
            listener = self._on_fault
            if listener is not None:
                try:
                    listener(self, fault)
                except Exception:
                    log.exception("the storage fault listener failed")
        return fault

    def scan(
        self,
        *,
        lo: bytes | None = None,
        hi: bytes | None = None,
        prefix: bytes | None = None,
        after: bytes | None = None,
        limit: int,
        order: Order = Order.ASC,
    ) -> list[tuple[bytes, bytes]]:
        """Up to *limit* (key, value) pairs in store-key order (*order* DESC: reversed).

        Keys are >= *lo* and <= *hi* (both inclusive), start with *prefix*, and come strictly
        after the cursor *after* (the last key of the previous page) in that order.
        """
        if limit <= 0:
            return []
        if order is Order.DESC:
            return self._scan_desc(lo, hi, prefix, after, limit)
        start = lo or b""
        if prefix is not None and prefix > start:
            start = prefix
        skip_equal: bytes | None = None
        if after is not None and after >= start:
            # The cursor itself was already returned: seek to it and step over it.
            start = after
            skip_equal = after
        stop_before = _prefix_end(prefix) if prefix else None
        out: list[tuple[bytes, bytes]] = []
        try:
            it = self._db.iter()
            it.seek(start)
            while it.valid():
                key: bytes = it.key()
                if hi is not None and key > hi:
                    break
                if stop_before is not None and key >= stop_before:
                    break
                if key != skip_equal:
                    out.append((key, it.value()))
                    if len(out) >= limit:
                        break
                it.next()
            # An iterator that stops on a corrupt block is merely not valid any more; its
            # status says why.
            it.status()
        except Exception as exc:
            raise self._fault("scanning", exc) from exc
        return out

    def _scan_desc(
        self,
        lo: bytes | None,
        hi: bytes | None,
        prefix: bytes | None,
        before: bytes | None,
        limit: int,
    ) -> list[tuple[bytes, bytes]]:
        """`scan` from the top down: keys below the cursor *before*."""
        # The upper bounds: `hi` is inclusive, the prefix's end and the cursor are not. The
        # seek lands on the last key <= the lowest of them; only an exclusive one can equal it.
        exclusive = [b for b in (_prefix_end(prefix) if prefix else None, before) if b is not None]
        bounds = ([hi] if hi is not None else []) + exclusive
        top = min(bounds) if bounds else None
        skip_equal = min(exclusive) if exclusive else None
        floor = max(b for b in (lo, prefix) if b is not None) if (lo or prefix) else None
        out: list[tuple[bytes, bytes]] = []
        try:
            it = self._db.iter()
            if top is None:
                it.seek_to_last()
            else:
                it.seek_for_prev(top)
            while it.valid():
                key: bytes = it.key()
                if floor is not None and key < floor:
                    break
                if key != skip_equal:
                    out.append((key, it.value()))
                    if len(out) >= limit:
                        break
                it.prev()
            it.status()
        except Exception as exc:
            raise self._fault("scanning", exc) from exc
        return out

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Turns RocksDB's errors in the block into this store's StorageFault, as its own
        reads do (a closed store's too); for users of `key_iterator`."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            raise self._fault(what, exc) from exc

    def key_iterator(self) -> RdictIter:
        """A raw RocksDB iterator over the store keys, for a sweep that seeks as it goes
        (`sparkiq.node.restore.expiry`); it reads a value only when asked. Use it within
        `reading(...)` and drop it soon: it pins the memtables and files it started on."""
        return self._db.iter()

    # -- writes -----------------------------------------------------------------------------

    def apply(
        self,
        records: Sequence[tuple[bytes, bytes | None]],
        next_offset: int,
        *,
        wal: bool = True,
    ) -> None:
        """Write store keys -> wire values (None deletes) and the checkpoint, atomically."""
        batch = self.new_batch()
        for key, value in records:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self.write(batch, next_offset, wal=wal)

    def remove(self, store_keys: Sequence[bytes]) -> None:
        """Delete keys outside the changelog's order (expired windows): the checkpoint is
        left alone, so this may run beside the thread that applies the changelog."""
        batch = WriteBatch(raw_mode=True)
        for key in store_keys:
            batch.delete(key)
        try:
            self._db.write(batch, self._wo)
        except Exception as exc:
            raise self._fault("deleting from", exc) from exc

    def new_batch(self) -> WriteBatch:
        """An empty batch for `write`; the restorer fills it record by record, which saves
        building a list of pairs first on its hot path."""
        return WriteBatch(raw_mode=True)

    def write(
        self, batch: WriteBatch, next_offset: int, *, wal: bool = True, misplaced: int = 0
    ) -> None:
        """Write a batch from `new_batch` together with the checkpoint, atomically.

        With *wal* False the write skips the write-ahead log: it is durable only after the
        next `flush` (see the module docstring). *misplaced* records of the batch are added
        to the store's count of them (`misplaced_records`) in the same write.
        """
        if self._meta_cf is None:
            raise StoreError(f"the store at {self.path} is closed; open it again from the registry")
        if wal:
            self.flush()
        batch.put(OFFSET_KEY, next_offset.to_bytes(8, "big"), self._meta_cf)
        if misplaced:
            total = self._misplaced + misplaced
            batch.put(_MISPLACED_KEY, total.to_bytes(8, "big"), self._meta_cf)
        if self.failed is not None:
            raise self.failed
        try:
            self._db.write(batch, self._wo if wal else self._wo_no_wal)
        except Exception as exc:
            raise self._fault("writing to", exc) from exc
        if not wal:
            self._unflushed = True
        self._writes += 1
        self._next_offset = next_offset
        if misplaced:
            self._misplaced = total

    def start_flush(self) -> bool:
        """Persist writes that skipped the write-ahead log in RocksDB's background, the data
        first, then the checkpoint; True while that is under way.

        Call it until it returns False, then `flush`, which is left with only what was
        written meanwhile (nothing, if nothing was): the caller is not blocked by the bulk.
        """
        if not self._unflushed or self._meta_cf is None:
            return False
        try:
            if self._background is _Background.IDLE:
                self._background = _Background.DATA
                self._writes_at_start = self._writes
                self._db.flush(False)
            if self._background is _Background.DATA:
                if self._db.property_int_value(_IMMUTABLE_MEMTABLES):
                    return True
                if self._writes != self._writes_at_start:
                    return False  # data written meanwhile is not on disk: `flush` goes in order
                self._background = _Background.CHECKPOINT
                self._meta.flush(False)
            return bool(self._meta.property_int_value(_IMMUTABLE_MEMTABLES))
        except Exception:
            return False  # `flush` reports the failure

    def flush(self) -> None:
        """Persist writes that skipped the write-ahead log (no-op if there are none)."""
        if not self._unflushed:
            return
        if self._meta_cf is None:
            raise StoreError(f"the store at {self.path} is closed; open it again from the registry")
        try:
            # RocksDB flushes one column family per call (background flushes are atomic
            # across both): the data first, so the checkpoint on disk never gets ahead of it.
            self._db.flush(True)
            self._meta.flush(True)
            self._background = _Background.IDLE
        except Exception as exc:
            raise self._fault("flushing", exc) from exc
        self._unflushed = False

    def flush_deletes(self, at_least: int) -> bool:
        """Start flushing the memtables in RocksDB's background if the active one holds at
        least *at_least* deletes, and no fewer than the keys the store holds; True if it did.

        RocksDB flushes a memtable only once it is full (64 MB). One that removals (expired
        windows) fill with deletes would stay in memory, its write-ahead log on disk, and
        every iterator would step over the deleted keys. Once flushed, the files of mostly
        deletes are compacted away (`sparkiq.node.stores.storeoptions`). Only when every write went
        through the write-ahead log: then it does not matter which column family reaches
        disk first (see the module docstring); otherwise `flush` and `start_flush` do it.
        """
        if self._unflushed or self._meta_cf is None:
            return False
        try:
            if self._db.property_int_value(_IMMUTABLE_MEMTABLES):
                return False  # a flush is under way (another would wait for it)
            deletes = self._db.property_int_value(_MEMTABLE_DELETES) or 0
            if deletes < at_least or deletes < (self._db.property_int_value(_LIVE_KEYS) or 0):
                return False
            self._db.flush(False)
            self._meta.flush(False)
        except Exception as exc:
            raise self._fault("flushing", exc) from exc
        return True

    @property
    def unflushed(self) -> bool:
        """Whether writes that skipped the write-ahead log are not yet on disk."""
        return self._unflushed

    @property
    def next_offset(self) -> int | None:
        """The next changelog offset to apply (None: nothing applied yet)."""
        return self._next_offset

    @property
    def misplaced_records(self) -> int:
        """Records applied here whose keys the table's partitioner puts in another partition."""
        return self._misplaced

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(Exception):
            self.flush()
        self._closed = True
        with contextlib.suppress(Exception):
            self._db.flush_wal(True)
        self._release()

    def _release(self) -> None:
        self._meta_cf = None
        # A store whose disk failed may fail to close too; its handles are dropped all the
        # same, which is what makes RocksDB let go of its LOCK (so it can be opened again).
        with contextlib.suppress(Exception):
            self._meta.close()
        with contextlib.suppress(Exception):
            self._db.close()
        del self._meta, self._db  # reads after this raise, and are told it was closed

    def __repr__(self) -> str:
        return (
            f"PartitionStore({self.table.name!r}, partition={self.partition}, "
            f"next_offset={self._next_offset})"
        )
