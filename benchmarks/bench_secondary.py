"""What a second serving process reading a node's stores would pay: a RocksDB secondary.

A second HTTP process per node (SO_REUSEPORT) would need the stores the node's one writer
keeps. RocksDB lets another process open a database as a *secondary* instance, which sees
the primary's writes only after `try_catch_up_with_primary()`. This measures, on one store
of `--keys` keys, written through sparkiq's `PartitionStore` (data and checkpoint together):

- a random get on the secondary, next to the same get on a read-only instance;
- the cost of one catch-up (wall time, and the reader's CPU) while a writer process applies
  `--rate` records per second through the WAL (as a live active does), in batches every
  10 ms, with its checkpoint;
- how far the secondary's checkpoint moved between catch-ups (it only moves at one).

    .venv/bin/python benchmarks/bench_secondary.py --rate 5000 --catch-ups 200
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import shutil
import statistics
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from sparkiq.core.tables import TableDef
from sparkiq.node.stores.partitionstore import PartitionStore

TABLE = TableDef("bench", "bench-changelog", 1)
# Where PartitionStore keeps its checkpoint (src/sparkiq/node/store.py): read by the secondary.
META = "meta"
OFFSET = b"next_offset"
VALUE = b"v" * 100


def _reader_options() -> Options:
    opts = Options(raw_mode=True)
    opts.set_max_open_files(-1)  # what RocksDB asks of a secondary
    return opts


def _key(i: int) -> bytes:
    return b"k%07d" % i


def _load(path: Path, keys: int) -> None:
    store = PartitionStore(path, TABLE, 0)
    batch = store.new_batch()
    for i in range(keys):
        batch.put(_key(i), VALUE)
    store.write(batch, keys, wal=False)
    store.close()  # flushes


def _writer(path: str, keys: int, rate: int, stop: Event) -> None:
    """A live active: batches through the WAL, each with its checkpoint."""
    store = PartitionStore(Path(path), TABLE, 0)
    offset = keys
    per_batch = max(rate // 100, 1)
    while not stop.is_set():
        started = time.monotonic()
        batch = store.new_batch()
        for _ in range(per_batch):
            batch.put(_key(random.randrange(keys)), VALUE)
            offset += 1
        store.write(batch, offset)
        time.sleep(max(0.0, 0.01 - (time.monotonic() - started)))
    store.close()


def _offset(meta: Rdict) -> int:
    return int.from_bytes(meta[OFFSET], "big")


def _mean_get_us(db: Rdict, keys: list[bytes]) -> float:
    started = time.perf_counter()
    for key in keys:
        db.get(key)
    return 1e6 * (time.perf_counter() - started) / len(keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=5000, help="records/s the writer applies")
    parser.add_argument("--catch-ups", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=10.0, help="between catch-ups")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sparkiq-bench-secondary-"))
    try:
        path = work / "store"
        _load(path, args.keys)
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        writer = ctx.Process(target=_writer, args=(str(path), args.keys, args.rate, stop))
        writer.start()
        time.sleep(0.5)
        secondary = Rdict(
            str(path),
            _reader_options(),
            column_families={META: _reader_options()},
            access_type=AccessType.secondary(str(work / "secondary")),
        )
        meta = secondary.get_column_family(META)
        sample = [_key(random.randrange(args.keys)) for _ in range(100_000)]
        secondary_get = _mean_get_us(secondary, sample)
        costs: list[float] = []
        cpu: list[float] = []
        moved: list[int] = []
        seen = _offset(meta)
        for _ in range(args.catch_ups):
            started, started_cpu = time.perf_counter(), time.process_time()
            secondary.try_catch_up_with_primary()
            costs.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
            now = _offset(meta)
            moved.append(now - seen)
            seen = now
            time.sleep(args.interval_ms / 1000)
        stop.set()
        writer.join()
        read_only = Rdict(
            str(path),
            _reader_options(),
            column_families={META: _reader_options()},
            access_type=AccessType.read_only(),
        )
        read_only_get = _mean_get_us(read_only, sample)
        costs.sort()
        p50 = 1e6 * statistics.median(costs)
        p99 = 1e6 * costs[int(len(costs) * 0.99)]
        print(f"get: secondary {secondary_get:.2f} us, read-only {read_only_get:.2f} us")
        print(
            f"catch-up with a writer at {args.rate}/s: p50 {p50:.0f} us, p99 {p99:.0f} us, "
            f"CPU {1e6 * statistics.mean(cpu):.0f} us on average; "
            f"records seen per catch-up: median {statistics.median(moved):.0f}"
        )
        busy = statistics.mean(costs) / (statistics.mean(costs) + args.interval_ms / 1000)
        print(
            f"catching up every {args.interval_ms:.0f} ms keeps one store's reader busy "
            f"{100 * busy:.0f}% of the time"
        )
        secondary.close()
        read_only.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
