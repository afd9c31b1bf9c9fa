"""Instructions per key lookup in a node's own code: a measure that does not drift.

`bench_http.py` measures what a client sees, but on this shared machine its figures move
2-3x within minutes, so a change of a few percent in the node's own work cannot be seen
there. This benchmark takes the sockets away and counts instructions instead:

- `sparkiq`: N plain GETs of random keys (as wrk sends them) fed to one connection of the
  loop server (`data_received`, then the connection's flush into a transport that only
  counts writes), for a StaticView over PartitionStores of 100k keys -- the whole local
  lookup of a node short of the two system calls: gate, key path, RocksDB get, rendering,
  metrics, the answer's bytes;
- `minimal app`: the same requests through `refapp.LoopRef`, the minimal app on the same
  stack (httptools' parser, a dict lookup, a prepared answer), the floor in this harness;
- `forwarded, loop`: the same requests to a node that owns no partition, which forwards
  each over its pool to an owner node listening on 127.0.0.1 in the same process: both
  nodes' work for one forwarded lookup (the forwarding node's lane and pool, the owner's
  parser path, gate and key path), one request at a time, with the loop turns between;
- `local, loop`: the owner node alone answering the same requests in that harness, the
  local lookup to compare the forwarded one with (it adds the loop turns to `sparkiq`);
- `owner of a forward`: as `sparkiq`, but each request as a forwarding node's pool writes
  it (hops, budget and request id headers): the owner's share of a forwarded lookup.

Each runs in its own process under `valgrind --tool=callgrind`. The measured requests are
answered from inside `itertools.starmap()`, and callgrind collects only while `starmap_next`
is on the stack (`--toggle-collect`), so start-up, imports and the warm-up round (every
request once, before the measured one) are not counted. (Not `map()`: with it, a module
import was counted as well.) The two `loop` subjects run in the loop; their process zeroes
callgrind's counters before the measured round and dumps them after (`callgrind_control`).
The counts repeat within ~1% from run to run whatever else the machine does. Instructions
are not time (cache misses and branch mispredictions are not in them), but the node's lookup
is CPU-bound Python, and fewer instructions for the same work take less time. `--time` times
the same loops instead (noisy).

    .venv/bin/python benchmarks/bench_lane.py [--requests 3000] [--time] [--only SUBJECT]

Requires valgrind (Debian: `apt-get install -y valgrind`; installed with apt-get when
missing and the script runs as root).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import starmap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_http  # noqa: E402  (a sibling script, not a package)

SUBJECTS = ("sparkiq", "owner of a forward", "minimal app", "local, loop", "forwarded, loop")
# Subjects answered through the running loop, request by request: counted between a zeroing
# and a dump of callgrind's counters (`callgrind_control`), not inside `starmap`.
ROUND_TRIPS = ("local, loop", "forwarded, loop")
PREFIX = b"/v1/tables/bench/keys/"
UNDER_CALLGRIND = "SPARKIQ_BENCH_UNDER_CALLGRIND"


class CountingTransport:
    """A transport that takes the answers and counts the writes."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def requests(n: int) -> list[bytes]:
    rng = random.Random(42)
    return [
        b"GET %bk%d HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
        % (PREFIX, rng.randrange(bench_http.KEYS))
        for _ in range(n)
    ]


def forwarded_requests(n: int) -> list[bytes]:
    """`requests(n)` as a forwarding node's pool sends them to the owner (its own code
    writes them: `PoolForwarder._request`), each with a request id of its own."""
    from sparkiq.http.forwarding.pool import PoolForwarder, _Origin
    from sparkiq.http.messages.requestid import REQUEST_ID, new_request_id

    pool = PoolForwarder()
    origin = _Origin("127.0.0.1", 8080, 1, None)
    out = []
    for data in requests(n):
        target = data.split(b" ", 2)[1].decode("ascii")
        token = REQUEST_ID.set(new_request_id())
        out.append(pool._request(origin, "GET", target, None, 0, 2.0))
        REQUEST_ID.reset(token)
    return out


