"""Kafka Streams stores served by sparkiq next to a sparkiq windowed table: restore rate and
window lookups, measured in the same run.

Starts a broker (Apache Kafka; `--broker dev`: the dev broker) and writes three changelogs
of `--keys` keys x `--windows` windows each (6 partitions, placed by the key's murmur2 as
Kafka Streams places them; 8-byte long values), as their writers lay them out:

- `sparkiq` (the reference): a sparkiq windowed table, key + 8-byte window start;
- `ks-window`: a Kafka Streams window store's changelog, key + start + 4-byte sequence number;
- `ks-session`: a Kafka Streams session store's changelog, key + end + start (stored with
  the session's end before the value).

1. **Restore**: the `Restorer` restores each into a fresh state dir until ACTIVE
   (bench_restore's measurement), `--runs` runs, the three alternating.
2. **Lookups**: one `sparkiq serve` node holding all three; wrk -t1 -c32 for `--duration` s
   (after a 1 s warm-up) of GET /v1/tables/{table}/keys/{key}/windows of random keys (each
   answer: the key's `--windows` windows), `--rounds` rounds, the three alternating.

Prints per table the median records/s and CPU per record of the restore, the median req/s
and p50/p99 of the lookups, and each Kafka Streams table's ratio to the reference.

    .venv/bin/python benchmarks/bench_kstreams.py [--keys 30000] [--windows 10] [--broker dev]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from sparkiq.core.kstreams import (
    StoreType,
    kstreams_table,
    session_changelog_key,
    window_changelog_key,
)
from sparkiq.core.serde import window_wire_key
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.dev.broker import make_broker
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_restore  # noqa: E402  (sibling scripts, not a package: the restore measurement)
import bench_scale  # noqa: E402  (wrk's result line, /proc readers)

PARTITIONS = bench_restore.PARTITIONS
WINDOW_MS = 60_000
SESSION_MS = 30_000
BASE_MS = 1_790_000_000_000
NODE_ENV = {"SPARKIQ_STANDBY_REPLICAS": "0"}
LUA = (
    """
math.randomseed(42)
local n = %(keys)d
request = function()
  return wrk.format("GET", "/v1/tables/%(table)s/keys/user-" ..
    string.format("%%010d", math.random(0, n - 1)) .. "/windows?from=0")
