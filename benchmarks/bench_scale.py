"""How one node's restore, lookups and memory scale with the size of a table (100k to 10M keys).

For each size N asked for (`--keys`, default 100k and 1M), in turn and each with a fresh
broker (Apache Kafka; `--broker dev`: the dev broker):

1. produce N records to a keyed changelog (`--partitions`, default 6): 15-byte keys
   `user-0000000000`, ~100-byte JSON values, murmur2-placed as sparkiq's sinks place them,
   with confluent-kafka in large uncompressed batches (`--compression` to change that);
   and a tiny table of 1,000 keys of the same shape, the lookup reference. The count is
   checked against the changelog's *true* end offsets (the dev broker under-reports the
   high watermark, see shared/BASELINES.md);
2. restore: start one `sparkiq serve` node (`sparkiq.dev.localcluster.NodeProcess`, no
   standbys) on a fresh state dir, the only member of its group, so it restores every
   partition of both tables; time from the spawn until /readyz answers 200 (`restore
   rec/s` = records / that time, process start and group join included; the details give
   the rate from the first record applied too, and where the CPU went by thread). Progress
   (records applied, from the node's /metrics) is printed every few seconds. Then the
   records applied and 200 random keys' values are checked, and the state dir's bytes on
   disk (the big table's stores) are taken;
3. lookups: wrk -t1 -c32 (bench_http's load client and concurrency), single-key GETs of
   random existing keys of the big table, then of the tiny table (the reference: the same
   node, client and code path; only the table size differs), then GET /healthz (the node's
   HTTP floor), each `--duration` seconds after a 1 s warm-up, `--rounds` times in turn;
   medians of the rounds are reported;
4. the node's resident memory (/proc/<pid>/status VmRSS, and the peak VmHWM) after the
   restore and after the lookups.

Prints a final table: keys | restore rec/s | state MB | lookups/s | p50 ms | p99 ms |
reference lookups/s | RSS MB after restore | RSS MB after lookups, then the details of each
size (produce rate, broker memory, phase times, CPU per record and per lookup, steal).

    .venv/bin/python benchmarks/bench_scale.py [--keys 100000,1000000,10000000]
        [--partitions 6] [--duration 5] [--rounds 3] [--compression none]

Requires `wrk` (installed with apt-get when missing and running as root). Every process it
starts (broker, node, wrk) is stopped by PID; its files live in a temporary directory that
is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import httpx
from confluent_kafka import KafkaError, Message, Producer

from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.broker import make_broker
from sparkiq.dev.localcluster import NodeProcess
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from sparkiq.kafka.offsets import true_end_offsets

TABLE = "scale"
TINY_TABLE = "tiny"
TINY_KEYS = 1_000
CONNECTIONS = 32  # wrk -c, as benchmarks/bench_http.py
PROGRESS_S = 3.0  # seconds between progress lines
CHECKED_KEYS = 200  # random keys whose values are checked after the restore
CLK_TCK = os.sysconf("SC_CLK_TCK")
MB = 1024 * 1024


def key_of(i: int) -> bytes:
    """The i-th key: 15 bytes."""
    return b"user-%010d" % i


VALUE_FORMAT = (
    b'{"id":%d,"name":"customer %d","tier":"%s","score":%d,"city":"Lisbon","active":true}'
)
TIERS = (b"gold", b"silver", b"bronze")


def value_of(i: int) -> bytes:
    """The i-th key's value: ~100 bytes of JSON."""
    return VALUE_FORMAT % (i, i, TIERS[i % 3], i * 7919 % 100_000)


# -- producing -------------------------------------------------------------------------------


