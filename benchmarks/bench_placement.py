"""Lookups that look past a key's own partition, against local lookups in the same run.

A table whose producers placed keys by a rule of their own (partitioner `any`) has no
partition per key: each lookup asks every partition. A table whose changelog holds a few
misplaced records asks every other partition when a key is missing from its own. Both cost
more than a local lookup; this measures how much, with wrk (-t1 -c32, random keys of 100k)
on 127.0.0.1, next to a murmur2 table's local lookups:

  1. `murmur2 present`: a murmur2 table, keys that are there       -- the reference
  2. `any present`: the same keys in a table of partitioner `any`  -- every partition asked
  3. `misplaced, absent`: absent keys of a murmur2 table with misplaced records

once on one node that holds every partition (all reads local), and once through node A of
two nodes that split the partitions (A asks B one probe per lookup). Every server is
started once and measured `--rounds` times in turn; ratios are taken within a round, their
medians reported. Goal: at least 0.3x the local rate (1) for (2) and (3).

    .venv/bin/python benchmarks/bench_placement.py [--duration 5] [--rounds 3]

Requires `wrk` (installed with apt-get when missing and running as root). Every process it
starts is stopped by PID. `serve-node` is the internal entry of a node process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkiq.core.tables import TableDef

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_http  # noqa: E402  (a sibling script, not a package)

PY = sys.executable
KEYS = bench_http.KEYS
PARTITIONS = 4
MISPLACED = 100  # records of `stray` written outside their murmur2 partition
GOAL = 0.3
SUBJECTS = (
    ("murmur2 present", "/v1/tables/placed/keys/k"),
    ("any present", "/v1/tables/anywhere/keys/k"),
    ("misplaced, absent", "/v1/tables/stray/keys/absent-"),
)


def tables() -> dict[str, TableDef]:
    from sparkiq.core.partitioner import Partitioner
    from sparkiq.core.tables import TableDef

    return {
        "placed": TableDef("placed", "placed-changelog", PARTITIONS),
        "anywhere": TableDef(
            "anywhere", "anywhere-changelog", PARTITIONS, partitioner=Partitioner.ANY
        ),
        "stray": TableDef("stray", "stray-changelog", PARTITIONS),
    }


def build_stores(state_dir: Path) -> None:
    """100k keys in each table: murmur2-placed, placed by `i % PARTITIONS`, and murmur2-placed
    with `MISPLACED` more records one partition off."""
    from sparkiq.core.partitioner import partition_for
    from sparkiq.node.stores.registry import StoreRegistry

    registry = StoreRegistry(state_dir)
    for name, table in tables().items():
        rows: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
        for i in range(KEYS):
            key = f"k{i}".encode()
            value = json.dumps({"n": i, "name": f"user-{i}"}, separators=(",", ":")).encode()
            p = i % PARTITIONS if name == "anywhere" else partition_for(key, PARTITIONS)
            rows[p].append((key, value))
        if name == "stray":
            for i in range(MISPLACED):
                key = f"stray-{i}".encode()
                rows[(partition_for(key, PARTITIONS) + 1) % PARTITIONS].append((key, b"{}"))
        for p, records in rows.items():
            registry.open(table, p).apply(records, next_offset=len(records))
    registry.close_all()


async def run_node(port: int, state_dir: str, holds: list[int], peer: str | None) -> None:
    """A node holding partitions `holds` of every table; the others are `peer`'s."""
    from sparkiq.http.app.server import HttpServer
    from sparkiq.http.settings import HttpSettings
    from sparkiq.http.staticview import StaticView
    from sparkiq.node.stores.registry import StoreRegistry

    url = f"http://127.0.0.1:{port}"
    defs = list(tables().values())
    view = StaticView(url, defs)
    view.misplaced["stray"] = MISPLACED
    registry = StoreRegistry(state_dir)
    for table in defs:
        for p in range(PARTITIONS):
            if p in holds:
                store = registry.open(table, p)
                view.set_placement((table.topic, p), url, store=store, offset=store.next_offset)
            else:
                assert peer is not None
                view.set_placement((table.topic, p), peer)
    server = HttpServer(view, "127.0.0.1", port, HttpSettings())
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    await server.start()
    await stopped.wait()
    await server.stop()
    registry.close_all()


