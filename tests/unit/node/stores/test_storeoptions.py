"""RocksDB options of a store: files of deletes are compacted away in stores of tables with a
window retention, and left to RocksDB's usual triggers elsewhere."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkiq.core.tables import TableDef, TableKind
from sparkiq.node.stores import storeoptions
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