end
"""
    + bench_scale.LUA_DONE
)


def tables(app_id: str, run: str) -> list[TableDef]:
    return [
        TableDef(
            "sparkiq",
            f"bench-ks-{run}-sparkiq",
            PARTITIONS,
            value_format=Format.LONG,
            kind=TableKind.WINDOWED,
            window_size_ms=WINDOW_MS,
        ),
        kstreams_table(
            "ks-window",
            store="windows",
            store_type=StoreType.TIMESTAMPED_WINDOW,
            value_serde="long",
            window_size_ms=WINDOW_MS,
            application_id=app_id,
            partitions=PARTITIONS,
            key_serde="string",
        ),
        kstreams_table(
            "ks-session",
            store="sessions",
            store_type=StoreType.SESSION,
            value_serde="long",
            application_id=app_id,
            partitions=PARTITIONS,
            key_serde="string",
        ),
    ]


def record_key(table: TableDef, key: bytes, start: int) -> bytes:
    if table.name == "sparkiq":
        return window_wire_key(key, start)
    if table.name == "ks-window":
        return window_changelog_key(key, start)
    return session_changelog_key(key, start + SESSION_MS, start)


def produce(bootstrap: str, table: TableDef, keys: int, windows: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    for i in range(keys):
        key = b"user-%010d" % i
        partition = table.partition_of(key)
        assert partition is not None
        for w in range(windows):
            start = BASE_MS + w * WINDOW_MS
            value = (i * windows + w).to_bytes(8, "big")
            while True:
                try:
                    producer.produce(
                        table.topic,
                        key=record_key(table, key, start),
                        value=value,
                        partition=partition,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        if i % 5_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def wrk(node: NodeProcess, table: str, keys: int, duration: int, work: Path) -> bench_scale.Run:
    """wrk's run of window lookups of random keys of *table* (bench_scale.wrk's, another path)."""
    assert node.pid is not None
    script = work / f"{table}.lua"
    script.write_text(LUA % {"keys": keys, "table": table})
    cmd = ["wrk", "-t1", f"-c{bench_scale.CONNECTIONS}", "-s", str(script), node.url]
    subprocess.run([*cmd, "-d1s"], capture_output=True, check=True)  # warm-up
    cpu0 = bench_scale.cpu_seconds([node.pid])
    out = subprocess.run(
        [*cmd, f"-d{duration}s"], capture_output=True, text=True, check=True
    ).stdout
    cpu = bench_scale.cpu_seconds([node.pid]) - cpu0
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    raw = json.loads(line[len("RESULT ") :])
    requests = max(int(raw["requests"]), 1)
    return bench_scale.Run(
        raw["requests"] / (raw["duration_us"] / 1e6),
        raw["p50_us"] / 1000,
        raw["p99_us"] / 1000,
        raw["errors"],
        raw["non2xx"],
        cpu / requests * 1e6,
        0.0,
    )


def check_answer(node: NodeProcess, table: str, windows: int) -> None:
    """One key's windows, as the lookups read them: all there, with the right ends."""
    r = node.http_get(f"/v1/tables/{table}/keys/user-0000000007/windows?from=0", timeout_s=10)
    items = r.json()["items"]
    size = SESSION_MS if table == "ks-session" else WINDOW_MS
    want = [
        {
            "start": BASE_MS + w * WINDOW_MS,
            "end": BASE_MS + w * WINDOW_MS + size,
            "value": 7 * windows + w,
        }
        for w in range(windows)
    ]
    if items != want:
        raise SystemExit(f"{table}: user-0000000007's windows are {items}, not {want}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=30_000)
    parser.add_argument("--windows", type=int, default=10, help="windows (or sessions) a key")
    parser.add_argument("--runs", type=int, default=3, help="restore runs of each table")
    parser.add_argument("--rounds", type=int, default=3, help="lookup rounds of each table")
    parser.add_argument("--duration", type=int, default=5, help="seconds of each lookup run")
    parser.add_argument("--broker", choices=["kafka", "dev"], default="kafka")
    args = parser.parse_args()
    n = args.keys * args.windows
    run_id = uuid.uuid4().hex[:8]
    app, app_id = f"bench-ks-{run_id}", f"bench-ks-{run_id}-app"
    defs = tables(app_id, run_id)
    with make_broker(args.broker) as broker, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bootstrap = broker.bootstrap_servers
        for table in defs:
            create_topic(bootstrap, table.topic, PARTITIONS)
            t0 = time.perf_counter()
            produce(bootstrap, table, args.keys, args.windows)
            print(f"{table.name}: produced {n:,} records in {time.perf_counter() - t0:.1f} s")
        restored: dict[str, list[tuple[float, float]]] = {t.name: [] for t in defs}
        for run in range(1, args.runs + 1):
            for table in defs:
                restored[table.name].append(bench_restore.restore(bootstrap, table, n))
                rate, cpu = restored[table.name][-1]
                print(
                    f"restore run {run} {table.name}: {rate:,.0f} records/s, "
                    f"{cpu:.2f} us CPU/record"
                )
        for table in defs:
            register_table(bootstrap, table, app=app)
        looked: dict[str, list[bench_scale.Run]] = {t.name: [] for t in defs}
        with LocalCluster(bootstrap, work / "nodes", nodes=1, app=app, env=NODE_ENV) as cluster:
            cluster.wait_settled(timeout_s=300)
            node = cluster.nodes[0]
            for table in defs:
                check_answer(node, table.name, args.windows)
            for rnd in range(1, args.rounds + 1):
                order = defs if rnd % 2 else defs[::-1]
                for table in order:
                    got = wrk(node, table.name, args.keys, args.duration, work)
                    if got.errors or got.non2xx:
                        raise SystemExit(
                            f"{table.name}: {got.errors} errors, {got.non2xx} non-2xx answers"
                        )
                    looked[table.name].append(got)
                    print(
                        f"lookups round {rnd} {table.name}: {got.rps:,.0f} req/s, p50 "
                        f"{got.p50_ms:.2f} ms, p99 {got.p99_ms:.2f} ms, {got.cpu_us:.0f} us CPU/req"
                    )
        print(
            f"\n{n:,} records a table ({args.keys:,} keys x {args.windows} windows), {args.broker}"
        )
        print(
            "| table | restore records/s | CPU us/record | lookups req/s | p50 / p99 ms "
            "| vs sparkiq (restore, lookups) |"
        )
        print("|---|---|---|---|---|---|")
        ref_r = statistics.median(r for r, _ in restored["sparkiq"])
        ref_l = statistics.median(x.rps for x in looked["sparkiq"])
        for table in defs:
            r = statistics.median(x for x, _ in restored[table.name])
            c = statistics.median(x for _, x in restored[table.name])
            rps = statistics.median(x.rps for x in looked[table.name])
            p50 = statistics.median(x.p50_ms for x in looked[table.name])
            p99 = statistics.median(x.p99_ms for x in looked[table.name])
            print(
                f"| {table.name} | {r:,.0f} | {c:.2f} | {rps:,.0f} | {p50:.2f} / {p99:.2f} | "
                f"{r / ref_r:.2f}, {rps / ref_l:.2f} |"
            )


if __name__ == "__main__":
    main()