async def sparkiq_lane(state_dir: str) -> tuple[Callable[[bytes], None], CountingTransport]:
    """One loop-server connection of a node whose stores are all local actives."""
    from sparkiq.http.app.server import HttpServer
    from sparkiq.http.server.connection import Connection

    view, _ = bench_http.bench_view("http://127.0.0.1:8080", state_dir)
    server = HttpServer(view, "127.0.0.1", 8080)
    loop_server = server._loop_server
    connection = Connection(loop_server)
    transport = CountingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    # The server flushes its connections once per loop iteration (`LoopServer.to_flush`);
    # here every request is flushed at once. A sentinel in the list keeps `to_flush` from
    # scheduling a flush of its own.
    flushing: list[Any] = loop_server._flushing
    flushing.append(None)
    receive, flush = connection.data_received, connection.flush
    # The server reads the clock once per loop iteration for all connections it flushes;
    # here each request is a loop iteration.
    monotonic = time.monotonic

    def one(data: bytes) -> None:
        receive(data)
        flush(monotonic())
        del flushing[1:]

    return one, transport


async def minimal_lane() -> tuple[Callable[[bytes], None], CountingTransport]:
    import refapp

    protocol = refapp.LoopRef()
    transport = CountingTransport()
    protocol.connection_made(transport)
    return protocol.data_received, transport


class WaitingTransport(CountingTransport):
    """A `CountingTransport` that settles `answered` at each write."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)


def callgrind(flag: str) -> None:
    """Zero (-z) or dump (-d) this process's callgrind counters, when running under it."""
    if os.environ.get(UNDER_CALLGRIND):
        subprocess.run(
            ["callgrind_control", flag, str(os.getpid())], check=True, capture_output=True
        )


async def run_round_trips(subject: str, state_dir: str, n: int) -> None:
    """Requests one at a time through the loop: to an owner node, or forwarded to it."""
    from sparkiq.http.app.server import HttpServer
    from sparkiq.http.server.connection import Connection

    owner_port = bench_http.free_port()
    owner_url = f"http://127.0.0.1:{owner_port}"
    owner_view, registry = bench_http.bench_view(owner_url, state_dir)
    assert registry is not None
    owner = HttpServer(owner_view, "127.0.0.1", owner_port)
    await owner.start()
    node = owner
    if subject == "forwarded, loop":
        port = bench_http.free_port()
        view, _ = bench_http.bench_view(f"http://127.0.0.1:{port}", state_dir, owner_url)
        node = HttpServer(view, "127.0.0.1", port)
    loop_server = node._loop_server
    connection = Connection(loop_server)
    transport = WaitingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    batch = requests(n)

    async def one_by_one() -> None:
        for data in batch:
            transport.answered = loop.create_future()
            connection.data_received(data)
            await transport.answered

    await one_by_one()  # warm-up: connections, caches
    writes = transport.writes
    callgrind("-z")
    started = time.perf_counter()
    await one_by_one()
    seconds = time.perf_counter() - started
    callgrind("-d")
    if transport.writes - writes != n:
        raise SystemExit(f"{subject}: {transport.writes - writes} answers to {n} requests")
    print(f"RESULT {seconds / n * 1e6:.2f}")
    connection.connection_lost(None)
    await owner.stop()
    registry.close_all()


async def run_inner(subject: str, state_dir: str, n: int) -> None:
    """Answer the requests once to warm up, then once measured (inside `starmap`)."""
    if subject in ROUND_TRIPS:
        await run_round_trips(subject, state_dir, n)
        return
    if subject == "minimal app":
        one, transport = await minimal_lane()
    else:
        one, transport = await sparkiq_lane(state_dir)
    batch = forwarded_requests(n) if subject == "owner of a forward" else requests(n)
    for data in batch:
        one(data)
    writes = transport.writes
    started = time.perf_counter()
    list(starmap(one, [(data,) for data in batch]))
    seconds = time.perf_counter() - started
    if transport.writes - writes != n:
        raise SystemExit(f"{subject}: {transport.writes - writes} answers to {n} requests")
    print(f"RESULT {seconds / n * 1e6:.2f}")


