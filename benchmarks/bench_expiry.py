"""Window expiry's CPU on the restorer's thread, turn by turn: real stores, simulated clock.

The HTTP thread of a node waits for the interpreter while the restorer's thread runs, so
what matters for lookups is how long the sweep holds it at once. A step of the sweep works
in slices and sleeps between two (`sparkiq.node.restore.expiry`); this measures the slices
without Kafka or HTTP, in CPU time (thread time), which another process on the machine
disturbs far less than wall-clock latency:

- a node's share of bench_tablekinds.py's `expiring` table: `--stores` stores of a
  windowed table (`--window-s` windows kept `--retention-s` of data time), `--keys` keys in
  all (`w-00042`), fed as that benchmark's feed does: `--ticks` times a second one new
  window per key (~40-byte JSON values), written as the restorer writes a consumed batch
  (one write per store, through the write-ahead log);
- the restorer's turns on a simulated clock: one every 0.1 s, or every 0.01 s while a pass
  is under way (`WindowExpiry.sweeping`: the restorer's busy poll). Each turn calls
  `WindowExpiry.step` on the stores, as `Restorer` does. The data's time runs
  `--window-s` x `--ticks` times faster than the clock, as in bench_tablekinds. A slice is
  the work between the start of a step, the sweep's sleeps and the step's end (the sleeps
  are timed by wrapping `time.sleep`);
- the reference: writing one tick's windows into the stores, which a restorer turn does
  with the interpreter held as well, with a retention or without.

Runs `--warm-s` simulated seconds, then measures `--seconds` more. Prints, every
`--report-every` simulated seconds, the sweep's CPU per second and the stores' files on
disk and the windows held; at the end the slices per second and their CPU (p50, p90, p99,
max) beside a tick's write, the sweep's CPU per second and per removed window, the CPU of
RocksDB's own threads (flushes and compactions), the windows held, the stores' bytes on disk
(SST files and write-ahead log) and the CPU of reading one key's windows.

    .venv/bin/python benchmarks/bench_expiry.py [--keys 500] [--stores 2] [--seconds 120]
        [--warm-s 20] [--window-s 10] [--retention-s 120] [--ticks 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparkiq.core.serde import window_store_key
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore.batches import NewestStart
from sparkiq.node.restore.expiry import WindowExpiry
from sparkiq.node.stores.partitionstore import PartitionStore
from sparkiq.node.stores.registry import StoreRegistry

TURN_S, BUSY_TURN_S = 0.1, 0.01  # the restorer's poll timeouts (restorer.py)
BASE_MS = 1_790_000_000_000  # data time of the first window
MB = 1e6


@dataclass
class Held:
    """What a sweep needs of a replica."""

    tp: TopicPartition
    table: TableDef
    store: PartitionStore
    newest_start: NewestStart  # kept by the feed, as the restorer's key function does


def disk(state_dir: Path) -> tuple[float, float]:
    """MB of SST files and of write-ahead log under `state_dir`."""
    sst = wal = 0
    for f in state_dir.rglob("*"):
        try:
            if f.suffix == ".sst":
                sst += f.stat().st_size
            elif f.suffix == ".log" and f.name != "LOG":
                wal += f.stat().st_size
        except FileNotFoundError:  # compacted away meanwhile
            continue
    return sst / MB, wal / MB


class Slices:
    """CPU of the slices of work between the sweep's sleeps (`time.sleep`, wrapped) and the
    flushes it starts (`PartitionStore.flush_deletes`, wrapped: RocksDB lets go of the
    interpreter while it switches to a new memtable, ~0.3 ms of CPU)."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self.began = 0.0
        self.measuring = False
        self._sleep = time.sleep
        time.sleep = self.sleep
        self._flush_deletes = flush_deletes = PartitionStore.flush_deletes

        def unheld(store: PartitionStore, at_least: int) -> bool:
            self.end()
            try:
                return flush_deletes(store, at_least)
            finally:
                self.start()

        PartitionStore.flush_deletes = unheld  # type: ignore[method-assign,assignment]

    def start(self) -> None:
        self.began = time.thread_time()

    def end(self) -> None:
        if self.measuring:
            self.cpu.append(time.thread_time() - self.began)

    def sleep(self, seconds: float) -> None:
        self.end()
        self._sleep(seconds)
        self.start()

    def close(self) -> None:
        time.sleep = self._sleep
        PartitionStore.flush_deletes = self._flush_deletes  # type: ignore[method-assign]


