"""RocksDB options of a store: files of deletes are compacted away in stores of tables with a
window retention, and left to RocksDB's usual triggers elsewhere; a store keeps at most its
share of files open; stores sharing memory stay within its budget."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import Options

from sparkiq.core.tables import TableDef, TableKind
from sparkiq.node.stores import partitionstore, storeoptions
from sparkiq.node.stores.partitionstore import PartitionStore
from sparkiq.node.stores.registry import StoreRegistry

RETAINED = TableDef(
    "sales", "sales-changelog", 1, kind=TableKind.WINDOWED, window_size_ms=60_000, retention_ms=1
)
PLAIN = TableDef("users", "users-changelog", 1)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[StoreRegistry]:
    reg = StoreRegistry(tmp_path)
    yield reg
    reg.close_all()


def files(store: PartitionStore) -> int:
    return len(list(store.path.glob("*.sst")))


def put_flush_delete_flush(store: PartitionStore) -> None:
    """One data file of 2,000 values, one of their 2,000 deletes (and the meta's two)."""
    keys = [b"k%05d" % i for i in range(2_000)]
    store.apply([(k, b"v" * 50) for k in keys], 1, wal=False)
    store.flush()
    store.remove(keys)
    store.apply((), 2, wal=False)
    store.flush()


def test_a_file_of_deletes_is_compacted_away_in_a_retained_table(
    registry: StoreRegistry,
) -> None:
    retained, plain = registry.open(RETAINED, 0), registry.open(PLAIN, 0)
    put_flush_delete_flush(retained)
    put_flush_delete_flush(plain)
    deadline = time.monotonic() + 10
    while files(retained) > 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    # The values and their deletes dropped each other; only the meta's files are left.
    assert files(retained) == 2
    assert retained.scan(limit=10) == []
    assert files(plain) == 4  # two data files are below RocksDB's own trigger (four)


def test_info_logs_and_the_manifest_are_rolled_at_their_size(
    registry: StoreRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every flush adds to both; a store that expires windows flushes every few seconds.
    monkeypatch.setattr(storeoptions, "_INFO_LOG_BYTES", 10_000)
    monkeypatch.setattr(storeoptions, "_MANIFEST_BYTES", 10_000)
    store = registry.open(PLAIN, 0)
    for i in range(150):
        store.apply([(b"k%d" % i, b"v")], i + 1, wal=False)
        store.flush()
    logs = [f.stat().st_size for f in store.path.glob("LOG*")]
    manifests = [f.stat().st_size for f in store.path.glob("MANIFEST-*")]
    # Each flush adds ~10 KB to the log (1.4 MB here without rolling it), ~0.4 KB to the
    # MANIFEST (57 KB); each new log starts with ~30 KB of options.
    assert len(logs) <= 3, logs  # the current one and two old ones
    assert max(logs) < 100_000, logs
    assert len(manifests) == 1, manifests
    assert manifests[0] < 30_000, manifests


def _open_files_in(path: Path) -> int:
    """Descriptors of this process open on files in the store directory *path* (or on it)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == str(path) or target.startswith(f"{path}/"):
            count += 1
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
@pytest.mark.parametrize("bounded", [True, False])
def test_a_store_keeps_at_most_its_share_of_files_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounded: bool
) -> None:
    default_options = storeoptions.store_options

    def many_small_files(
        table: TableDef | None = None, memory: storeoptions.SharedMemory | None = None
    ) -> Options:
        opts = default_options(table, memory)
        opts.set_write_buffer_size(128 * 1024)  # small memtables and table files: dozens
        opts.set_target_file_size_base(64 * 1024)
        if not bounded:
            opts.set_max_open_files(-1)  # RocksDB's default: every table file stays open
        return opts

    monkeypatch.setattr(partitionstore, "store_options", many_small_files)
    registry = StoreRegistry(tmp_path, storeoptions.SharedMemory(8 << 20))
    store = registry.open(PLAIN, 0)
    keys = [b"k%06d" % i for i in range(30_000)]
    for start in range(0, len(keys), 1_000):
        batch = keys[start : start + 1_000]
        store.apply([(k, b"v" * 200) for k in batch], start + 1_000, wal=False)
    store.flush()
    time.sleep(0.5)  # let compactions settle
    assert store.multi_get(keys[::50]) == [b"v" * 200] * len(keys[::50])  # touches every file
    tables = len(list(store.path.glob("*.sst")))
    held = _open_files_in(store.path)
    registry.close_all()
    assert tables > 2 * storeoptions.TABLE_FILES  # enough files to see the bound at work
    if bounded:
        assert held <= storeoptions.FILES_PER_STORE, (held, tables)
    else:
        assert held > tables, (held, tables)


def test_stores_sharing_memory_stay_within_its_budget(tmp_path: Path) -> None:
    budget = 4 << 20
    memory = storeoptions.SharedMemory(budget)
    registry = StoreRegistry(tmp_path, memory)
    stores = [registry.open(TableDef("t", "t-changelog", 8), p) for p in range(8)]
    value = b"v" * 100
    for n in range(20):
        for store in stores:
            store.apply([(b"k%d-%05d" % (n, i), value) for i in range(1_000)], n + 1)
    # 16 MB of data in memtables that would each take up to 64 MB: the memtables are flushed
    # once they pass half the budget, and the cache holds what is charged to it.
    assert memory.memtable_usage() <= budget
    assert memory.usage() <= budget * 1.25, memory.usage()  # RocksDB's cache is not strict
    assert all(s.get(b"k19-00999") == value for s in stores)
    registry.close_all()


def test_a_store_with_a_few_records_holds_little_of_the_budget(tmp_path: Path) -> None:
    memory = storeoptions.SharedMemory(256 << 20)
    registry = StoreRegistry(tmp_path, memory)
    table = TableDef("t", "t-changelog", 200)
    for p in range(200):
        registry.open(table, p).apply([(b"k", b"v" * 100)], 1)
    # A memtable per column family, in small blocks: 20 KiB a store, not RocksDB's 2 MiB (200
    # such stores would take 400 MB, past the memtables' share of the budget, and every
    # write would flush).
    assert memory.memtable_usage() <= 200 * 32 * 1024, memory.memtable_usage()
    registry.close_all()