def node_cmd(port: int, state: Path, holds: list[int], peer: int | None) -> list[str]:
    cmd = [PY, __file__, "serve-node", "--port", str(port), "--state-dir", str(state)]
    cmd += ["--holds", ",".join(map(str, holds))]
    return cmd + ([] if peer is None else ["--peer", f"http://127.0.0.1:{peer}"])


def bench(duration: int, rounds: int) -> list[dict[str, bench_http.Result]]:
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-placement-") as tmp:
        work = Path(tmp)
        print(f"building {KEYS:,} keys in each of 3 tables in RocksDB ...", flush=True)
        build_stores(work / "one")
        for name in ("a", "b"):
            subprocess.run(["cp", "-r", str(work / "one"), str(work / name)], check=True)
        try:
            one, a, b = (bench_http.free_port() for _ in range(3))
            every = list(range(PARTITIONS))
            half = PARTITIONS // 2
            started = [
                (one, subprocess.Popen(node_cmd(one, work / "one", every, None))),
                (a, subprocess.Popen(node_cmd(a, work / "a", every[:half], b))),
                (b, subprocess.Popen(node_cmd(b, work / "b", every[half:], a))),
            ]
            for port, proc in started:
                procs.append(proc)
                bench_http.wait_port(port, proc)
            pids = {"one": [started[0][1].pid], "two": [started[1][1].pid, started[2][1].pid]}
            out: list[dict[str, bench_http.Result]] = []
            for n in range(rounds):
                print(f"round {n + 1} of {rounds} ...", flush=True)
                results: dict[str, bench_http.Result] = {}
                for where, port in (("one", one), ("two", a)):
                    for subject, prefix in SUBJECTS:
                        name = f"{where} node{'s' if where == 'two' else ''}: {subject}"
                        results[name] = bench_http.run_wrk(
                            name, port, prefix, duration, work, pids[where]
                        )
                out.append(results)
        finally:
            for proc in reversed(procs):
                bench_http.stop(proc)
    return out


def report(rounds: list[dict[str, bench_http.Result]]) -> None:
    print(f"\nwrk -t1 -c{bench_http.CONNECTIONS}, random keys of {KEYS:,}, {os.cpu_count()} cores")
    for n, results in enumerate(rounds, 1):
        print(
            f"\nround {n}\n{'subject':<32}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'CPU us/req':>12}{'steal':>7}{'errors':>8}{'non-2xx':>9}"
        )
        for r in results.values():
            print(
                f"{r.name:<32}{r.rps:>10,.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{r.cpu_us:>12.1f}"
                f"{r.steal:>7.0%}{r.errors:>8}{r.non2xx:>9}"
            )
    reference = "one node: murmur2 present"
    print()
    for name in rounds[0]:
        if name == reference:
            continue
        ratios = [results[name].rps / results[reference].rps for results in rounds]
        verdict = ""
        if not name.endswith("murmur2 present"):
            verdict = f" (goal >= {GOAL}: {'met' if median(ratios) >= GOAL else 'NOT met'})"
        print(
            f"{name} / local murmur2: per round {', '.join(f'{r:.2f}' for r in ratios)},"
            f" median {median(ratios):.2f}{verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    node = sub.add_parser("serve-node")
    node.add_argument("--port", type=int, required=True)
    node.add_argument("--state-dir", required=True)
    node.add_argument("--holds", required=True)
    node.add_argument("--peer", default=None)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="measure everything this often")
    args = parser.parse_args()
    if args.command == "serve-node":
        import uvloop

        holds = [int(p) for p in args.holds.split(",")]
        uvloop.run(run_node(args.port, args.state_dir, holds, args.peer))
        return
    bench_http.require_tools(("wrk",), "bench_placement")
    if args.rounds < 1 or args.duration < 1:
        raise SystemExit("--rounds and --duration must be >= 1")
    report(bench(args.duration, args.rounds))


if __name__ == "__main__":
    main()