def produce(
    bootstrap: str, topic: str, partitions: int, n: int, compression: str, *, quiet: bool = False
) -> float:
    """Records 0..n-1 to `topic`, murmur2-placed; returns records/s. Checks that every record
    arrived: no delivery error, and the partitions' true end offsets add up to n."""
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",  # as sparkiq's sinks and Kafka's Java clients
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": compression,
            "acks": 1,
            # Only failures come back: no Python callback per record.
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
        }
    )
    fmt, tiers = VALUE_FORMAT, TIERS
    produce_one = producer.produce
    t0 = last = time.perf_counter()
    for i in range(n):
        # value_of(i), inlined: this loop is most of the producer's time.
        value = fmt % (i, i, tiers[i % 3], i * 7919 % 100_000)
        while True:
            try:
                produce_one(topic, value, b"user-%010d" % i)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 50_000 == 0:
            producer.poll(0)
            now = time.perf_counter()
            if not quiet and now - last >= PROGRESS_S:
                last = now
                print(f"  produced {i:,} of {n:,} ({i / (now - t0):,.0f} records/s)", flush=True)
    remaining = producer.flush(120)
    rate = n / (time.perf_counter() - t0)
    if remaining or errors:
        raise SystemExit(f"{remaining} records not delivered; errors: {errors}")
    ends = true_end_offsets(bootstrap, [(topic, p) for p in range(partitions)])
    if sum(ends.values()) != n:
        raise SystemExit(f"{topic}: the true end offsets add up to {sum(ends.values())}, not {n}")
    return rate


# -- /proc -----------------------------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time so far of processes `pids` (all their threads)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def machine_times() -> tuple[int, int]:
    """All CPU time of the machine so far and the part the hypervisor stole, in ticks."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is in user already)
    return sum(fields[:8]), fields[7]


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of process `pid`, in MiB."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(rest.split()[0]) / 1024  # kB
    return fields["VmRSS"], fields["VmHWM"]


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of the live threads of `pid`, by thread name with its digits
    dropped (`rdk:broker1` -> `rdk:broker`), and `(whole process)` for all threads, the
    ended ones included."""
    out: dict[str, float] = {"(whole process)": cpu_seconds([pid])}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):  # the thread ended
            continue
        name = re.sub(r"[-\d/]+$", "", stat[stat.index("(") + 1 : stat.rindex(")")]) or "?"
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds by thread name between two `thread_cpu` readings; threads that ended in
    between show up only in `(whole process)`."""
    return {name: after[name] - before.get(name, 0.0) for name in after}


def dir_bytes(path: Path) -> int:
    """Bytes of the files under `path` (their sizes, as `du -sb`)."""
    total = 0
    for f in path.rglob("*"):
        try:
            if f.is_file():
                total += f.stat().st_size
        except FileNotFoundError:  # RocksDB removed it meanwhile
            continue
    return total


# -- the node --------------------------------------------------------------------------------


def metric(node: NodeProcess, name: str) -> float | None:
    """The value of an unlabelled metric of the node's /metrics, None if it cannot tell."""
    try:
        text = node.http_get("/metrics", 2.0).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def log_tail(node: NodeProcess, lines: int = 40) -> str:
    """The end of the node's log (its directory is removed when the benchmark ends)."""
    try:
        return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {node.log_path}: {exc})"


@dataclass
class Restore:
    seconds: float  # spawn to /readyz 200
    up_s: float  # spawn to /healthz 200 (process start, imports)
    first_record_s: float  # spawn to the first record applied (as seen by polling /metrics)
    applied: int  # sparkiq_restore_records_total when ready
    node_cpu: dict[str, float]  # CPU seconds by thread name, spawn to ready
    node_cpu_first_s: float  # CPU seconds of the node from the first record seen to ready
    broker_cpu_s: float


