"""HTTP benchmark of the serving layer against its references, in one run.

Measures with wrk (-t1 -c32, random keys out of 100k) on 127.0.0.1:
  1. nginx returning a fixed JSON body             -- the machine's HTTP ceiling
  2. a minimal app, dict lookup (benchmarks/refapp.py) -- the Python floor of the stack the
     node's server is built on (uvloop, asyncio protocol, httptools)
  3. sparkiq, LOCAL lookups from RocksDB           -- PartitionStores of 100k keys
  4. sparkiq, FORWARDED lookups                    -- a second node whose placements point to 3
for each node variant asked for (`loop`: sparkiq's server on the node's loop; a suffix
`-jwt`: with a bearer token on every request; `-depthN`: forwarding pipelines at most N
requests per connection, 1 = none; `-console`: while it is measured, headless Chromium
keeps the console open on the owner node, four views refreshing: the cluster, the tables,
a page of the table and a key; needs Debian's chromium and playwright). Every server is
started once and measured `--rounds` times in turn: this machine's speed drifts within
minutes, so ratios are taken within a round and their median reported. It prints req/s,
p50/p99, the servers' CPU time and context switches per request (from /proc: CPU moves
less than req/s when other work shares the cores), the share of the machine's CPU time the
hypervisor stole during each run (/proc/stat: on a shared VM, the runs it hits are the slow
ones) and the ratios local/nginx and forwarded/local.

`--pin` runs every server (nginx, the reference app, both nodes) on the last CPU and wrk on
the others. Pinned, the CPU figures are steadier, but a pinned server cannot move away from
other work on its CPU, so its latency suffers on a shared machine; the default (unpinned) is
what a node gets unless its operator pins it.

Requires `wrk` and `nginx` on PATH (Debian: `apt-get install -y wrk nginx`); the script
installs them with apt-get when it runs as root and they are missing.

    .venv/bin/python benchmarks/bench_http.py [--duration 5] [--rounds 3]
        [--interfaces loop,loop-jwt,loop-depth1,loop-console] [--pin]

Every process it starts is stopped by PID. `serve-node` is the internal entry of a node
process (a sparkiq HTTP server over a StaticView), not for direct use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkiq.core.tables import TableDef
    from sparkiq.http.staticview import StaticView
    from sparkiq.node.stores.registry import StoreRegistry

HERE = Path(__file__).resolve().parent
PY = sys.executable
KEYS = 100_000
PARTITIONS = 4
CONNECTIONS = 32
# A run during which the hypervisor took less of the machine's CPU time than this is "calm".
CALM_STEAL = 0.02
# The minimal app (refapp.py) on the stack the loop server is built on.
LOOP_REF = "uvloop+httptools dict"
FIXED_BODY = '{"key":"k1","value":{"n":1},"partition":0}'
BENCH_SECRET = b"bench-secret-" * 4
# Command prefixes that pin the servers and wrk to CPUs (`--pin`); empty: not pinned.
SERVER_CPUS: list[str] = []
WRK_CPUS: list[str] = []


def pin(cpus: int) -> None:
    """Run servers on the last of `cpus` CPUs from now on, and wrk on the others."""
    if cpus < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    SERVER_CPUS[:] = ["taskset", "-c", str(cpus - 1)]
    WRK_CPUS[:] = ["taskset", "-c", "0" if cpus == 2 else f"0-{cpus - 2}"]


def bearer_header() -> list[str]:
    """wrk's -H option with a bearer token for every table, valid for an hour."""
    import jwt

    claims = {"sub": "bench", "tables": "*", "exp": int(time.time()) + 3600}
    return ["-H", f"Authorization: Bearer {jwt.encode(claims, BENCH_SECRET, algorithm='HS256')}"]


LUA = """
local prefix = "%(prefix)s"
local n = %(keys)d
math.randomseed(%(seed)d)
request = function()
  return wrk.format("GET", prefix .. math.random(0, n - 1))
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, ' ..
    '"errors": %%d, "non2xx": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""

NGINX_CONF = """
worker_processes 1;
master_process off;
daemon off;
pid %(dir)s/nginx.pid;
error_log %(dir)s/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %(dir)s/body;
  proxy_temp_path %(dir)s/proxy;
  fastcgi_temp_path %(dir)s/fastcgi;
  uwsgi_temp_path %(dir)s/uwsgi;
  scgi_temp_path %(dir)s/scgi;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:%(port)d;
    location / { default_type application/json; return 200 '%(body)s'; }
  }
}
"""


def table_def() -> TableDef:
    from sparkiq.core.tables import Format, TableDef

    return TableDef("bench", "bench-changelog", PARTITIONS, Format.STRING, Format.JSON)


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process {proc.args!r} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port} after {timeout}s ({proc.args!r})")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def require_tools(tools: tuple[str, ...] = ("wrk", "nginx"), script: str = "bench_http") -> None:
    """Debian packages `tools` (each named as its command) on PATH: installed with apt-get when
    missing and running as root, else a clear exit."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"installing {' '.join(missing)} with apt-get ...", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False)
        missing = [t for t in missing if shutil.which(t) is None]
    if missing:
        raise SystemExit(
            f"{script} needs {' and '.join(missing)} on PATH: apt-get install -y {' '.join(tools)}"
        )