def pct(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


class Feed:
    """One new window per key per tick, one write per store."""

    def __init__(self, held: list[Held], keys: int, window_ms: int) -> None:
        self.held = held
        self.keys = [[b"w-%05d" % i for i in range(p, keys, len(held))] for p in range(len(held))]
        self.window_ms = window_ms
        self.ticks = 0

    def tick(self) -> float:
        """Write the next window of every key; the CPU it took."""
        began = time.thread_time()
        n = self.ticks
        start = BASE_MS + n * self.window_ms
        for held, keys in zip(self.held, self.keys, strict=True):
            records: list[tuple[bytes, bytes | None]] = [
                (window_store_key(k, start), b'{"window":%d,"store":%d,"sales":%d}' % (n, i, n))
                for i, k in enumerate(keys)
            ]
            held.store.apply(records, (held.store.next_offset or 0) + len(records))
            held.newest_start.ms = start
        self.ticks += 1
        return time.thread_time() - began


def run(args: argparse.Namespace, state_dir: Path) -> None:
    window_ms = args.window_s * 1000
    table = TableDef(
        "expiring",
        "expiring-changelog",
        args.stores,
        kind=TableKind.WINDOWED,
        window_size_ms=window_ms,
        retention_ms=args.retention_s * 1000,
    )
    registry = StoreRegistry(state_dir)
    try:
        stores = [registry.open(table, p) for p in range(args.stores)]
        held = [Held((table.topic, s.partition), table, s, NewestStart()) for s in stores]
        feed = Feed(held, args.keys, window_ms)
        expiry = WindowExpiry()
        slices = Slices()
        now = next_tick = 0.0
        end = args.warm_s + args.seconds
        turns = 0
        writes: list[float] = []  # CPU of a tick's writes
        total = part = 0.0
        removed_at = 0
        process0 = thread0 = 0.0
        held_at: list[int] = []  # windows held at each report
        next_report = args.warm_s + args.report_every
        while now < end:
            measuring = slices.measuring = now >= args.warm_s
            if measuring and not turns:
                removed_at = expiry.removed
                process0, thread0 = time.process_time(), time.thread_time()
            if now >= next_tick:
                took = feed.tick()
                if measuring:
                    writes.append(took)
                next_tick += 1 / args.ticks
            began = time.thread_time()
            slices.start()
            looked = expiry.step(held, now=now)
            if looked:
                slices.end()
            took = time.thread_time() - began
            if measuring:
                turns += 1
                total += took
                part += took
            now += BUSY_TURN_S if expiry.sweeping else TURN_S
            if measuring and (now >= next_report or now >= end):
                sst, wal = disk(state_dir)
                spent = now - (next_report - args.report_every)
                held_at.append(sum(len(s.scan(limit=10**9)) for s in stores))
                print(
                    f"  {now:5.0f} s: sweep {part / spent * 1e3:5.2f} ms CPU/s; "
                    f"on disk {sst:5.2f} MB SST, {wal:5.2f} MB WAL; "
                    f"{held_at[-1] / args.keys:.1f} windows per key"
                )
                part = 0.0
                next_report = now + args.report_every
        slices.close()
        # RocksDB's own threads: flushes and compactions (this process runs no others).
        background = (time.process_time() - process0) - (time.thread_time() - thread0)
        removed = expiry.removed - removed_at
        windows = sum(len(s.scan(limit=10**9)) for s in stores)
        sst, wal = disk(state_dir)
        rng = random.Random(1)
        sample = [(rng.randrange(args.stores), rng.randrange(args.keys)) for _ in range(2_000)]
        began = time.thread_time()
        for p, i in sample:
            stores[p].scan(prefix=feed.keys[p][i % len(feed.keys[p])], limit=1_000)
        read_us = (time.thread_time() - began) / len(sample) * 1e6
    finally:
        registry.close_all()
    held_cpu = sorted(slices.cpu)
    secs = args.seconds
    kept = args.retention_s // args.window_s + 1
    print(
        f"\n{args.keys:,} keys in {args.stores} stores, {args.ticks} windows/key/s of "
        f"{args.window_s} s kept {args.retention_s} s; {secs} s measured after {args.warm_s} s"
    )
    print(
        f"restorer turns: {turns / secs:.0f}/s; slices of the sweep: {len(held_cpu) / secs:.1f}/s"
    )
    if held_cpu:
        print(
            "CPU of a slice: "
            + ", ".join(
                f"{name} {pct(held_cpu, p) * 1e3:.3f} ms"
                for name, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
            )
        )
    print(f"reference, CPU of a tick's write: median {statistics.median(writes) * 1e3:.3f} ms")
    print(
        f"sweep CPU: {total / secs * 1e3:.2f} ms/s; {removed / secs:,.0f} windows removed/s, "
        f"{total / max(removed, 1) * 1e6:.2f} us each"
    )
    print(f"RocksDB's threads (flushes, compactions): {background / secs * 1e3:.2f} ms/s")
    print(
        f"windows held per key: {windows / args.keys:.1f} at the end, "
        f"{statistics.mean(held_at) / args.keys:.1f} on average over the reports, "
        f"{max(held_at) / args.keys:.1f} at most ({kept} within the retention)"
    )
    print(f"on disk: {sst:.2f} MB SST, {wal:.2f} MB WAL; a key's windows read in {read_us:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=500, help="in all the stores")
    parser.add_argument("--stores", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=120, help="simulated, measured")
    parser.add_argument("--warm-s", type=int, default=20, help="simulated, before measuring")
    parser.add_argument("--window-s", type=int, default=10)
    parser.add_argument("--retention-s", type=int, default=120)
    parser.add_argument("--ticks", type=int, default=2, help="windows per key per second")
    parser.add_argument("--report-every", type=int, default=20)
    args = parser.parse_args()
    if min(args.keys, args.stores, args.seconds, args.window_s, args.ticks) < 1:
        parser.error("--keys, --stores, --seconds, --window-s, --ticks must be >= 1")
    if args.retention_s < 1 or args.report_every < 1 or args.warm_s < 0:
        parser.error("--retention-s and --report-every must be >= 1, --warm-s >= 0")
    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-expiry-") as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