def restore(node: NodeProcess, broker_pid: int, total: int, timeout_s: float) -> Restore:
    """Start `node` and wait until it is ready, printing progress."""
    broker_cpu0 = cpu_seconds([broker_pid])
    t0 = time.perf_counter()
    node.start()
    assert node.pid is not None
    pid = node.pid
    cpu0 = {"(whole process)": 0.0}  # the process starts at zero CPU
    up_s = first_s = -1.0
    cpu_first = 0.0  # the node's CPU seconds when the first record was seen applied
    last_progress = t0
    deadline = t0 + timeout_s
    while True:
        now = time.perf_counter()
        if not node.is_running():
            raise SystemExit(f"the node exited during the restore; its log:\n{log_tail(node)}")
        if now > deadline:
            raise SystemExit(f"the node was not ready after {timeout_s:.0f}s:\n{log_tail(node)}")
        if up_s < 0:
            try:
                if node.http_get("/healthz", 1.0).status_code == 200:
                    up_s = time.perf_counter() - t0
            except httpx.HTTPError:
                pass
        elif node.is_ready():
            seconds = time.perf_counter() - t0
            break
        elif first_s < 0 or now - last_progress >= PROGRESS_S:
            applied = metric(node, "sparkiq_restore_records_total") or 0.0
            if first_s < 0 and applied > 0:
                first_s = time.perf_counter() - t0
                cpu_first = cpu_seconds([pid])
            if now - last_progress >= PROGRESS_S:
                last_progress = now
                rss, _ = memory_mb(pid)
                if first_s < 0:
                    print(
                        f"  {now - t0:.0f} s: no record applied yet (joining);"
                        f" node RSS {rss:,.0f} MB",
                        flush=True,
                    )
                else:
                    rate = applied / max(now - t0 - first_s, 1e-9)
                    print(
                        f"  {now - t0:.0f} s: restored {applied:,.0f} of {total:,} records"
                        f" ({applied / total:.0%}), {rate:,.0f} records/s since the first;"
                        f" node RSS {rss:,.0f} MB",
                        flush=True,
                    )
        time.sleep(0.1)
    node_cpu = cpu_delta(cpu0, thread_cpu(pid))
    broker_cpu = cpu_seconds([broker_pid]) - broker_cpu0
    applied = int(metric(node, "sparkiq_restore_records_total") or -1)
    if first_s < 0:  # ready before a /metrics poll saw a record
        first_s = up_s
    cpu_after_first = node_cpu["(whole process)"] - cpu_first
    return Restore(seconds, up_s, first_s, applied, node_cpu, cpu_after_first, broker_cpu)


def check_values(node: NodeProcess, n: int, count: int) -> list[str]:
    """GET `count` random keys of the big table; what differs from what was produced."""
    rng = random.Random(7)
    wrong: list[str] = []
    with httpx.Client(base_url=node.url, timeout=5.0) as client:
        for i in [0, n - 1, *(rng.randrange(n) for _ in range(count - 2))]:
            key = key_of(i).decode()
            resp = client.get(f"/v1/tables/{TABLE}/keys/{key}")
            expected = json.loads(value_of(i))
            if resp.status_code != 200 or resp.json().get("value") != expected:
                wrong.append(f"{key}: {resp.status_code} {resp.text[:200]}")
    return wrong


# -- lookups ---------------------------------------------------------------------------------

# The end of every wrk script: prints wrk's summary as one JSON line.
LUA_DONE = """done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, ' ..
    '"errors": %%d, "non2xx": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""
# Random keys 0..n-1 of a table (n = 0: the prefix alone, e.g. /healthz).
LUA = (
    """
math.randomseed(%(seed)d)
local n = %(keys)d
local prefix = "%(prefix)s"
request = function()
  if n == 0 then
    return wrk.format("GET", prefix)
  end
  return wrk.format("GET", prefix .. string.format("%%010d", math.random(0, n - 1)))
end
"""
    + LUA_DONE
)
# Random keys out of a given list of key numbers (`Subject.picks`).
LUA_PICKS = (
    """