# -- data ------------------------------------------------------------------------------------


def build_stores(state_dir: Path) -> None:
    """100k string keys k0..k99999 with small JSON values, in real PartitionStores."""
    from sparkiq.core.partitioner import partition_for
    from sparkiq.node.stores.registry import StoreRegistry

    table = table_def()
    per_partition: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(KEYS):
        key = f"k{i}".encode()
        value = json.dumps({"n": i, "name": f"user-{i}"}, separators=(",", ":")).encode()
        per_partition[partition_for(key, PARTITIONS)].append((key, value))
    registry = StoreRegistry(state_dir)
    for p, records in per_partition.items():
        registry.open(table, p).apply(records, next_offset=len(records))
    registry.close_all()


# -- a node process --------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeKind:
    """What an `--interfaces` entry asks for: `loop`, `loop-jwt`, `loop-depth1`, ..."""

    jwt: bool  # a bearer token on every request
    pipeline_depth: int | None  # forwards pipelined per connection; None: the default
    console: bool = False  # the console open on the owner while it is measured


def node_kind(name: str) -> NodeKind:
    base, *options = name.split("-")
    if base != "loop":
        raise SystemExit(f"unknown interface {base!r} in {name!r} (only loop)")
    depth: int | None = None
    for option in options:
        if option.startswith("depth") and option[len("depth") :].isdigit():
            depth = int(option[len("depth") :])
            if depth < 1:
                raise SystemExit(f"{option!r} in {name!r}: the depth must be >= 1")
        elif option not in ("jwt", "console"):
            raise SystemExit(
                f"unknown interface option {option!r} in {name!r} (jwt, depthN, console)"
            )
    return NodeKind("jwt" in options, depth, "console" in options)


# The console's views kept open by `-console`, each in a tab of its own.
CONSOLE_VIEWS = ("/ui/", "/ui/tables", "/ui/tables/bench?limit=100", "/ui/tables/bench/keys/k1")


@contextmanager
def console_open(port: int) -> Iterator[None]:
    """Headless Chromium with the console's views open on the node at `port`, refreshing."""
    sys.path.insert(0, str(HERE.parent))
    from tests.support import browser

    reason = browser.missing()
    if reason is not None:
        raise SystemExit(f"-console: {reason}")
    with browser.chromium() as chromium:
        context = chromium.new_context()
        for view in CONSOLE_VIEWS:
            page = context.new_page()
            page.goto(f"http://127.0.0.1:{port}{view}")
            try:
                page.locator("#status:has-text('updated')").wait_for(timeout=30_000)
            except Exception as exc:
                shown = page.locator("main").inner_text()[:500]
                raise SystemExit(f"-console: {view} did not show: {shown!r}") from exc
        yield
        context.close()


def _node_shaped() -> type[StaticView]:
    """A StaticView whose /v1/metadata has a node's shape (what the console reads)."""
    from sparkiq.http.staticview import StaticView

    class NodeShaped(StaticView):
        def metadata(self) -> dict[str, object]:
            partitions, local = [], []
            for table in self.tables():
                for p in range(table.partitions):
                    placement = self.placement((table.topic, p))
                    partitions.append(
                        {
                            "table": table.name,
                            "topic": table.topic,
                            "partition": p,
                            "active": placement.active,
                            "standbys": list(placement.standbys),
                            "warming": [],
                            "lags": {placement.active: 0},
                            "misplaced": 0,
                        }
                    )
                    found = self.local_active((table.topic, p))
                    if found is not None:
                        offset = found[1] or 0
                        local.append(
                            {
                                "table": table.name,
                                "partition": p,
                                "state": "active",
                                "position": offset,
                                "end": offset,
                                "lag": 0,
                                "misplaced": 0,
                                "fault": None,
                                "rebuilds": 0,
                            }
                        )
            actives = sorted({p["active"] for p in partitions if p["active"]})
            return {
                "node": self.url,
                "generation": 1,
                "ready": True,
                "restored_records": KEYS,
                "node_id": self.url,
                "refused": [],
                "tables": [self.table_summary(t) for t in self.tables()],
                "partitions": partitions,
                "nodes": [
                    {"url": u, "active": [], "standby": [], "warming": [], "lags": {}}
                    for u in actives
                ],
                "local": local,
            }

    return NodeShaped


