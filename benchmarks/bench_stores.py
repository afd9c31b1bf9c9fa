"""Many stores in one process: RSS and open files against the number of stores and the write
rate, with the node's memory budget (`--store-memory-mb`) and without it (RocksDB's defaults).

Each configuration runs in a fresh child process, so its RSS is its own:

- opens `stores` partition stores through a `StoreRegistry` (as a node does), with a
  `SharedMemory` of `--memory-mb` or none, and times the opening (CPU and wall per store);
- for `--seconds`, every 0.1 s writes `rate / 10` records (10-byte keys drawn from
  `--keys-per-store` per store, 100-byte values) spread over all stores, one write batch per
  store with its checkpoint, as the restorer writes a consumed batch (through the WAL, as a
  standby or an active does once restored), and reads `--reads` random keys a second;
- samples the process's RSS (VmRSS) and open descriptors every second.

Prints per configuration: the RSS before the stores were opened (the interpreter and
rocksdict: the reference), after opening them, its peak and its end while writing; the
descriptors per store; the budget's usage (cached blocks and memtables) at the end; the
records written and the stores' bytes on disk; then each run's RSS over time.

    .venv/bin/python benchmarks/bench_stores.py [--stores 100,500,1000] [--rates 20000,100000]
        [--memory-mb 256] [--seconds 20] [--keys-per-store 20000] [--reads 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sparkiq.core.tables import TableDef
from sparkiq.node.stores.registry import StoreRegistry
from sparkiq.node.stores.storeoptions import FILES_PER_STORE, SharedMemory

TICK_S = 0.1
VALUE = b"v" * 100
MB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child(stores: int, rate: int, memory_mb: int, seconds: float, keys: int, reads: int) -> None:
    """One configuration; prints its figures as one JSON line."""
    base = Path(tempfile.mkdtemp(prefix="bench-stores-"))
    try:
        rss_before, files_before = rss_bytes(), open_files()
        memory = SharedMemory(memory_mb * MB) if memory_mb else None
        registry = StoreRegistry(base, memory)
        table = TableDef("t", "t-changelog", stores)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        opened = [registry.open(table, p) for p in range(stores)]
        open_cpu = time.process_time() - cpu0
        open_wall = time.perf_counter() - wall0
        rss_open, files_open = rss_bytes(), open_files()
        rng = random.Random(7)
        per_tick = max(int(rate * TICK_S), 1)
        reads_per_tick = int(reads * TICK_S)
        offsets = [0] * stores
        written = read = 0
        peak_rss, peak_files = rss_open, files_open
        samples: list[tuple[float, int, int]] = []
        start = time.perf_counter()
        next_tick, next_sample = start, start + 1.0
        while (now := time.perf_counter()) - start < seconds:
            if now < next_tick:
                time.sleep(next_tick - now)
            next_tick += TICK_S
            batches: dict[int, list[tuple[bytes, bytes | None]]] = {}
            for _ in range(per_tick):
                p = rng.randrange(stores)
                batches.setdefault(p, []).append((b"k%09d" % rng.randrange(keys), VALUE))
            for p, records in batches.items():
                offsets[p] += len(records)
                opened[p].apply(records, offsets[p])
            written += per_tick
            for _ in range(reads_per_tick):
                opened[rng.randrange(stores)].get(b"k%09d" % rng.randrange(keys))
            read += reads_per_tick
            if time.perf_counter() >= next_sample:
                next_sample += 1.0
                rss, files = rss_bytes(), open_files()
                peak_rss, peak_files = max(peak_rss, rss), max(peak_files, files)
                samples.append((time.perf_counter() - start, rss, files))
        elapsed = time.perf_counter() - start
        rss_end, files_end = rss_bytes(), open_files()
        usage = memory.usage() if memory is not None else None
        memtables = memory.memtable_usage() if memory is not None else None
        registry.close_all()
        print(
            json.dumps(
                {
                    "stores": stores,
                    "rate": rate,
                    "memory_mb": memory_mb,
                    "open_cpu_ms_per_store": open_cpu * 1000 / stores,
                    "open_wall_ms_per_store": open_wall * 1000 / stores,
                    "rss_before": rss_before,
                    "rss_open": rss_open,
                    "rss_peak": max(peak_rss, rss_end),
                    "rss_end": rss_end,
                    "files_per_store_open": (files_open - files_before) / stores,
                    "files_per_store_peak": (max(peak_files, files_end) - files_before) / stores,
                    "budget_used": usage,
                    "memtables": memtables,
                    "written_per_s": written / elapsed,
                    "reads_per_s": read / elapsed,
                    "disk": disk_bytes(base),
                    "samples": samples,
                }
            ),
            flush=True,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(args: argparse.Namespace, stores: int, rate: int, memory_mb: int) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        f"--stores={stores}",
        f"--rates={rate}",
        f"--memory-mb={memory_mb}",
        f"--seconds={args.seconds}",
        f"--keys-per-store={args.keys_per_store}",
        f"--reads={args.reads}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="100,500,1000")
    parser.add_argument("--rates", default="20000,100000")
    parser.add_argument("--memory-mb", type=int, default=256, help="the bound; 0: none only")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--keys-per-store", type=int, default=20_000)
    parser.add_argument("--reads", type=int, default=5_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    counts = [int(n) for n in args.stores.split(",")]
    rates = [int(r) for r in args.rates.split(",")]
    if args.child:
        child(counts[0], rates[0], args.memory_mb, args.seconds, args.keys_per_store, args.reads)
        return
    bounds = [args.memory_mb, 0] if args.memory_mb else [0]
    print(
        f"{args.seconds:.0f} s per configuration, {args.reads} reads/s, values of "
        f"{len(VALUE)} B, keys from {args.keys_per_store} per store; files per store bound: "
        f"{FILES_PER_STORE}"
    )
    header = (
        "| stores | writes/s | budget | open ms CPU/store | RSS before | RSS opened | "
        "RSS peak | RSS end | budget used | files/store (peak) | disk |"
    )
    print(header)
    print("|---" * 11 + "|")
    timelines: list[str] = []
    for stores in counts:
        for rate in rates:
            for bound in bounds:
                r = run(args, stores, rate, bound)
                every = max(len(r["samples"]) // 6, 1)
                timelines.append(
                    f"{stores} stores, {rate:,} writes/s asked, "
                    f"{f'{bound} MB' if bound else 'no'} budget: RSS "
                    + ", ".join(
                        f"{rss / MB:.0f} MB at {t:.0f} s" for t, rss, _ in r["samples"][::every]
                    )
                )
                used = "-" if r["budget_used"] is None else f"{r['budget_used'] / MB:.0f} MB"
                print(
                    f"| {stores} | {r['written_per_s']:,.0f} | "
                    f"{f'{bound} MB' if bound else 'none'} | "
                    f"{r['open_cpu_ms_per_store']:.1f} | {r['rss_before'] / MB:.0f} MB | "
                    f"{r['rss_open'] / MB:.0f} MB | {r['rss_peak'] / MB:.0f} MB | "
                    f"{r['rss_end'] / MB:.0f} MB | {used} | "
                    f"{r['files_per_store_open']:.1f} ({r['files_per_store_peak']:.1f}) | "
                    f"{r['disk'] / MB:.0f} MB |",
                    flush=True,
                )
    print()
    for line in timelines:
        print(line)


if __name__ == "__main__":
    main()
