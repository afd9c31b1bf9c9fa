"""Table kinds on a serving node: global lookups, lookups while windows expire, and the size
of a windowed table's stores over a long run, each against a reference measured in the run.

Setup, without Spark (the catalog and the changelog topics are written directly, as
tests/e2e/test_global.py and tests/e2e/test_retention.py do): a broker (Apache Kafka;
`--broker dev`: the dev broker) and two `sparkiq serve` nodes A and B
(`sparkiq.dev.localcluster.LocalCluster`, no standbys), with these tables of `--partitions`
partitions:

- `kv` (kind kv) and `global` (kind global): the same `--keys` records, bench_scale's
  (15-byte keys, ~95-byte JSON values, murmur2-placed). Each node holds half of `kv` and
  the whole of `global`;
- `expiring` (windowed, `--window-s` windows kept `--retention-s`) and `kept` (the same
  without a retention), for 2; `retained` and `unretained`, the same pair, for 3.

A thread of this script feeds windowed tables: `--ticks` times a second, one new window for
each of `--window-keys` keys, one window after the table's previous one. Expiry runs on the
data's time (the newest window start seen in a partition: src/sparkiq/node/restore/expiry.py),
so the data's time runs `--window-s` x `--ticks` times faster than the clock and a retention
of data time passes in a few seconds. Lookups are wrk -t1 -c32 on node A (bench_scale's
runs: `--duration` s after a 1 s warm-up), `--rounds` rounds, the order alternating:

1. **Global lookups at the local rate.** GET /v1/tables/global/keys/{key} of random keys
   of the whole table (about half of them in partitions whose map active is B, answered
   from A's own copy), against GET /v1/tables/kv/keys/{key} of random keys of the `kv`
   partitions A owns as active (the reference: the same node and sizes, local reads).
   Ratio global/kv of req/s, p99 and CPU per request, per round; goal: median within noise
   of 1.0. A's forwarded requests are counted (they should stay 0).
2. **Lookups while windows expire.** The kv reference lookups while `expiring` is fed (each
   run starts once A's `sparkiq_windows_expired_total` moves, and says how many windows A
   removed during it), against the same lookups while `kept` is fed identically (no
   retention: nothing swept or removed). Ratios expiring/kept of req/s and p99 per round;
   goal: medians within noise of 1.0 (the reference's spread between rounds is printed as
   the noise; so are the idle kv runs of 1, for what feeding costs at all).
3. **The stores' size over a long run.** `retained` and `unretained` fed identically for
   `--size-s` s, many retentions of data time. Every `--sample-every` s, per table: the
   windows held by the stores of both nodes (their keys, counted in the stores opened
   read-only) and their bytes on disk, SST files and write-ahead log apart; the windows the
   nodes removed so far. At the end the same after the nodes stop (a store flushes when it
   closes) and after a full compaction of every store. Goal: the retained table's windows
   level off (near keys x (retention / window + 1)) while the other table's keep growing.

Prints the load average at the start and end of each part and the steal of every run (the
share of the machine's CPU time the hypervisor gave to other guests).

    .venv/bin/python benchmarks/bench_tablekinds.py [--keys 100000] [--duration 5]
        [--rounds 5] [--window-keys 1000] [--ticks 2] [--window-s 10] [--retention-s 120]
        [--size-s 300] [--sample-every 30]

Requires `wrk` (installed with apt-get when missing and running as root). Every process it
starts (broker, nodes, wrk) is stopped by PID; its files live in a temporary directory that
is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import httpx
from confluent_kafka import Producer
from rocksdict import AccessType, BottommostLevelCompaction, CompactOptions, Options, Rdict

from sparkiq.core.partitioner import partition_for
from sparkiq.core.serde import window_wire_key
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.dev.broker import make_broker
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_http  # noqa: E402  (sibling scripts, not a package: wrk's install)
import bench_scale  # noqa: E402  (its records, wrk runs, /proc and /metrics readers)

KV, GLOBAL = "kv", "global"
EXPIRING, KEPT = "expiring", "kept"  # part 2
RETAINED, UNRETAINED = "retained", "unretained"  # part 3
KEY_PATH = "/v1/tables/%s/keys/user-"  # + bench_scale's 10 digits
EXPIRED = "sparkiq_windows_expired_total"
APPLIED = "sparkiq_restore_records_total"
BASE_MS = 1_790_000_000_000  # data time of every windowed table's first window
NODE_ENV = {"SPARKIQ_STANDBY_REPLICAS": "0"}
MB = bench_scale.MB
API_CHECKED_KEYS = 10  # keys of `retained` whose windows are read through the API at the end


# -- feeding windowed tables -------------------------------------------------------------------


def window_key(i: int) -> bytes:
    return b"w-%05d" % i


class Feed:
    """Feeds windowed tables from a thread: every tick one new window per key, the window
    after the table's previous one, so each table's data time advances a window a tick."""

    def __init__(self, bootstrap: str, keys: int, partitions: int, ticks_per_s: float) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "acks": 1,
                "log.connection.close": False,  # the broker stops before this process ends
            }
        )
        # Placed by the window's key alone (murmur2, as sparkiq's sinks): all of a key's
        # windows in one partition.
        self.keys = [(window_key(i), partition_for(window_key(i), partitions)) for i in range(keys)]
        self.interval_s = 1 / ticks_per_s
        self.ticks: dict[str, int] = {}  # table -> windows fed per key (its data time)
        self.records = 0
        self.late_ticks = 0  # ticks that began more than a tick late (the feed fell behind)

    def tick(self, tables: Sequence[TableDef]) -> None:
        produce = self.producer.produce
        for table in tables:
            assert table.window_size_ms is not None
            n = self.ticks.get(table.name, 0)
            start = BASE_MS + n * table.window_size_ms
            for i, (key, partition) in enumerate(self.keys):
                value = b'{"window":%d,"store":%d,"sales":%d.%02d}' % (n, i, n * 7 + i, i % 100)
                while True:
                    try:
                        produce(table.topic, value, window_wire_key(key, start), partition)
                        break
                    except BufferError:
                        self.producer.poll(0.01)
            self.ticks[table.name] = n + 1
            self.records += len(self.keys)
        self.producer.poll(0)

    def flush(self) -> None:
        left = self.producer.flush(60)
        if left:
            raise SystemExit(f"the feed could not deliver {left} records")

    @contextmanager
    def feeding(self, tables: Sequence[TableDef]) -> Iterator[None]:
        """Feed `tables` from a thread until the block ends."""
        stop = threading.Event()
        thread = threading.Thread(target=self._run, args=(tables, stop), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.flush()

    def _run(self, tables: Sequence[TableDef], stop: threading.Event) -> None:
        due = time.monotonic()
        while not stop.is_set():
            self.tick(tables)
            due += self.interval_s
            wait = due - time.monotonic()
            if wait < -self.interval_s:
                self.late_ticks += 1
            stop.wait(max(wait, 0.0))


# -- the cluster -------------------------------------------------------------------------------


def table_defs(app: str, partitions: int, window_ms: int, retention_ms: int) -> list[TableDef]:
    def windowed(name: str, retention: int | None) -> TableDef:
        return TableDef(
            name,
            f"{app}-{name}",
            partitions,
            kind=TableKind.WINDOWED,
            window_size_ms=window_ms,
            retention_ms=retention,
        )

    return [
        TableDef(KV, f"{app}-{KV}", partitions),
        TableDef(GLOBAL, f"{app}-{GLOBAL}", partitions, kind=TableKind.GLOBAL),
        windowed(EXPIRING, retention_ms),
        windowed(KEPT, None),
        windowed(RETAINED, retention_ms),
        windowed(UNRETAINED, None),
    ]


def metadata(node: NodeProcess) -> dict[str, Any]:
    meta: dict[str, Any] = node.http_get("/v1/metadata", 5.0).json()
    return meta


def held(node: NodeProcess, table: str) -> list[int]:
    """The partitions of `table` the node holds now (its state dir may hold older ones)."""
    return sorted(r["partition"] for r in metadata(node)["local"] if r["table"] == table)


def counter(node: NodeProcess, name: str) -> float:
    return bench_scale.metric(node, name) or 0.0


def forwarded(node: NodeProcess) -> float:
    """Requests the node answered by passing on another node's answer, since it started."""
    total = 0.0
    for line in node.http_get("/metrics", 5.0).text.splitlines():
        if line.startswith("sparkiq_requests_total{") and 'outcome="forwarded"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def owned_keys(node: NodeProcess, table: TableDef, keys: int) -> tuple[int, ...]:
    """Numbers of the keys of `table` whose partition the node owns as the map's active."""
    mine = {
        p["partition"]
        for p in metadata(node)["partitions"]
        if p["table"] == table.name and p["active"] == node.url
    }
    if not mine:
        raise SystemExit(f"{node.url} is the active of no partition of {table.name}")
    return tuple(i for i in range(keys) if table.partition_of(bench_scale.key_of(i)) in mine)