def inner_command(subject: str, state_dir: str, n: int) -> list[str]:
    return [sys.executable, __file__, "--inner", subject, "--state-dir", state_dir, "-n", str(n)]


def count(subject: str, state_dir: str, n: int, workdir: Path) -> float:
    """Instructions per request of `subject` under callgrind."""
    name = re.sub(r"\W+", "_", subject)
    round_trips = subject in ROUND_TRIPS
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            *([] if round_trips else ["--toggle-collect=starmap_next"]),
            f"--callgrind-out-file={workdir / name}.%p",
            *inner_command(subject, state_dir, n),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0", UNDER_CALLGRIND: "1"},
    )
    result = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if round_trips:
        # The dump made after the measured round: its own cost (`summary:`). Its `totals:`
        # also holds work outside the round (other threads'), which varies from run to run.
        dumps = list(workdir.glob(f"{name}.*.1"))
        found = re.search(r"^summary: (\d+)", dumps[0].read_text(), re.M) if dumps else None
    else:
        found = re.search(r"Collected : ([\d,]+)", proc.stderr)
    if proc.returncode != 0 or found is None or not result:
        raise SystemExit(f"{subject} under callgrind failed:\n{proc.stdout}\n{proc.stderr}")
    return int(found.group(1).replace(",", "")) / n


def timed(subject: str, state_dir: str, n: int) -> float:
    """Microseconds per request of `subject`, natively (best of three runs)."""
    best = float("inf")
    for _ in range(3):
        out = subprocess.run(
            inner_command(subject, state_dir, n), capture_output=True, text=True, check=True
        ).stdout
        line = next(x for x in out.splitlines() if x.startswith("RESULT "))
        best = min(best, float(line.split()[1]))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--requests", type=int, default=3000, help="measured requests")
    parser.add_argument("--time", action="store_true", help="time natively instead")
    parser.add_argument(
        "--only", choices=SUBJECTS, action="append", help="measure only this subject (repeatable)"
    )
    parser.add_argument("--inner", choices=SUBJECTS, help=argparse.SUPPRESS)
    parser.add_argument("--state-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    if args.inner is not None:
        import uvloop

        uvloop.run(run_inner(args.inner, args.state_dir, args.requests))
        return
    if not args.time:
        bench_http.require_tools(("valgrind",), "bench_lane")
    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-lane-") as tmp:
        workdir = Path(tmp)
        state_dir = workdir / "state"
        print(f"building {bench_http.KEYS // 1000}k keys in RocksDB ...", flush=True)
        bench_http.build_stores(state_dir)
        figures: dict[str, float] = {}
        for subject in args.only or SUBJECTS:
            print(f"{subject} ...", flush=True)
            if args.time:
                figures[subject] = timed(subject, str(state_dir), args.requests)
            else:
                figures[subject] = count(subject, str(state_dir), args.requests, workdir)
        unit = "us/request (best of 3, natively)" if args.time else "instructions/request"
        print(f"\n{args.requests} lookups of random keys out of {bench_http.KEYS}")
        for subject, figure in figures.items():
            print(f"{subject:18s} {figure:10,.{2 if args.time else 0}f} {unit}")
        if "sparkiq" in figures and "minimal app" in figures:
            ratio = figures["sparkiq"] / figures["minimal app"]
            print(f"sparkiq/minimal app: {ratio:.2f}")
        if "forwarded, loop" in figures and "local, loop" in figures:
            forwarded = figures["forwarded, loop"] / figures["local, loop"]
            print(f"forwarded/local (both nodes' work per lookup, the loop): {forwarded:.2f}")


if __name__ == "__main__":
    main()
