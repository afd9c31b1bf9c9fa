"""Local state: a node's state dir and the partition stores in it (`StoreRegistry`).

Layout of a node's state dir::

    <state_dir>/<table name>/<partition>/      one RocksDB database (`PartitionStore`)
    <state_dir>/.lock                          held by the one node that uses the dir
    <state_dir>/.quarantine/                   failed stores, the newest per partition
    <state_dir>/.trash/                        store dirs being deleted (`discard`)

A store's own format (column families, checkpoint, writes without the WAL) is described in
`sparkiq.node.stores.partitionstore`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
import time
from pathlib import Path

from sparkiq.core.errors import StateDirLockedError, StorageFault, StoreError
from sparkiq.core.tables import TableDef
from sparkiq.node.stores.partitionstore import FaultListener, PartitionStore
from sparkiq.node.stores.storemeta import compatible, mismatch, read_store_meta
from sparkiq.node.stores.storeoptions import SharedMemory

LOCK_FILE = ".lock"  # in the state dir: held by the one node that uses it
QUARANTINE_DIR = ".quarantine"  # in the state dir: failed stores, the newest per partition
TRASH_DIR = ".trash"  # in the state dir: store dirs moved out of the way to be deleted


class StoreRegistry:
    """A node's state dir: opens, caches and closes its partition stores.

    `lock()` makes the state dir this process's alone (another node started on it fails at
    once); `on_fault` hears of every store whose files fail it; `quarantine` moves a failed
    store's directory aside so the partition can be rebuilt in its place; `discard` deletes
    the directory of a store that is not open (`sparkiq.node.stores.cleanup` decides when).
    *memory*: the budget all its stores share (None: RocksDB's defaults, per store).
    """

    def __init__(self, state_dir: Path | str, memory: SharedMemory | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.memory = memory
        self._open: dict[tuple[str, int], PartitionStore] = {}
        # (table name, partition) -> time.time() its store was last closed, while it is not open.
        self._closed_at: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self.on_fault: FaultListener | None = None

    def lock(self) -> None:
        """Hold the state dir's lock until `unlock` (or the process ends).

        StateDirLockedError if another process holds it: two nodes must never share one
        state dir.
        """
        if self._lock_fd is not None:
            return
        path = self.state_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateDirLockedError(
                f"another node is using the state dir {self.state_dir} (it holds {path}); "
                "stop it or pass another --state-dir"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the lock

    def path_for(self, table_name: str, partition: int) -> Path:
        return self.state_dir / table_name / str(partition)

    def open(self, table: TableDef, partition: int) -> PartitionStore:
        """The store of (table, partition), opened once and shared until closed."""
        key = (table.name, partition)
        with self._lock:
            store = self._open.get(key)
            if store is not None:
                if not compatible(store.table, table):
                    raise mismatch(store.path, store.table, table)
                return store
            store = PartitionStore(
                self.path_for(table.name, partition), table, partition, self._fault, self.memory
            )
            self._open[key] = store
            self._closed_at.pop(key, None)
            return store

    def _fault(self, store: PartitionStore, fault: StorageFault) -> None:
        listener = self.on_fault
        if listener is not None:
            listener(store, fault)

    def quarantine(self, table_name: str, partition: int) -> Path | None:
        """Move the (closed) store directory of (table, partition) aside; its new path.

        It goes to `<state dir>/.quarantine/<table>.<partition>.<ms>`, for inspection; older
        copies of the same partition are removed, so failures do not fill the disk. None
        when there was no directory.
        """
        with self._lock:
            if (table_name, partition) in self._open:
                raise StoreError(f"the store of {table_name}[{partition}] is open; close it first")
        source = self.path_for(table_name, partition)
        if not source.exists():
            return None
        aside = self.state_dir / QUARANTINE_DIR
        aside.mkdir(exist_ok=True)
        stem = f"{table_name}.{partition}."
        for old in aside.iterdir():
            if old.name.startswith(stem) and old.name[len(stem) :].isdigit():
                shutil.rmtree(old, ignore_errors=True)
        target = aside / f"{stem}{int(time.time() * 1000)}"
        try:
            source.rename(target)
        except OSError:
            # Not even a rename works here: drop the directory instead.
            shutil.rmtree(source, ignore_errors=True)
            return None
        return target

    def get(self, table_name: str, partition: int) -> PartitionStore | None:
        """The store of (table, partition) if it is open."""
        with self._lock:
            return self._open.get((table_name, partition))

    def close(self, table_name: str, partition: int) -> None:
        """Close a store and leave it on disk (a later open resumes from its checkpoint)."""
        with self._lock:
            store = self._open.pop((table_name, partition), None)
            if store is not None:
                self._closed_at[(table_name, partition)] = time.time()
        if store is not None:
            store.close()

    def close_all(self) -> None:
        with self._lock:
            stores, self._open = list(self._open.values()), {}
        for store in stores:
            store.close()

    def open_count(self) -> int:
        """Stores open now."""
        return len(self._open)

    def closed_stores(self) -> dict[tuple[str, int], tuple[Path, float | None]]:
        """(table name, partition) -> (directory, when this registry closed it, or None if it
        never opened it) of every store directory in the state dir that is not open."""
        with self._lock:
            open_now = set(self._open)
            closed_at = dict(self._closed_at)
        found: dict[tuple[str, int], tuple[Path, float | None]] = {}
        for key, path in self._store_dirs():
            if key not in open_now:
                found[key] = (path, closed_at.get(key))
        return found

    def quarantined(self) -> list[tuple[Path, str, int, float]]:
        """(directory, table name, partition, when it was moved aside) of each quarantined
        store."""
        aside = self.state_dir / QUARANTINE_DIR
        out: list[tuple[Path, str, int, float]] = []
        if not aside.is_dir():
            return out
        for path in sorted(aside.iterdir()):
            table, _, rest = path.name.rpartition(".")
            table, _, partition = table.rpartition(".")
            if table and partition.isdigit() and rest.isdigit():
                out.append((path, table, int(partition), int(rest) / 1000))
        return out

    def discard(self, table_name: str, partition: int) -> bool:
        """Delete the directory of the store of (table, partition) unless it is open; whether
        it did. An `open` meanwhile waits for the directory to be out of the way (a rename
        under the lock) and starts an empty store."""
        with self._lock:
            if (table_name, partition) in self._open:
                return False
            source = self.path_for(table_name, partition)
            trash = self.state_dir / TRASH_DIR
            trash.mkdir(exist_ok=True)
            target = trash / f"{table_name}.{partition}.{time.time_ns()}"
            try:
                source.rename(target)
            except FileNotFoundError:
                return False
            self._closed_at.pop((table_name, partition), None)
        shutil.rmtree(target, ignore_errors=True)
        return True

    def empty_trash(self) -> None:
        """Delete what a discard left in the trash (the process died while deleting)."""
        trash = self.state_dir / TRASH_DIR
        if trash.is_dir():
            for path in trash.iterdir():
                shutil.rmtree(path, ignore_errors=True)

    def _store_dirs(self) -> list[tuple[tuple[str, int], Path]]:
        """((table name, partition), directory) of every store directory in the state dir."""
        out: list[tuple[tuple[str, int], Path]] = []
        if not self.state_dir.is_dir():
            return out
        for table_dir in sorted(self.state_dir.iterdir()):
            if not table_dir.is_dir() or table_dir.name in (QUARANTINE_DIR, TRASH_DIR):
                continue
            for part_dir in sorted(table_dir.iterdir()):
                if part_dir.is_dir() and part_dir.name.isdigit():
                    out.append(((table_dir.name, int(part_dir.name)), part_dir))
        return out

    def on_disk(self) -> dict[tuple[str, int], int]:
        """(table name, partition) -> next_offset of every store in the state dir."""
        return {key: offset for key, (_, offset) in self.on_disk_tables().items()}

    def on_disk_tables(self) -> dict[tuple[str, int], tuple[TableDef, int]]:
        """Like `on_disk`, with the table definition each store was written for."""
        with self._lock:
            open_now = dict(self._open)
        found: dict[tuple[str, int], tuple[TableDef, int]] = {}
        for key, part_dir in self._store_dirs():
            store = open_now.get(key)
            table: TableDef | None
            if store is not None:
                table, offset = store.table, store.next_offset
            else:
                table, offset = read_store_meta(part_dir)
            if table is not None and offset is not None:
                found[key] = (table, offset)
        return found