def check_global(node: NodeProcess, table: TableDef, keys: int) -> str:
    """Every partition of the global table is active on the node, and a key whose
    partition's map active is another node is answered by this one."""
    meta = metadata(node)
    states = {r["partition"]: r["state"] for r in meta["local"] if r["table"] == table.name}
    if states != dict.fromkeys(range(table.partitions), "active"):
        raise SystemExit(f"{node.url} does not hold every partition of {table.name}: {states}")
    others = {
        p["partition"]: p["active"]
        for p in meta["partitions"]
        if p["table"] == table.name and p["active"] != node.url
    }
    i = next((i for i in range(keys) if table.partition_of(bench_scale.key_of(i)) in others), 0)
    key = bench_scale.key_of(i).decode()
    answer = node.http_get(f"/v1/tables/{table.name}/keys/{key}", 5.0).json()
    if answer.get("node") != node.url:
        raise SystemExit(f"{node.url} did not answer {key} of {table.name} itself: {answer}")
    partition = table.partition_of(key.encode())
    return (
        f"{table.name}: every partition active on A; {key} (partition {partition}, map active"
        f" {others.get(partition or 0, 'A')}) answered by A itself"
    )


# -- parts 1 and 2: lookups ------------------------------------------------------------------


@dataclass
class Measured:
    run: bench_scale.Run
    removed_per_s: float  # windows node A removed during the run (warm-up included)
    applied_per_s: float  # changelog records node A applied meanwhile
    forwarded: float  # requests node A forwarded meanwhile