def bench_view(
    url: str, state_dir: str, owner_url: str | None = None
) -> tuple[StaticView, StoreRegistry | None]:
    """The view of a bench node at `url`: the active of every partition, over the stores in
    `state_dir` (and their registry, to close), or with `owner_url` the node that is."""
    from sparkiq.node.stores.registry import StoreRegistry

    node_shaped = _node_shaped()
    table = table_def()
    view = node_shaped(url, [table])
    if owner_url is not None:
        for p in range(PARTITIONS):
            view.set_placement((table.topic, p), owner_url)
        return view, None
    registry = StoreRegistry(state_dir)
    for p in range(PARTITIONS):
        store = registry.open(table, p)
        view.set_placement((table.topic, p), url, store=store, offset=store.next_offset)
    return view, registry


async def run_node(port: int, owner_url: str | None, state_dir: str, interface: str) -> None:
    from sparkiq.http.app.server import HttpServer
    from sparkiq.http.settings import HttpSettings

    view, registry = bench_view(f"http://127.0.0.1:{port}", state_dir, owner_url)
    kind = node_kind(interface)
    settings = HttpSettings()
    if kind.pipeline_depth is not None:
        settings = HttpSettings(forward_pipeline_depth=kind.pipeline_depth)
    auth = None
    if kind.jwt:
        from sparkiq.auth import AuthConfig, ClusterCredential
        from sparkiq.auth.tokens import TokenVerifier

        auth = AuthConfig(
            tokens=TokenVerifier(secret=BENCH_SECRET), cluster=ClusterCredential(BENCH_SECRET)
        )
    server = HttpServer(view, "127.0.0.1", port, settings, auth=auth)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    loop.add_signal_handler(signal.SIGINT, stopped.set)
    await server.start()
    await stopped.wait()
    await server.stop()
    if registry is not None:
        registry.close_all()


# -- measuring -------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    non2xx: int
    cpu_us: float  # CPU time (user + system) of the measured server processes per request
    switches: float  # context switches (voluntary + involuntary) of their threads per request
    steal: float  # share of the machine's CPU time the hypervisor took during the run


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time so far of processes `pids` (all their threads)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def machine_times() -> tuple[int, int]:
    """All CPU time of the machine so far and the part of it stolen by the hypervisor (the
    time its virtual CPUs were ready to run but given to other guests), in clock ticks."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is in user already)
    return sum(fields[:8]), fields[7]


def switches(pids: list[int]) -> int:
    """Context switches so far of all threads of processes `pids`."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                status = (task / "status").read_text()
            except FileNotFoundError:  # the thread ended
                continue
            for line in status.splitlines():
                if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                    total += int(line.split()[-1])
    return total


