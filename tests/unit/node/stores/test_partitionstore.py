"""A partition store: reads, writes, checkpoint, scans, storage faults, writes without the WAL."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkiq.core.errors import (
    DiskFull,
    StateDirLockedError,
    StateDirMismatchError,
    StorageFault,
    StoreError,
)
from sparkiq.core.queries import Order
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.http.staticview import DictStore
from sparkiq.node.stores.partitionstore import PartitionStore, storage_fault
from sparkiq.node.stores.registry import StoreRegistry
from tests.support.faults import corrupt_ssts

TABLE = TableDef(name="users", topic="users-changelog", partitions=3)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[StoreRegistry]:
    reg = StoreRegistry(tmp_path / "state")
    yield reg
    reg.close_all()


def _fill(store: PartitionStore, keys: list[bytes]) -> None:
    store.apply([(k, b"v:" + k) for k in keys], next_offset=len(keys))


def test_get_multi_get_and_tombstones(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    store.apply([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], next_offset=3)
    store.apply([(b"b", None), (b"a", b"1b"), (b"zz", None)], next_offset=6)

    assert store.get(b"a") == b"1b"
    assert store.get(b"b") is None
    assert store.get(b"zz") is None
    assert store.multi_get([b"c", b"b", b"a", b"nope"]) == [b"3", None, b"1b", None]
    assert store.multi_get([]) == []
    assert store.next_offset == 6


def test_later_record_in_one_batch_wins(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    store.apply([(b"k", b"1"), (b"k", None), (b"k", b"3"), (b"j", b"1"), (b"j", None)], 5)
    assert store.get(b"k") == b"3"
    assert store.get(b"j") is None


def test_empty_store_has_no_checkpoint(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 1)
    assert store.next_offset is None
    assert store.scan(limit=10) == []
    assert registry.on_disk() == {}


def test_reopening_keeps_a_bounded_number_of_info_logs(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    path = store.path
    for _ in range(8):  # a node restarted or the partition moved back, again and again
        registry.close(TABLE.name, 0)
        registry.open(TABLE, 0)
    registry.close(TABLE.name, 0)
    logs = [f.name for f in path.iterdir() if f.name.startswith("LOG")]
    assert "LOG" in logs
    assert len(logs) <= 3


def test_checkpoint_is_invisible_to_scans(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    store.apply([(b"next_offset", b"user-data"), (b"table", b"also-user-data")], next_offset=9)
    assert store.scan(limit=100) == [(b"next_offset", b"user-data"), (b"table", b"also-user-data")]
    assert store.next_offset == 9


@pytest.mark.parametrize(
    "change",
    [
        {"topic": "other-topic"},
        {"partitions": 6},
        {"key_format": Format.LONG},
        {"value_format": Format.STRING},
        {"kind": TableKind.WINDOWED, "window_size_ms": 60_000},
    ],
)
def test_mismatched_table_is_refused_with_the_fix(
    registry: StoreRegistry, change: dict[str, object]
) -> None:
    registry.open(TABLE, 0).apply([(b"a", b"1")], 1)
    registry.close(TABLE.name, 0)
    changed = dataclasses.replace(TABLE, **change)  # type: ignore[arg-type]

    with pytest.raises(StateDirMismatchError) as info:
        registry.open(changed, 0)
    message = str(info.value)
    assert str(registry.path_for("users", 0)) in message
    assert "delete it or pass another --state-dir" in message
    # The refused open left the store usable for its own table.
    assert registry.open(TABLE, 0).get(b"a") == b"1"


def test_description_change_is_compatible(registry: StoreRegistry) -> None:
    registry.open(TABLE, 0).apply([(b"a", b"1")], 1)
    registry.close(TABLE.name, 0)
    described = dataclasses.replace(TABLE, description="now documented")
    assert registry.open(described, 0).get(b"a") == b"1"


def test_partition_out_of_range(registry: StoreRegistry) -> None:
    with pytest.raises(StoreError, match=r"partitions 0\.\.2"):
        registry.open(TABLE, 3)


def test_second_process_handle_on_same_dir_is_refused(
    registry: StoreRegistry, tmp_path: Path
) -> None:
    registry.open(TABLE, 0)
    with pytest.raises(StateDirLockedError, match="another process holds its lock"):
        PartitionStore(registry.path_for("users", 0), TABLE, 0)


# -- storage faults ----------------------------------------------------------------------------


def _big_store(registry: StoreRegistry, partition: int = 0, keys: int = 60_000) -> list[bytes]:
    """A store with several SST files of many blocks, closed; its keys."""
    store = registry.open(TABLE, partition)
    names = [f"key-{i:07d}".encode() for i in range(keys)]
    for start in range(0, keys, 10_000):
        chunk = names[start : start + 10_000]
        store.apply([(k, k * 8) for k in chunk], next_offset=start + len(chunk))
        store.flush()
        store.write(store.new_batch(), start + len(chunk), wal=False)
        store.flush()
    registry.close(TABLE.name, partition)
    return names


def test_a_corrupt_block_fails_the_store_once_and_tells_the_listener(
    registry: StoreRegistry,
) -> None:
    names = _big_store(registry)
    assert corrupt_ssts(registry.path_for(TABLE.name, 0)) > 0
    heard: list[tuple[PartitionStore, StorageFault]] = []
    registry.on_fault = lambda store, fault: heard.append((store, fault))
    store = registry.open(TABLE, 0)
    messages = []
    for name in names:
        try:
            store.get(name)
        except StorageFault as exc:
            messages.append(str(exc))
    assert messages, "no read met the overwritten blocks"
    assert all("Corruption" in m and str(store.path) in m for m in messages), messages[:3]
    assert len(heard) == 1
    assert heard[0][0] is store
    assert store.failed is heard[0][1]
    with pytest.raises(StorageFault):
        store.scan(limit=len(names))
    with pytest.raises(StorageFault):  # nothing more is written to a failed store
        store.apply([(b"x", b"1")], next_offset=10**6)
    assert len(heard) == 1


def test_a_closed_store_read_is_a_fault_nobody_hears_of(registry: StoreRegistry) -> None:
    heard: list[object] = []
    registry.on_fault = lambda store, fault: heard.append(fault)
    store = registry.open(TABLE, 0)
    store.apply([(b"a", b"1")], next_offset=1)
    registry.close(TABLE.name, 0)
    with pytest.raises(StorageFault, match="closed meanwhile"):
        store.get(b"a")
    assert heard == []


def test_a_key_iterator_reads_keys_and_its_errors_are_the_store_s(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 0)
    store.apply([(b"b", b"2"), (b"a", b"1"), (b"c", None)], next_offset=1)
    with store.reading("sweeping"):
        it = store.key_iterator()
        it.seek(b"a")
        it.seek_for_prev(b"bz")
        assert it.key() == b"b"
        del it
    registry.close(TABLE.name, 0)
    with pytest.raises(StorageFault, match="closed meanwhile"), store.reading("sweeping"):
        store.key_iterator()


def _sst_files(store: PartitionStore, at_least: int) -> int:
    deadline = time.monotonic() + 10
    while len(list(store.path.glob("*.sst"))) < at_least and time.monotonic() < deadline:
        time.sleep(0.01)  # flushes run in RocksDB's background
    return len(list(store.path.glob("*.sst")))


def test_a_memtable_mostly_of_deletes_is_flushed(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    keys = [b"k%03d" % i for i in range(100)]
    store.apply([(k, b"v") for k in keys], next_offset=1)
    store.remove(keys[:30])
    assert not store.flush_deletes(at_least=10)  # 30 deletes, 70 keys left
    store.remove(keys[30:80])
    assert not store.flush_deletes(at_least=1_000)  # 80 deletes, too few
    store.apply((), next_offset=2, wal=False)
    assert not store.flush_deletes(at_least=10)  # a write without the WAL waits for `flush`
    store.flush()
    store.remove(keys[80:])
    assert store.flush_deletes(at_least=10)  # 20 deletes in the memtable, no key left
    assert _sst_files(store, 3) >= 3  # the `flush` above wrote two; the background one more
    assert store.scan(limit=10) == []


def test_no_space_left_is_a_disk_full_fault() -> None:
    path = Path("/state/t/0")
    full = storage_fault("writing to", path, OSError("IO error: No space left on device"))
    assert isinstance(full, DiskFull)
    other = storage_fault("reading", path, OSError("Corruption: block checksum mismatch"))
    assert type(other) is StorageFault
    assert "reading the store at /state/t/0 failed: Corruption" in str(other)


# -- writes without the write-ahead log ------------------------------------------------------

# Runs in a child process that dies without closing the store, as in a crash: RocksDB gets no
# chance to flush. Each step is "wal:<prefix>:<offset>" or "nowal:<prefix>:<offset>" (ten keys
# <prefix>0..<prefix>9 and that checkpoint, with or without the WAL), "flush", or "background"
# (`start_flush` until it is done, without the `flush` that would follow).
# SMALL_MEMTABLES makes RocksDB flush in the background every few batches.
_CRASHING_WRITER = """
import os, sys, time
from pathlib import Path
import sparkiq.node.stores.partitionstore as store_mod
from sparkiq.core.tables import TableDef