def measure(node: NodeProcess, subject: bench_scale.Subject, duration: int, work: Path) -> Measured:
    assert node.pid is not None
    removed, applied, fwd = counter(node, EXPIRED), counter(node, APPLIED), forwarded(node)
    t0 = time.monotonic()
    run = bench_scale.wrk(subject, node.port, duration, node.pid, work)
    seconds = time.monotonic() - t0
    return Measured(
        run,
        (counter(node, EXPIRED) - removed) / seconds,
        (counter(node, APPLIED) - applied) / seconds,
        forwarded(node) - fwd,
    )


def wait_for_expiry(node: NodeProcess, warm_s: float, timeout_s: float = 60.0) -> float:
    """Wait until the node removes windows again, then `warm_s` for the first pass's backlog;
    the seconds waited for the first removal."""
    t0 = time.monotonic()
    before = counter(node, EXPIRED)
    while counter(node, EXPIRED) == before:
        if time.monotonic() - t0 > timeout_s:
            print(f"  WARNING: no window removed in {timeout_s:.0f} s of feeding", flush=True)
            return timeout_s
        time.sleep(0.25)
    waited = time.monotonic() - t0
    time.sleep(warm_s)
    return waited


def wait_expiry_idle(node: NodeProcess, quiet_s: float = 2.5, timeout_s: float = 30.0) -> None:
    """After an expiring table's feed stops, until the node's sweeps have removed what its
    last windows expired (the counter still for `quiet_s`), so the next run is not swept."""
    t0 = still = time.monotonic()
    last = counter(node, EXPIRED)
    while time.monotonic() - still < quiet_s and time.monotonic() - t0 < timeout_s:
        time.sleep(0.5)
        now = counter(node, EXPIRED)
        if now != last:
            last, still = now, time.monotonic()