def run_wrk(
    name: str,
    port: int,
    prefix: str,
    duration: int,
    workdir: Path,
    pids: list[int],
    headers: list[str] | None = None,
) -> Result:
    script = workdir / f"{name.replace(' ', '_')}.lua"
    script.write_text(LUA % {"prefix": prefix, "keys": KEYS, "seed": 42})
    url = f"http://127.0.0.1:{port}"
    # Warm-up: connections, the OS page cache of the stores, the forwarding pool.
    subprocess.run(
        [
            *WRK_CPUS,
            "wrk",
            "-t1",
            f"-c{CONNECTIONS}",
            "-d2s",
            *(headers or []),
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        check=True,
    )
    cpu_before = cpu_seconds(pids)
    switches_before = switches(pids)
    total_before, stolen_before = machine_times()
    out = subprocess.run(
        [
            *WRK_CPUS,
            "wrk",
            "-t1",
            f"-c{CONNECTIONS}",
            f"-d{duration}s",
            *(headers or []),
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cpu = cpu_seconds(pids) - cpu_before
    switched = switches(pids) - switches_before
    total_after, stolen_after = machine_times()
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    raw = json.loads(line[len("RESULT ") :])
    rps = raw["requests"] / (raw["duration_us"] / 1e6)
    return Result(
        name,
        rps,
        raw["p50_us"] / 1000,
        raw["p99_us"] / 1000,
        raw["errors"],
        raw["non2xx"],
        cpu / max(raw["requests"], 1) * 1e6,
        switched / max(raw["requests"], 1),
        (stolen_after - stolen_before) / max(total_after - total_before, 1),
    )


@dataclass
class Server:
    name: str  # the result's name
    port: int
    prefix: str  # path prefix of the random keys
    pids: list[int]  # whose CPU time counts
    headers: list[str] | None = None
    console_port: int | None = None  # the node to keep the console open on while measured


def bench(duration: int, interfaces: list[str], rounds: int) -> list[list[Result]]:
    """Start every server once, then measure each in turn, `rounds` times over.

    The machine's speed drifts within minutes (other tenants); measuring every server once
    per round and comparing within rounds keeps the ratios fair.
    """
    key_prefix = "/v1/tables/bench/keys/k"
    procs: list[subprocess.Popen[bytes]] = []
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-") as tmp:
        work = Path(tmp)
        state = work / "state"
        print("building 100k keys in RocksDB ...", flush=True)
        build_stores(state)
        try:
            port = free_port()
            (work / "nginx.conf").write_text(
                NGINX_CONF % {"dir": work, "port": port, "body": FIXED_BODY}
            )
            proc = subprocess.Popen(
                [*SERVER_CPUS, "nginx", "-p", str(work), "-c", str(work / "nginx.conf")]
            )
            procs.append(proc)
            wait_port(port, proc)
            servers.append(Server("nginx fixed body", port, key_prefix, [proc.pid]))

            port = free_port()
            proc = subprocess.Popen(
                [*SERVER_CPUS, PY, str(HERE / "refapp.py"), "--port", str(port)]
            )
            procs.append(proc)
            wait_port(port, proc)
            servers.append(Server(LOOP_REF, port, "/k/k", [proc.pid]))

            for interface in interfaces:
                owner_port, fwd_port = free_port(), free_port()
                # All owners run at once, and a store is open in one process only.
                own_state = work / f"state-{interface}"
                shutil.copytree(state, own_state)
                node = [
                    *SERVER_CPUS,
                    PY,
                    __file__,
                    "serve-node",
                    "--state-dir",
                    str(own_state),
                    "--interface",
                    interface,
                ]
                owner = subprocess.Popen([*node, "--port", str(owner_port)])
                procs.append(owner)
                forwarder = subprocess.Popen(
                    [*node, "--port", str(fwd_port), "--owner", f"http://127.0.0.1:{owner_port}"]
                )
                procs.append(forwarder)
                wait_port(owner_port, owner)
                wait_port(fwd_port, forwarder)
                kind = node_kind(interface)
                headers = bearer_header() if kind.jwt else None
                console = owner_port if kind.console else None
                servers.append(
                    Server(
                        f"sparkiq local {interface}",
                        owner_port,
                        key_prefix,
                        [owner.pid],
                        headers,
                        console,
                    )
                )
                # CPU of both nodes: the forwarder's work plus the owner's answer.
                servers.append(
                    Server(
                        f"sparkiq forwarded {interface}",
                        fwd_port,
                        key_prefix,
                        [forwarder.pid, owner.pid],
                        headers,
                        console,
                    )
                )
            out: list[list[Result]] = []
            for n in range(rounds):
                print(f"round {n + 1} of {rounds} ...", flush=True)
                results = []
                for s in servers:
                    port = s.console_port
                    with console_open(port) if port is not None else nullcontext():
                        results.append(
                            run_wrk(s.name, s.port, s.prefix, duration, work, s.pids, s.headers)
                        )
                out.append(results)
        finally:
            for proc in reversed(procs):
                stop(proc)
    return out


def report(rounds: list[list[Result]], load: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    print(f"\nwrk -t1 -c{CONNECTIONS}, random keys of {KEYS}, 127.0.0.1, {os.cpu_count()} cores")
    before, after = (", ".join(f"{x:.2f}" for x in avg) for avg in load)
    print(f"load average before: {before}; after: {after}")
    if SERVER_CPUS:
        print(f"servers pinned to CPU {SERVER_CPUS[-1]}, wrk to CPUs {WRK_CPUS[-1]}")
    for n, results in enumerate(rounds, 1):
        print(
            f"\nround {n}\n{'server':<28}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'CPU us/req':>12}{'cs/req':>8}{'steal':>7}{'errors':>8}{'non-2xx':>9}"
        )
        for r in results:
            print(
                f"{r.name:<28}{r.rps:>10,.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{r.cpu_us:>12.1f}"
                f"{r.switches:>8.2f}{r.steal:>7.0%}{r.errors:>8}{r.non2xx:>9}"
            )
    interfaces = [r.name.rsplit(" ", 1)[1] for r in rounds[0] if r.name.startswith("sparkiq local")]
    print()
    for interface in interfaces:
        local_nginx, fwd_local, p99s, local_ref = [], [], [], []
        steals: list[float] = []  # of the local runs
        fwd_steals: list[float] = []  # of the forwarded runs
        for results in rounds:
            by = {r.name: r for r in results}
            local = by[f"sparkiq local {interface}"]
            fwd = by[f"sparkiq forwarded {interface}"]
            local_nginx.append(local.rps / by["nginx fixed body"].rps)
            local_ref.append(local.rps / by[LOOP_REF].rps)
            fwd_local.append(fwd.rps / local.rps)
            p99s.append(local.p99_ms)
            steals.append(local.steal)
            fwd_steals.append(fwd.steal)
        ok_local = median(local_nginx) >= 1 / 3 and median(p99s) < 3
        ok_fwd = median(fwd_local) >= 0.5
        print(
            f"[{interface}] local/nginx per round {_list(local_nginx)}, median"
            f" {median(local_nginx):.2f}; local p99 median {median(p99s):.2f} ms (goal >= 0.33"
            f" with p99 < 3 ms: {'met' if ok_local else 'NOT met'})"
        )
        print(
            f"[{interface}] forwarded/local per round {_list(fwd_local)}, median"
            f" {median(fwd_local):.2f} (goal >= 0.5: {'met' if ok_fwd else 'NOT met'})"
        )
        print(
            f"[{interface}] local/minimal app on the loop's stack per round {_list(local_ref)},"
            f" median {median(local_ref):.2f}"
        )
        # The same over the rounds whose local run the hypervisor (nearly) left alone.
        calm = [n for n, steal in enumerate(steals) if steal < CALM_STEAL]
        both_calm = [n for n in calm if fwd_steals[n] < CALM_STEAL]
        if calm:
            print(
                f"[{interface}] rounds whose local run had < {CALM_STEAL:.0%} steal:"
                f" {', '.join(str(n + 1) for n in calm)}; local/nginx median"
                f" {median(local_nginx[n] for n in calm):.2f}, local p99 median"
                f" {median(p99s[n] for n in calm):.2f} ms"
            )
        else:
            print(f"[{interface}] no round's local run had < {CALM_STEAL:.0%} steal")
        if both_calm:
            print(
                f"[{interface}] rounds whose local and forwarded runs had < {CALM_STEAL:.0%}"
                f" steal: {', '.join(str(n + 1) for n in both_calm)}; forwarded/local median"
                f" {median(fwd_local[n] for n in both_calm):.2f}"
            )
    for interface in interfaces:
        plain = interface.replace("-console", "")
        if plain == interface or plain not in interfaces:
            continue
        for kind in ("local", "forwarded"):
            ratios = [
                by[f"sparkiq {kind} {interface}"].rps / by[f"sparkiq {kind} {plain}"].rps
                for by in ({r.name: r for r in results} for results in rounds)
            ]
            print(
                f"[{interface}] {kind} with the console open / without, per round"
                f" {_list(ratios)}, median {median(ratios):.2f}"
            )


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    node = sub.add_parser("serve-node")
    node.add_argument("--port", type=int, required=True)
    node.add_argument("--owner", default=None)
    node.add_argument("--state-dir", required=True)
    node.add_argument("--interface", default="loop")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument(
        "--interfaces",
        default="loop",
        help="node variants, comma-separated: loop with options -jwt, -depthN (loop-jwt-depth1)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="measure every server this many times, in turn"
    )
    parser.add_argument(
        "--pin", action="store_true", help="servers on the last CPU, wrk on the others"
    )
    args = parser.parse_args()
    if args.command == "serve-node":
        import uvloop

        uvloop.run(run_node(args.port, args.owner, args.state_dir, args.interface))
        return
    require_tools()
    if args.pin:
        pin(os.cpu_count() or 1)
    load_before = os.getloadavg()
    if args.rounds < 1 or args.duration < 1:
        raise SystemExit("--rounds and --duration must be >= 1")
    interfaces = args.interfaces.split(",")
    for interface in interfaces:
        node_kind(interface)  # a misspelt one fails here, before anything starts
    rounds = bench(args.duration, interfaces, args.rounds)
    report(rounds, (load_before, os.getloadavg()))


if __name__ == "__main__":
    main()