math.randomseed(%(seed)d)
local picks = {%(picks)s}
local prefix = "%(prefix)s"
request = function()
  return wrk.format("GET", prefix .. string.format("%%010d", picks[math.random(#picks)]))
end
"""
    + LUA_DONE
)


@dataclass
class Run:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    non2xx: int
    cpu_us: float  # the node's CPU time per request
    steal: float  # share of the machine's CPU time the hypervisor took during the run


@dataclass(frozen=True)
class Subject:
    name: str
    prefix: str  # the path; random keys' digits are appended unless keys == 0
    keys: int
    # Only these key numbers (of 0..keys-1), e.g. the keys of the partitions a node owns.
    picks: tuple[int, ...] = ()


def wrk(subject: Subject, port: int, duration: int, pid: int, workdir: Path) -> Run:
    script = workdir / f"{subject.name}.lua"
    template = LUA_PICKS if subject.picks else LUA
    picks = ",".join(map(str, subject.picks))
    script.write_text(
        template % {"seed": 42, "keys": subject.keys, "prefix": subject.prefix, "picks": picks}
    )
    cmd = ["wrk", "-t1", f"-c{CONNECTIONS}", "-s", str(script), f"http://127.0.0.1:{port}"]
    subprocess.run([*cmd, "-d1s"], capture_output=True, check=True)  # warm-up
    cpu0 = cpu_seconds([pid])
    total0, stolen0 = machine_times()
    out = subprocess.run(
        [*cmd, f"-d{duration}s"], capture_output=True, text=True, check=True
    ).stdout
    cpu = cpu_seconds([pid]) - cpu0
    total1, stolen1 = machine_times()
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    raw = json.loads(line[len("RESULT ") :])
    requests = max(int(raw["requests"]), 1)
    return Run(
        raw["requests"] / (raw["duration_us"] / 1e6),
        raw["p50_us"] / 1000,
        raw["p99_us"] / 1000,
        raw["errors"],
        raw["non2xx"],
        cpu / requests * 1e6,
        (stolen1 - stolen0) / max(total1 - total0, 1),
    )


def lookups(
    node: NodeProcess, n: int, duration: int, rounds: int, workdir: Path
) -> dict[str, list[Run]]:
    assert node.pid is not None
    subjects = [
        Subject(TABLE, f"/v1/tables/{TABLE}/keys/user-", n),
        Subject(TINY_TABLE, f"/v1/tables/{TINY_TABLE}/keys/user-", TINY_KEYS),
        Subject("healthz", "/healthz", 0),
    ]
    runs: dict[str, list[Run]] = {s.name: [] for s in subjects}
    for r in range(rounds):
        for s in subjects:
            run = wrk(s, node.port, duration, node.pid, workdir)
            runs[s.name].append(run)
            print(
                f"  round {r + 1}/{rounds} {s.name:8s} {run.rps:>9,.0f} req/s"
                f"  p50 {run.p50_ms:.2f} ms  p99 {run.p99_ms:.2f} ms  steal {run.steal:.0%}"
                + (
                    f"  ERRORS {run.errors} non-2xx {run.non2xx}"
                    if run.errors or run.non2xx
                    else ""
                ),
                flush=True,
            )
    return runs


# -- one size --------------------------------------------------------------------------------


@dataclass
class Result:
    keys: int
    produce_rps: float
    produce_s: float
    broker_rss_mb: float
    restore: Restore
    state_mb: float  # the big table's stores when the node turned ready
    state_mb_after: float  # the same after the lookups (background compactions)
    rss_restore: tuple[float, float]  # (VmRSS, VmHWM) MB when ready
    rss_lookups: tuple[float, float]  # after the lookups
    runs: dict[str, list[Run]]
    lookups_s: float
    total_s: float
    wrong: list[str] = field(default_factory=list)


def run_size(n: int, args: argparse.Namespace, work: Path) -> Result:
    started = time.perf_counter()
    base = work / f"n{n}"
    base.mkdir()
    with make_broker(args.broker) as broker:
        assert broker.pid is not None
        bootstrap = broker.bootstrap_servers
        app = f"scale{n}"
        tables = [
            TableDef(TABLE, f"{app}-{TABLE}", args.partitions, Format.STRING, Format.JSON),
            TableDef(
                TINY_TABLE, f"{app}-{TINY_TABLE}", args.partitions, Format.STRING, Format.JSON
            ),
        ]
        for t in tables:
            create_topic(bootstrap, t.topic, t.partitions)
        print(f"producing {n:,} records to {args.partitions} partitions ...", flush=True)
        t0 = time.perf_counter()
        rate = produce(bootstrap, tables[0].topic, args.partitions, n, args.compression)
        produce_s = time.perf_counter() - t0
        produce(
            bootstrap, tables[1].topic, args.partitions, TINY_KEYS, args.compression, quiet=True
        )
        broker_rss, _ = memory_mb(broker.pid)
        print(
            f"  produced {n:,} records in {produce_s:.1f} s ({rate:,.0f} records/s);"
            f" broker RSS {broker_rss:,.0f} MB",
            flush=True,
        )
        for t in tables:
            register_table(bootstrap, t, app=app)
        node = NodeProcess(
            port=free_port(),
            state_dir=base / "state",
            bootstrap_servers=bootstrap,
            app=app,
            log_path=base / "node.log",
            extra_args=("--standby-replicas", "0"),
        )
        try:
            total = n + TINY_KEYS
            print(f"restoring {total:,} records into one node ...", flush=True)
            rst = restore(node, broker.pid, total, args.restore_timeout)
            assert node.pid is not None
            rss_restore = memory_mb(node.pid)
            state_mb = dir_bytes(base / "state" / TABLE) / MB
            print(
                f"  ready after {rst.seconds:.1f} s ({total / rst.seconds:,.0f} records/s);"
                f" state {state_mb:,.0f} MB; node RSS {rss_restore[0]:,.0f} MB"
                f" (peak {rss_restore[1]:,.0f} MB)",
                flush=True,
            )
            wrong: list[str] = []
            if rst.applied != total:
                wrong.append(f"the node applied {rst.applied:,} records, not {total:,}")
            wrong += check_values(node, n, CHECKED_KEYS)
            for w in wrong:
                print(f"  CHECK FAILED: {w}", flush=True)
            print(
                f"lookups: wrk -t1 -c{CONNECTIONS}, {args.duration} s per run,"
                f" {args.rounds} rounds ...",
                flush=True,
            )
            t1 = time.perf_counter()
            runs = lookups(node, n, args.duration, args.rounds, base)
            lookups_s = time.perf_counter() - t1
            rss_lookups = memory_mb(node.pid)
            state_mb_after = dir_bytes(base / "state" / TABLE) / MB
        finally:
            node.stop()
    return Result(
        n,
        rate,
        produce_s,
        broker_rss,
        rst,
        state_mb,
        state_mb_after,
        rss_restore,
        rss_lookups,
        runs,
        lookups_s,
        time.perf_counter() - started,
        wrong,
    )


# -- report ----------------------------------------------------------------------------------


def med(runs: list[Run], attr: Callable[[Run], float]) -> float:
    return median(attr(r) for r in runs)


def report(results: list[Result], args: argparse.Namespace, load: tuple[float, ...]) -> None:
    print(
        f"\n{os.cpu_count()} cores; {args.partitions} partitions; keys of 15 B, JSON values of"
        f" ~{len(value_of(5_000_000))} B; compression {args.compression}; wrk -t1"
        f" -c{CONNECTIONS}, {args.duration} s x {args.rounds} rounds (medians); reference:"
        f" the same node's tiny table of {TINY_KEYS:,} keys; load average at start"
        f" {', '.join(f'{x:.2f}' for x in load)}\n"
    )
    head = (
        "| keys | restore rec/s | state MB | lookups/s | p50 ms | p99 ms | reference lookups/s"
        " | RSS MB after restore | RSS MB after lookups |"
    )
    print(head)
    print("|" + "---|" * 9)
    for r in results:
        big, tiny = r.runs[TABLE], r.runs[TINY_TABLE]
        total = r.keys + TINY_KEYS
        print(
            f"| {r.keys:,} | {total / r.restore.seconds:,.0f} | {r.state_mb:,.1f}"
            f" | {med(big, lambda x: x.rps):,.0f} | {med(big, lambda x: x.p50_ms):.2f}"
            f" | {med(big, lambda x: x.p99_ms):.2f} | {med(tiny, lambda x: x.rps):,.0f}"
            f" | {r.rss_restore[0]:,.0f} | {r.rss_lookups[0]:,.0f} |"
        )
    for r in results:
        big, tiny, hz = r.runs[TABLE], r.runs[TINY_TABLE], r.runs["healthz"]
        rst = r.restore
        total = r.keys + TINY_KEYS
        window = rst.seconds - rst.first_record_s
        from_first = (
            f"{total / window:,.0f} records/s from the first record"
            if window >= 1.0
            else "too short from the first record to time"
        )
        cpu = rst.node_cpu
        by_thread = sorted(
            ((k, v) for k, v in cpu.items() if k != "(whole process)" and v >= 0.05),
            key=lambda kv: -kv[1],
        )
        ratios = [b.rps / t.rps for b, t in zip(big, tiny, strict=True)]
        print(f"\n{r.keys:,} keys: {r.total_s:.0f} s in all")
        print(
            f"  produce: {r.produce_s:.1f} s, {r.produce_rps:,.0f} records/s;"
            f" broker RSS after it {r.broker_rss_mb:,.0f} MB"
        )
        print(
            f"  restore: ready {rst.seconds:.1f} s after the spawn (HTTP up at {rst.up_s:.1f} s,"
            f" first record applied by {rst.first_record_s:.1f} s);"
            f" {from_first}; {rst.applied:,} records applied"
        )
        print(
            f"  restore CPU: node {cpu['(whole process)']:.1f} s from the spawn,"
            f" {rst.node_cpu_first_s:.1f} s from the first record"
            f" ({rst.node_cpu_first_s / total * 1e6:.2f} us/record); broker"
            f" {rst.broker_cpu_s:.1f} s; node by thread: "
            + ", ".join(f"{k} {v:.1f}" for k, v in by_thread)
        )
        print(
            f"  state: {r.state_mb:,.1f} MB at ready ({r.state_mb * MB / r.keys:.0f} B/key),"
            f" {r.state_mb_after:,.1f} MB after the lookups"
        )
        print(
            f"  memory: RSS {r.rss_restore[0]:,.0f} MB (peak {r.rss_restore[1]:,.0f}) at ready,"
            f" {r.rss_lookups[0]:,.0f} MB (peak {r.rss_lookups[1]:,.0f}) after the lookups"
        )
        print(
            f"  lookups: {r.lookups_s:.0f} s; big/tiny per round {_list(ratios)}, median"
            f" {median(ratios):.2f}; tiny p50/p99 {med(tiny, lambda x: x.p50_ms):.2f}/"
            f"{med(tiny, lambda x: x.p99_ms):.2f} ms; /healthz {med(hz, lambda x: x.rps):,.0f}"
            f" req/s"
        )
        print(
            f"  node CPU per request (us): big {med(big, lambda x: x.cpu_us):.1f}, tiny"
            f" {med(tiny, lambda x: x.cpu_us):.1f}, healthz {med(hz, lambda x: x.cpu_us):.1f};"
            f" steal during the big runs {_list([x.steal for x in big], pct=True)}"
        )
        errors = sum(x.errors + x.non2xx for runs in r.runs.values() for x in runs)
        if errors or r.wrong:
            print(f"  PROBLEMS: {errors} wrk errors/non-2xx; checks: {r.wrong[:5]}")


def _list(values: list[float], *, pct: bool = False) -> str:
    return ", ".join(f"{v:.0%}" if pct else f"{v:.2f}" for v in values)


def require_wrk() -> None:
    """wrk on PATH: installed with apt-get when missing and running as root, else an exit."""
    if shutil.which("wrk") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing wrk with apt-get ...", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=False)
    if shutil.which("wrk") is None:
        raise SystemExit("bench_scale needs wrk on PATH: apt-get install -y wrk")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--keys", default="100000,1000000", help="table sizes, comma-separated (10000000: 10M)"
    )
    parser.add_argument("--partitions", type=int, default=6, help="of every changelog")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="wrk runs of each subject")
    parser.add_argument(
        "--compression", default="none", choices=["none", "lz4", "snappy", "zstd", "gzip"]
    )
    parser.add_argument(
        "--restore-timeout", type=float, default=3600, help="seconds to wait for the node"
    )
    parser.add_argument(
        "--broker",
        choices=["kafka", "dev"],
        default="kafka",
        help="Apache Kafka (KRaft, one node; the default) or the dev broker",
    )
    args = parser.parse_args()
    sizes = [int(x.replace("_", "")) for x in args.keys.split(",") if x]
    if not sizes or min(sizes) < CHECKED_KEYS or args.duration < 1 or args.rounds < 1:
        parser.error(f"--keys must be >= {CHECKED_KEYS}; --duration and --rounds >= 1")
    require_wrk()
    load = os.getloadavg()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-scale-") as tmp:
        for n in sizes:
            print(f"\n== {n:,} keys ==", flush=True)
            results.append(run_size(n, args, Path(tmp)))
            print(f"  {n:,} keys took {results[-1].total_s:.0f} s", flush=True)
    report(results, args, load)


if __name__ == "__main__":
    main()
