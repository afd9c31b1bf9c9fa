"""RocksDB options of a partition store (`sparkiq.node.stores.partitionstore`): its database, its
column families and its writes; the memory all stores of a node share (`SharedMemory`) and the
files each keeps open (`FILES_PER_STORE`).

A node holds one RocksDB per partition, hundreds of them. Left to its defaults, each has its
own block cache (32 MB), memtables of up to 64 MB per column family and every table file
open, so memory and descriptors grow with the number of stores and their data. Here every
store of a node charges its memtables and cached blocks (index and filter blocks included)
to one LRU cache (`SharedMemory`, `--store-memory-mb`), and keeps at most `TABLE_FILES`
table files open.
"""

from __future__ import annotations

from rocksdict import (
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    WriteBufferManager,
    WriteOptions,
)

from sparkiq.core.tables import TableDef

_KEEP_INFO_LOGS = 3  # RocksDB's info logs kept per store: the current one and two old ones
_INFO_LOG_BYTES = 1 << 20  # an info log is rolled at this size
_MANIFEST_BYTES = 4 << 20  # the MANIFEST (a record per flush and compaction) is rolled at this size
# A data file is compacted soon after it is written when, within any run of this many
# entries, at least this many are deletes (or when deletes are this share of all its
# entries): the files that window retention fills with deletes (see `store_options`).
_DELETES_WINDOW, _DELETES_IN_WINDOW, _DELETES_RATIO = 1_000, 500, 0.5

# Table (.sst) files a store keeps open at once; one it needs beyond them is opened for the
# read and closed (RocksDB's table cache). RocksDB sets 10 of `max_open_files` aside for its
# other files and takes no value below 20.
TABLE_FILES = 10
_MAX_OPEN_FILES = TABLE_FILES + 10
# Descriptors one open store may hold: its table files and the rest, measured on Linux (the
# directory, LOCK, the info LOG, the MANIFEST, the write-ahead log and the next one while a
# memtable is switched, a table file being written by a flush or a compaction and the one
# being read to it); tests/unit/node/stores/test_storeoptions.py holds a store to it.
FILES_PER_STORE = TABLE_FILES + 8
# The share of the memory budget the memtables may take before RocksDB flushes the largest.
_WRITE_BUFFER_SHARE = 0.5
# A memtable takes memory in blocks of this size, the meta column family's (a checkpoint,
# always written) in smaller ones, and every store that took a write holds one of each
# against the budget. With RocksDB's default, 1 MiB, 8 stores of a few KB each held 16 MiB,
# and were flushed at every write past that; with 64 KiB blocks 1,000 stores held 128
# MB, the memtables' whole share of 256 MB, and took 24k writes/s in bench_stores.py where
# 16 KiB blocks took 74k (91k without the budget).
_ARENA_BLOCK_BYTES = 16 << 10
_META_ARENA_BLOCK_BYTES = 4 << 10  # RocksDB's smallest


class SharedMemory:
    """One block cache and one write-buffer manager shared by all stores of a node.

    Memtables are charged to the cache (RocksDB's `WriteBufferManager` with a cache), so
    cached blocks and memtables together stay near `budget_bytes`; once memtables pass half
    of it, RocksDB flushes the largest one. Reads of blocks past the budget evict others.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.cache = Cache(budget_bytes)
        self.write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            int(budget_bytes * _WRITE_BUFFER_SHARE), False, self.cache
        )

    def usage(self) -> int:
        """Bytes charged to the budget now (cached blocks and memtables)."""
        return self.cache.get_usage()

    def memtable_usage(self) -> int:
        """Bytes of memtables of all stores now."""
        return self.write_buffers.get_usage()


def store_options(table: TableDef | None = None, memory: SharedMemory | None = None) -> Options:
    """Options of a store's database and of its data column family (*table*: the table it
    holds), or, without a table, of its meta column family; with *memory*, its memtables and
    blocks are charged to that budget (without: RocksDB's defaults, a cache per store)."""
    opts = Options(raw_mode=True)
    opts.set_max_open_files(_MAX_OPEN_FILES)
    # One shard for the table cache: split in RocksDB's 64 shards, 10 files gave each less
    # than one, and 42 of a store's 50 table files stayed open.
    opts.set_table_cache_num_shard_bits(0)
    if memory is not None:
        tables = BlockBasedOptions()
        tables.set_block_cache(memory.cache)
        # Index and filter blocks count against the budget too (by default each table file
        # open holds its own, outside any cache); those of level 0, read on every lookup,
        # stay pinned.
        tables.set_cache_index_and_filter_blocks(True)
        tables.set_pin_l0_filter_and_index_blocks_in_cache(True)
        opts.set_block_based_table_factory(tables)
        opts.set_write_buffer_manager(memory.write_buffers)
        opts.set_arena_block_size(_ARENA_BLOCK_BYTES if table else _META_ARENA_BLOCK_BYTES)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    # A node holds many small stores on a 2-core box: keep RocksDB's own threads modest.
    opts.set_max_background_jobs(2)
    # Writes that skip the WAL are only as consistent as the flushes that persist them.
    opts.set_atomic_flush(True)
    # LZ4 rather than the default Snappy: a restore flushes its whole store before the
    # partition turns ACTIVE, and LZ4 took ~0.1 us/record less CPU in those flushes (files
    # written with Snappy stay readable).
    opts.set_compression_type(DBCompressionType.lz4())
    # RocksDB starts a new info LOG at every open and keeps up to 1000 old ones by default:
    # a store reopened at each restart or move would collect them without end. Nor is one
    # log bounded: each flush adds ~10 KB to it and ~0.4 KB to the MANIFEST, and a store
    # that expires windows flushes every few seconds (`PartitionStore.flush_deletes`).
    opts.set_keep_log_file_num(_KEEP_INFO_LOGS)
    opts.set_max_log_file_size(_INFO_LOG_BYTES)
    opts.set_max_manifest_file_size(_MANIFEST_BYTES)
    if table is not None and table.retention_ms is not None:
        # Window retention deletes as much as the changelog writes. A delete leaves a
        # tombstone that every iterator steps over (a window scan, the sweep itself) until a
        # compaction into the last level drops it with the value it deletes; files full of
        # them are compacted at once instead of when their level fills up. With the sweep's
        # flushes but not this (benchmarks/bench_expiry.py, side by side): 10.8-12.4 ms of
        # sweep CPU per second against 7.9-8.5, a key's windows read in 29-60 us against
        # 15-19, 0.35-0.64 MB of files against 0.09.
        opts.add_compact_on_deletion_collector_factory(
            _DELETES_WINDOW, _DELETES_IN_WINDOW, _DELETES_RATIO
        )
    return opts


def write_options(*, wal: bool) -> WriteOptions:
    """Options of a write with or without RocksDB's write-ahead log."""
    # Without the WAL: see partitionstore's docstring. With it: WAL on, sync off. Every batch
    # reaches the WAL in the OS page cache before `write` returns, so a crash of the
    # *process* loses nothing. A crash of the *machine* may lose the last batches, but each
    # batch carries its own checkpoint, so data and offset are lost together and the restart
    # replays them from Kafka (the source of truth). An fsync per batch would cost far more
    # than re-reading a few batches. `close()` syncs the WAL, so a clean shutdown is fully
    # durable.
    wo = WriteOptions()
    wo.sync = False
    # A property at run time; rocksdict's stub declares it as a method.
    wo.disable_wal = not wal  # type: ignore[method-assign,assignment]
    return wo