def lookups(
    a: NodeProcess, feed: Feed, tables: dict[str, TableDef], args: argparse.Namespace, work: Path
) -> list[dict[str, Measured]]:
    kv = bench_scale.Subject(
        "kv-own", KEY_PATH % KV, args.keys, owned_keys(a, tables[KV], args.keys)
    )
    every = bench_scale.Subject("global-all", KEY_PATH % GLOBAL, args.keys)
    print(
        f"  A owns {len(kv.picks):,} of the {args.keys:,} kv keys as active;"
        f" {check_global(a, tables[GLOBAL], args.keys)}",
        flush=True,
    )
    rounds: list[dict[str, Measured]] = []
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds} (load average {_load()}) ...", flush=True)
        out: dict[str, Measured] = {}
        idle = [(KV, kv), (GLOBAL, every)]
        fed = [KEPT, EXPIRING]
        if r % 2:
            idle.reverse()
            fed.reverse()
        for name, subject in idle:
            out[name] = measure(a, subject, args.duration, work)
            _show(name, out[name])
        for name in fed:
            with feed.feeding([tables[name]]):
                time.sleep(args.warm_s)
                if name == EXPIRING:
                    waited = wait_for_expiry(a, args.warm_s)
                    print(f"  {name}: first removal after {waited:.1f} s of feeding", flush=True)
                out[name] = measure(a, kv, args.duration, work)
            _show(f"kv, {name} fed", out[name])
            if name == EXPIRING:
                wait_expiry_idle(a)
        rounds.append(out)
    return rounds


def _show(name: str, m: Measured) -> None:
    r = m.run
    print(
        f"  {name:<20} {r.rps:>9,.0f} req/s  p50 {r.p50_ms:.2f} ms  p99 {r.p99_ms:.2f} ms"
        f"  {r.cpu_us:.1f} us/req  steal {r.steal:.0%}  removed {m.removed_per_s:,.0f}/s"
        f"  applied {m.applied_per_s:,.0f}/s"
        + (f"  ERRORS {r.errors} non-2xx {r.non2xx}" if r.errors or r.non2xx else ""),
        flush=True,
    )


# -- part 3: the stores' size ----------------------------------------------------------------


@dataclass
class Size:
    windows: int  # keys in the stores
    sst: int  # bytes of SST files
    wal: int  # bytes of write-ahead log files
    other: int  # bytes of every other file (MANIFEST, LOG, OPTIONS ...)

    def __add__(self, other: Size) -> Size:
        return Size(
            self.windows + other.windows,
            self.sst + other.sst,
            self.wal + other.wal,
            self.other + other.other,
        )

    @property
    def disk_mb(self) -> float:
        return (self.sst + self.wal + self.other) / MB


def count_keys(path: Path) -> int:
    """Keys of a live store, read through a read-only instance (which replays the WAL)."""
    failure: Exception | None = None
    for _ in range(5):
        try:
            db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
        except Exception as exc:  # a file compacted away while it opened: open again
            failure = exc
            time.sleep(0.2)
            continue
        try:
            # An Rdict is no iterable: `for _ in db` would index it with integers.
            return sum(1 for _ in db.keys())  # noqa: SIM118
        finally:
            db.close()
    raise SystemExit(f"cannot open {path} read-only: {failure}")


def store_size(path: Path) -> Size:
    size = Size(count_keys(path), 0, 0, 0)
    for f in path.iterdir():
        try:
            n = f.stat().st_size
        except FileNotFoundError:  # RocksDB removed it meanwhile
            continue
        if f.suffix == ".sst":
            size.sst += n
        elif f.suffix == ".log":
            size.wal += n
        else:
            size.other += n
    return size


def table_size(stores: dict[Path, list[int]], table: str) -> Size:
    """Windows and bytes of `table` in the stores of every node (state dir -> partitions)."""
    total = Size(0, 0, 0, 0)
    for state_dir, partitions in stores.items():
        for p in partitions:
            total += store_size(state_dir / table / str(p))
    return total


def compact(stores: dict[Path, list[int]], table: str) -> None:
    """A full compaction of each (closed) store of `table`, down to the last level."""
    options = CompactOptions()
    options.set_bottommost_level_compaction(BottommostLevelCompaction.force())
    for state_dir, partitions in stores.items():
        for p in partitions:
            db = Rdict(str(state_dir / table / str(p)), Options(raw_mode=True))
            try:
                db.compact_range(None, None, options)
            finally:
                db.close()


@dataclass
class Sample:
    seconds: float  # since the feed started
    ticks: int  # windows fed per key to each table
    sizes: dict[str, Size]
    removed: float  # windows both nodes removed since the feed started
    rss_mb: float  # both nodes' resident memory
    took_s: float  # to take this sample (counting the windows, mostly)