if os.environ.get("SMALL_MEMTABLES"):
    default_options = store_mod.store_options

    def small_memtables(table=None, memory=None):
        opts = default_options(table, memory)
        opts.set_write_buffer_size(64 * 1024)
        return opts

    store_mod.store_options = small_memtables
store = store_mod.PartitionStore(
    Path(sys.argv[1]), TableDef(name="users", topic="users-changelog", partitions=3), 0
)
for step in sys.argv[2:]:
    if step == "flush":
        store.flush()
        continue
    if step == "background":
        while store.start_flush():
            time.sleep(0.01)
        continue
    kind, prefix, offset = step.split(":")
    keys = [(f"{prefix}{i}".encode(), b"v" * 100) for i in range(10)]
    store.apply(keys, int(offset), wal=kind == "wal")
os._exit(0)
"""


def _crash_after(path: Path, steps: list[str], *, small_memtables: bool = False) -> None:
    env = dict(os.environ)
    if small_memtables:
        env["SMALL_MEMTABLES"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, str(path), *steps],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()


def _reopened(path: Path) -> tuple[int | None, set[bytes]]:
    store = PartitionStore(path, TABLE, 0)
    try:
        return store.next_offset, {k for k, _ in store.scan(limit=1_000_000)}
    finally:
        store.close()


def _keys_of(*prefixes: str) -> set[bytes]:
    return {f"{p}{i}".encode() for p in prefixes for i in range(10)}


@pytest.mark.parametrize(
    ("steps", "checkpoint", "prefixes"),
    [
        # Writes without the WAL die with the process: data and checkpoint together.
        (["wal:a:10", "nowal:b:20", "nowal:c:30"], 10, ["a"]),
        (["nowal:a:10", "nowal:b:20"], None, []),
        # A flush makes them durable, checkpoint included.
        (["nowal:a:10", "flush", "nowal:b:20"], 10, ["a"]),
        # So does a background flush, once done: data first, then the checkpoint.
        (["nowal:a:10", "background"], 10, ["a"]),
        (["nowal:a:10", "nowal:b:20", "background", "nowal:c:30"], 20, ["a", "b"]),
        # A write with the WAL first flushes the ones without, so none is lost below it.
        (["nowal:a:10", "nowal:b:20", "wal:c:30"], 30, ["a", "b", "c"]),
    ],
)
def test_a_crash_loses_unflushed_writes_with_their_checkpoint(
    tmp_path: Path, steps: list[str], checkpoint: int | None, prefixes: list[str]
) -> None:
    path = tmp_path / "users" / "0"
    _crash_after(path, steps)
    assert _reopened(path) == (checkpoint, _keys_of(*prefixes))


def test_background_flushes_keep_data_and_checkpoint_together(tmp_path: Path) -> None:
    # 64 KiB memtables and ~1.1 KiB batches: RocksDB flushes on its own many times, and the
    # crash comes at an arbitrary point after the last of those flushes.
    path = tmp_path / "users" / "0"
    batches = 600
    _crash_after(
        path, [f"nowal:b{n:03d}-:{(n + 1) * 10}" for n in range(batches)], small_memtables=True
    )
    checkpoint, keys = _reopened(path)
    assert checkpoint is not None, "expected background flushes to persist some batches"
    assert checkpoint < batches * 10, "expected the last batches to be lost in the crash"
    assert keys == _keys_of(*(f"b{n:03d}-" for n in range(checkpoint // 10)))


def test_close_persists_writes_without_the_wal(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 1)
    store.apply([(b"k", b"1")], next_offset=7, wal=False)
    assert store.unflushed
    registry.close(TABLE.name, 1)

    again = StoreRegistry(registry.state_dir)
    assert again.on_disk() == {("users", 1): 7}
    assert again.open(TABLE, 1).get(b"k") == b"1"
    again.close_all()


# -- scans ---------------------------------------------------------------------------------

KEYS = [b"a", b"ab", b"abc", b"ab\xff", b"ab\xff\x00", b"ac", b"b", b"\xff", b"\xff\xff\x01"]


@pytest.fixture
def filled(registry: StoreRegistry) -> PartitionStore:
    store = registry.open(TABLE, 0)
    _fill(store, KEYS)
    return store


def _keys(rows: list[tuple[bytes, bytes]]) -> list[bytes]:
    return [k for k, _ in rows]


def test_scan_everything_in_key_order(filled: PartitionStore) -> None:
    rows = filled.scan(limit=100)
    assert _keys(rows) == sorted(KEYS)
    assert all(v == b"v:" + k for k, v in rows)


def test_scan_bounds_are_inclusive(filled: PartitionStore) -> None:
    assert _keys(filled.scan(lo=b"ab", hi=b"ac", limit=100)) == [
        b"ab",
        b"abc",
        b"ab\xff",
        b"ab\xff\x00",
        b"ac",
    ]
    assert _keys(filled.scan(lo=b"aa", hi=b"aaz", limit=100)) == []
    assert _keys(filled.scan(lo=b"b", hi=b"b", limit=100)) == [b"b"]
    assert _keys(filled.scan(lo=b"c", hi=b"a", limit=100)) == []


def test_scan_prefix(filled: PartitionStore) -> None:
    assert _keys(filled.scan(prefix=b"ab", limit=100)) == [b"ab", b"abc", b"ab\xff", b"ab\xff\x00"]
    assert _keys(filled.scan(prefix=b"ab\xff", limit=100)) == [b"ab\xff", b"ab\xff\x00"]
    assert _keys(filled.scan(prefix=b"\xff", limit=100)) == [b"\xff", b"\xff\xff\x01"]
    assert _keys(filled.scan(prefix=b"\xff\xff", limit=100)) == [b"\xff\xff\x01"]
    assert _keys(filled.scan(prefix=b"zz", limit=100)) == []
    # prefix and bounds together
    assert _keys(filled.scan(prefix=b"a", lo=b"abc", hi=b"ab\xff\x00", limit=100)) == [
        b"abc",
        b"ab\xff",
        b"ab\xff\x00",
    ]


def test_scan_limit_and_cursor(filled: PartitionStore) -> None:
    assert filled.scan(limit=0) == []
    assert _keys(filled.scan(limit=2)) == [b"a", b"ab"]
    assert _keys(filled.scan(after=b"ab", limit=2)) == [b"abc", b"ab\xff"]
    # A cursor that is not a stored key still resumes after it.
    assert _keys(filled.scan(after=b"aa", limit=1)) == [b"ab"]
    # A cursor below lo is ignored; past hi gives nothing.
    assert _keys(filled.scan(lo=b"b", after=b"a", limit=2)) == [b"b", b"\xff"]
    assert _keys(filled.scan(hi=b"b", after=b"b", limit=5)) == []


@settings(max_examples=40, deadline=None)
@given(
    keys=st.sets(st.binary(min_size=1, max_size=4), max_size=60),
    page=st.integers(min_value=1, max_value=7),
    prefix=st.one_of(st.none(), st.binary(min_size=1, max_size=2)),
    lo=st.one_of(st.none(), st.binary(max_size=3)),
    hi=st.one_of(st.none(), st.binary(max_size=3)),
    order=st.sampled_from(Order),
)
def test_cursor_paging_covers_each_key_exactly_once(
    tmp_path_factory: pytest.TempPathFactory,
    keys: set[bytes],
    page: int,
    prefix: bytes | None,
    lo: bytes | None,
    hi: bytes | None,
    order: Order,
) -> None:
    reg = StoreRegistry(tmp_path_factory.mktemp("paging"))
    try:
        store = reg.open(TABLE, 0)
        _fill(store, sorted(keys))
        expected = sorted(
            (
                k
                for k in keys
                if (prefix is None or k.startswith(prefix))
                and (lo is None or k >= lo)
                and (hi is None or k <= hi)
            ),
            reverse=order is Order.DESC,
        )
        # The HTTP layer's test double scans the same way.
        double = DictStore((k, b"v:" + k) for k in keys)
        for scanned in (store, double):
            seen: list[bytes] = []
            cursor: bytes | None = None
            while True:
                rows = scanned.scan(
                    lo=lo, hi=hi, prefix=prefix, after=cursor, limit=page, order=order
                )
                seen.extend(_keys(rows))
                if len(rows) < page:
                    break
                cursor = rows[-1][0]
            assert seen == expected, scanned
    finally:
        reg.close_all()


def test_scan_descending(filled: PartitionStore) -> None:
    desc = Order.DESC
    assert _keys(filled.scan(limit=100, order=desc)) == sorted(KEYS, reverse=True)
    assert _keys(filled.scan(lo=b"ab", hi=b"ac", limit=3, order=desc)) == [
        b"ac",
        b"ab\xff\x00",
        b"ab\xff",
    ]
    assert _keys(filled.scan(prefix=b"ab", limit=100, order=desc)) == [
        b"ab\xff\x00",
        b"ab\xff",
        b"abc",
        b"ab",
    ]
    assert _keys(filled.scan(prefix=b"\xff", limit=100, order=desc)) == [b"\xff\xff\x01", b"\xff"]
    # The cursor is exclusive, whether a stored key or not; it wins over an equal hi.
    assert _keys(filled.scan(after=b"ab", limit=2, order=desc)) == [b"a"]
    assert _keys(filled.scan(after=b"abd", limit=2, order=desc)) == [b"abc", b"ab"]
    assert _keys(filled.scan(hi=b"b", after=b"b", limit=1, order=desc)) == [b"ac"]
    assert _keys(filled.scan(lo=b"b", after=b"b", limit=1, order=desc)) == []
