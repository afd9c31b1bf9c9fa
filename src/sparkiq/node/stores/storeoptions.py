"""RocksDB options of a partition store (`sparkiq.node.stores.partitionstore`): its database, its
column families and its writes."""

from __future__ import annotations

from rocksdict import DBCompressionType, Options, WriteOptions

from sparkiq.core.tables import TableDef

_KEEP_INFO_LOGS = 3  # RocksDB's info logs kept per store: the current one and two old ones
_INFO_LOG_BYTES = 1 << 20  # an info log is rolled at this size
_MANIFEST_BYTES = 4 << 20  # the MANIFEST (a record per flush and compaction) is rolled at this size
# A data file is compacted soon after it is written when, within any run of this many
# entries, at least this many are deletes (or when deletes are this share of all its
# entries): the files that window retention fills with deletes (see `store_options`).
_DELETES_WINDOW, _DELETES_IN_WINDOW, _DELETES_RATIO = 1_000, 500, 0.5


def store_options(table: TableDef | None = None) -> Options:
    """Options of a store's database and of its data column family (*table*: the table it
    holds), or, without a table, of its meta column family."""
    opts = Options(raw_mode=True)
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