def size_run(
    cluster: LocalCluster, feed: Feed, tables: dict[str, TableDef], args: argparse.Namespace
) -> tuple[list[Sample], dict[str, Size], dict[str, Size], list[int]]:
    """Samples while the two tables are fed, then their sizes after the nodes stop and after
    a compaction, and the windows per key the API answers for `retained`."""
    nodes = list(cluster.nodes)
    pids = [n.pid for n in nodes if n.pid is not None]
    names = (RETAINED, UNRETAINED)

    def stores() -> dict[str, dict[Path, list[int]]]:
        return {name: {n.state_dir: held(n, name) for n in nodes} for name in names}

    def sample(t0: float, removed0: float) -> Sample:
        began = time.monotonic()
        sizes = {name: table_size(where, name) for name, where in stores().items()}
        removed = sum(counter(n, EXPIRED) for n in nodes) - removed0
        rss = sum(bench_scale.memory_mb(pid)[0] for pid in pids)
        took = time.monotonic() - began
        return Sample(began - t0, feed.ticks[RETAINED], sizes, removed, rss, took)

    samples: list[Sample] = []
    removed0 = sum(counter(n, EXPIRED) for n in nodes)
    t0 = time.monotonic()
    with feed.feeding([tables[RETAINED], tables[UNRETAINED]]):
        while True:
            s = sample(t0, removed0)
            samples.append(s)
            _show_sample(s, args)
            left = args.size_s - (time.monotonic() - t0)
            if left <= 0:
                break
            time.sleep(min(args.sample_every, left))
    time.sleep(3.0)  # the last records applied, a last pass of the sweeps
    samples.append(sample(t0, removed0))
    _show_sample(samples[-1], args)
    answered = []
    with httpx.Client(base_url=nodes[0].url, timeout=10.0) as http:
        for i in range(0, args.window_keys, max(args.window_keys // API_CHECKED_KEYS, 1)):
            path = f"/v1/tables/{RETAINED}/keys/{window_key(i).decode()}/windows"
            answered.append(len(http.get(path).json()["items"]))
    where = stores()
    cluster.stop()  # by PID; every store flushes as it closes
    stopped = {name: table_size(where[name], name) for name in names}
    for name in names:
        compact(where[name], name)
    compacted = {name: table_size(where[name], name) for name in names}
    return samples, stopped, compacted, answered


def _show_sample(s: Sample, args: argparse.Namespace) -> None:
    r, u = s.sizes[RETAINED], s.sizes[UNRETAINED]
    print(
        f"  {s.seconds:>5.0f} s  {s.ticks:>5} windows per key fed"
        f" ({s.ticks * args.window_s / args.retention_s:,.0f} retentions)  retained"
        f" {r.windows:>9,} windows {r.disk_mb:>7.1f} MB  unretained {u.windows:>9,} windows"
        f" {u.disk_mb:>7.1f} MB  removed {s.removed:>9,.0f}  nodes RSS {s.rss_mb:,.0f} MB"
        f"  (sampled in {s.took_s:.1f} s)",
        flush=True,
    )


# -- the run ---------------------------------------------------------------------------------


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run(args: argparse.Namespace, work: Path) -> None:
    started = time.monotonic()
    window_ms, retention_ms = args.window_s * 1000, args.retention_s * 1000
    with make_broker(args.broker) as broker:
        bootstrap = broker.bootstrap_servers
        app = f"kinds{int(time.time()) % 10**6}"
        tables = {t.name: t for t in table_defs(app, args.partitions, window_ms, retention_ms)}
        for t in tables.values():
            # Plain topics: a pipeline's windowed changelog also deletes by age, a day
            # after the retention, which removes nothing in a run of records stamped now.
            create_topic(bootstrap, t.topic, t.partitions)
        print(f"producing {args.keys:,} records to kv and to global ...", flush=True)
        for name in (KV, GLOBAL):
            bench_scale.produce(bootstrap, tables[name].topic, args.partitions, args.keys, "none")
        for t in tables.values():
            register_table(bootstrap, t, app=app)
        feed = Feed(bootstrap, args.window_keys, args.partitions, args.ticks)
        # A first window of each windowed table: every partition has a record to restore.
        feed.tick([t for t in tables.values() if t.is_windowed])
        feed.flush()
        with LocalCluster(bootstrap, work, nodes=2, app=app, env=NODE_ENV) as cluster:
            cluster.wait_settled(timeout_s=300)
            a = cluster.nodes[0]
            print(f"two nodes ready after {time.monotonic() - started:.0f} s", flush=True)
            print(f"\n== 1 and 2: lookups on A (load average {_load()}) ==", flush=True)
            rounds = lookups(a, feed, tables, args, work)
            load_lookups = _load()
            print(f"\n== 3: the stores' size (load average {_load()}) ==", flush=True)
            total0, stolen0 = bench_scale.machine_times()
            samples, stopped, compacted, answered = size_run(cluster, feed, tables, args)
            total1, stolen1 = bench_scale.machine_times()
            steal = (stolen1 - stolen0) / max(total1 - total0, 1)
    print(f"\nall done in {time.monotonic() - started:.0f} s; load average at the end {_load()}")
    report_lookups(rounds, args, load_lookups)
    report_size(samples, stopped, compacted, answered, feed, args, steal)


def report_lookups(rounds: list[dict[str, Measured]], args: argparse.Namespace, load: str) -> None:
    print(
        f"\n{os.cpu_count()} cores; wrk -t1 -c{bench_scale.CONNECTIONS} on node A, {args.duration}"
        f" s x {args.rounds} rounds; {args.keys:,} keys of 15 B, values ~95 B, {args.partitions}"
        f" partitions; feed {args.window_keys:,} windows x {args.ticks}/s; load average after:"
        f" {load}"
    )
    print(
        "\n| round | kv, A's keys (reference) | global, every key | global/kv req/s | p99"
        " | CPU/req | kv, kept fed | kv, expiring fed (removed/s) | expiring/kept req/s | p99 |"
    )
    print("|" + "---|" * 11)
    for n, r in enumerate(rounds, 1):
        kv, gl, kept, exp = r[KV].run, r[GLOBAL].run, r[KEPT].run, r[EXPIRING].run
        print(
            f"| {n} | {_cell(kv)} | {_cell(gl)} | {gl.rps / kv.rps:.2f}"
            f" | {gl.p99_ms / kv.p99_ms:.2f} | {gl.cpu_us / kv.cpu_us:.2f} | {_cell(kept)}"
            f" | {_cell(exp)}"
            f" ({r[EXPIRING].removed_per_s:,.0f}) | {exp.rps / kept.rps:.2f}"
            f" | {exp.p99_ms / kept.p99_ms:.2f} |"
        )

    def ratios(num: str, den: str, attr: str) -> list[float]:
        return [float(getattr(r[num].run, attr) / getattr(r[den].run, attr)) for r in rounds]

    def spread(name: str, attr: str) -> float:
        values = [float(getattr(r[name].run, attr)) for r in rounds]
        return (max(values) - min(values)) / median(values)

    fwd = sum(r[GLOBAL].forwarded for r in rounds)
    print()
    for label, num, den, ref in (
        ("1. global/kv", GLOBAL, KV, KV),
        ("2. expiring fed / kept fed", EXPIRING, KEPT, KEPT),
        ("   kept fed / idle kv (what feeding costs)", KEPT, KV, KV),
    ):
        rps, p99, cpu = (ratios(num, den, a) for a in ("rps", "p99_ms", "cpu_us"))
        print(
            f"{label}: req/s {_list(rps)} (median {median(rps):.2f}); p99 {_list(p99)} (median"
            f" {median(p99):.2f}); CPU per request median {median(cpu):.2f}; the reference's"
            f" spread between rounds: req/s {spread(ref, 'rps'):.0%},"
            f" p99 {spread(ref, 'p99_ms'):.0%}"
        )
    removed = [r[EXPIRING].removed_per_s for r in rounds]
    applied = [(r[EXPIRING].applied_per_s, r[KEPT].applied_per_s) for r in rounds]
    print(
        f"windows A removed per second while measured with expiring fed: {_list(removed, 0)};"
        f" records A applied per second, expiring / kept fed: "
        + ", ".join(f"{e:,.0f} / {k:,.0f}" for e, k in applied)
    )
    print(f"requests A forwarded during the global runs: {fwd:,.0f} (should be 0)")


def report_size(
    samples: list[Sample],
    stopped: dict[str, Size],
    compacted: dict[str, Size],
    answered: list[int],
    feed: Feed,
    args: argparse.Namespace,
    steal: float,
) -> None:
    per_key = args.retention_s // args.window_s + 1
    print(
        f"\n3. {args.window_keys:,} keys x {args.ticks} windows/s into each table, windows of"
        f" {args.window_s} s, retention {args.retention_s} s of data time (a retention every"
        f" {args.retention_s / args.window_s / args.ticks:.1f} s); {feed.late_ticks} ticks late;"
        f" steal {steal:.1%}"
    )
    print(
        "\n| seconds | windows fed per key | retentions | retained: windows | MB on disk (WAL)"
        " | unretained: windows | MB on disk (WAL) | windows removed |"
    )
    print("|" + "---|" * 8)
    for s in samples:
        r, u = s.sizes[RETAINED], s.sizes[UNRETAINED]
        after = " (3 s after the feed)" if s is samples[-1] else ""
        retentions = s.ticks * args.window_s / args.retention_s
        print(
            f"| {s.seconds:.0f}{after} | {s.ticks:,} | {retentions:,.0f}"
            f" | {r.windows:,} | {r.disk_mb:.1f} ({r.wal / MB:.1f}) | {u.windows:,}"
            f" | {u.disk_mb:.1f} ({u.wal / MB:.1f}) | {s.removed:,.0f} |"
        )
    for label, sizes in (("nodes stopped (flushed)", stopped), ("compacted", compacted)):
        r, u = sizes[RETAINED], sizes[UNRETAINED]
        print(
            f"| {label} | | | {r.windows:,} | {r.disk_mb:.1f} ({r.wal / MB:.1f}) | {u.windows:,}"
            f" | {u.disk_mb:.1f} ({u.wal / MB:.1f}) | |"
        )
    fed = samples[:-1]  # the last sample comes after the feed stopped
    last = fed[-1]
    half = min(fed, key=lambda s: abs(s.seconds - last.seconds / 2))
    later = [s.sizes[RETAINED].windows for s in fed if s.seconds >= half.seconds]
    print(
        f"\nwhile fed, windows at {last.seconds:.0f} s / at {half.seconds:.0f} s: retained"
        f" {last.sizes[RETAINED].windows / half.sizes[RETAINED].windows:.2f} ({min(later):,}-"
        f"{max(later):,} from {half.seconds:.0f} s on), unretained"
        f" {last.sizes[UNRETAINED].windows / half.sizes[UNRETAINED].windows:.2f};"
        f" retained windows per key after the feed"
        f" {samples[-1].sizes[RETAINED].windows / args.window_keys:.1f} (retention / window + 1 ="
        f" {per_key}); through the API, windows of {len(answered)} keys of retained:"
        f" {min(answered)}-{max(answered)}"
    )


def _cell(r: bench_scale.Run) -> str:
    return f"{r.rps:,.0f}, p99 {r.p99_ms:.2f} ms, {r.steal:.0%} steal"


def _list(values: list[float], digits: int = 2) -> str:
    return ", ".join(f"{v:,.{digits}f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--keys", type=int, default=100_000, help="records of kv and global")
    parser.add_argument("--partitions", type=int, default=4, help="of every table")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=5, help="of parts 1 and 2")
    parser.add_argument("--warm-s", type=float, default=3.0, help="feeding before a run")
    parser.add_argument("--window-keys", type=int, default=1_000, help="keys of windowed tables")
    parser.add_argument("--ticks", type=float, default=2.0, help="windows per key per second")
    parser.add_argument("--window-s", type=int, default=10, help="window size (data time)")
    parser.add_argument("--retention-s", type=int, default=120, help="retention (data time)")
    parser.add_argument("--size-s", type=float, default=300, help="seconds of part 3's feed")
    parser.add_argument("--sample-every", type=float, default=30, help="seconds, part 3")
    parser.add_argument(
        "--broker",
        choices=["kafka", "dev"],
        default="kafka",
        help="Apache Kafka (KRaft, one node; the default) or the dev broker",
    )
    args = parser.parse_args()
    if min(args.keys, args.duration, args.rounds, args.window_keys, args.partitions) < 1:
        parser.error("--keys, --duration, --rounds, --window-keys, --partitions must be >= 1")
    if args.partitions < 2:
        parser.error("--partitions must be >= 2: A and B each own some")
    bench_http.require_tools(("wrk",), "bench_tablekinds")
    print(f"{os.cpu_count()} cores; load average at the start {_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-tablekinds-") as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
