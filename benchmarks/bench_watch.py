"""Watches on one node: change-to-watcher latency, lookups while watches are open, memory.

One broker (Apache Kafka; `--broker dev`: the dev broker), one table (`--keys` keys
`user-0000000000`.., `--partitions` partitions, JSON values), one `sparkiq serve` node
without standbys: it holds every partition as active, so every watch is answered from its
own replicas (nothing relayed). The watches are held by a second process of this script
(`watchers`: uvloop, one raw HTTP/1.1 connection per watch, an asyncio protocol that stamps
each read with the time it arrived), so neither the producer nor the load generator shares
its interpreter; its CPU time is reported.

Every value produced carries the time it was sent (`{"seq": n, "t": <monotonic send
time>}`; CLOCK_MONOTONIC is system-wide, so the two processes' stamps compare). Three
things are measured, each in `--rounds` rounds:

1. Latency (the goal: p99 at most 50 ms with 1,000 watches on one node, after the node
   applies the change). A node does not say when it applied a record, so per phase of
   `--latency-duration` s, all with the same update stream (`--rate` updates/s over keys
   0..`--watches`-1) running:
   - `0 watches`: probes only. A probe (`--probe-rate`/s on average, at Poisson times)
     produces an update and then polls GET of that key on one keep-alive connection until
     the answer holds it: produce -> visible, the node's restore lag (producer, broker, the
     restorer's fetch and write), to within one GET round trip. Beside the node, a bare
     consumer made and called as the restorer makes and calls its own (`new_consumer`,
     `next_batch(consumer, 0.1)`) gives produce -> consumed for every update: the lag's
     floor without a node;
   - `1 watch`: one key watched, probed as above: each probe gives produce -> visible and
     produce -> event for the same record, and their difference, event - visible: the time
     from the record becoming readable on the node to its event reaching the watcher;
   - `N watches`: keys 0..N-1 watched, the update stream goes to them (every update an
     event) and the probes too: produce -> event of every event, and the probes' pairs.
   Each phase reports received / expected events (expected: every update produced to a
   watched key; none should be missing or dropped).
2. Lookups (the goal: unchanged while the watches are open): wrk -t1 -c32 (bench_scale's
   and bench_http's load client) of random keys of the table, `--duration` s after a 1 s
   warm-up, with 0 watches open and with N open, each idle and with the update stream
   running; the order alternates between rounds. Per round the ratios N/0; their median is
   the figure and the 0-watch runs' spread between rounds is the noise it is read against.
   The `N watches + updates` runs also report produce -> event under that load.
3. Memory per watch: on the fresh node (after 10 watches opened and closed once), VmRSS
   before opening watches, after opening N and after `--memory-watches`, and after closing
   them all; (after - before) / count.

    .venv/bin/python benchmarks/bench_watch.py [--watches 1000] [--rate 200]
        [--latency-duration 15] [--duration 5] [--rounds 3] [--memory-watches 5000]

Requires `wrk` (installed with apt-get when missing and running as root). Every process it
starts (broker, node, watchers, wrk) is stopped by PID; its files live in a temporary
directory that is removed at the end. `watchers` is the internal entry of the watchers'
process, not for direct use.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import IO, Any, cast

import orjson
from confluent_kafka import OFFSET_END, Producer
from confluent_kafka import TopicPartition as KafkaPartition

from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.broker import make_broker
from sparkiq.dev.localcluster import NodeProcess
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from sparkiq.node.restore.fetch import new_consumer, next_batch
from sparkiq.node.restore.restorer import _POLL_TIMEOUT_S as RESTORER_CONSUME_S

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_scale  # noqa: E402  (a sibling script, not a package: its wrk runs and /proc)

TABLE = "watched"
KEY_PREFIX = "user-"
CONNECTIONS = bench_scale.CONNECTIONS  # wrk -c
PAD = "x" * 64  # values of ~110 bytes
OPEN_IN_FLIGHT = 100  # watches being opened at once by the watchers' process
PROBE_TIMEOUT_S = 5.0
DRAIN_S = 1.0  # after a phase's last update, before its events are collected
SETTLE_S = 1.0  # after opening or closing watches, before RSS is read


def key_text(i: int) -> str:
    return bench_scale.key_of(i).decode()


def value_of(seq: int, sent: float) -> bytes:
    return b'{"seq":%d,"t":%.6f,"pad":"%s"}' % (seq, sent, PAD.encode())


def update_producer(bootstrap: str) -> Producer:
    """A producer that places keys as sparkiq's sinks do and sends each update at once."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",  # as sparkiq's sinks
            "linger.ms": 0,  # each update sent at once
            "socket.nagle.disable": True,
            "acks": 1,
        }
    )


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


# == the watchers' process ===================================================================


class WatchConnection(asyncio.Protocol):
    """One watch over its own HTTP/1.1 connection. The answer is chunked; every event sits
    whole in one chunk, so its `data:` line starts a line of the raw stream and the chunk
    framing's lines never do: lines are read without undoing the framing."""

    def __init__(self, owner: Watchers, request: bytes) -> None:
        self.owner = owner
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.status_checked = False
        self.first: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buffer = self.buffer + data
        if not self.status_checked:
            if len(buffer) < 12:
                self.buffer = buffer
                return
            self.status_checked = True
            if not buffer.startswith(b"HTTP/1.1 200"):
                self.owner.refused += 1
                if not self.first.done():
                    self.first.set_result(False)
                assert self.transport is not None
                self.transport.close()
                return
        lines = buffer.split(b"\n")
        self.buffer = lines.pop()
        owner = self.owner
        for line in lines:
            if line.startswith(b"data: "):
                if not self.first.done():  # the key's state when the watch opened
                    self.first.set_result(True)
                    continue
                value = orjson.loads(line[6:])["value"]
                owner.events.append((value["seq"], value["t"], now))
            elif line.startswith(b":"):
                owner.heartbeats += 1
            elif line.startswith(b"event: "):
                owner.ended.append(line[7:].decode(errors="replace"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.first.done():
            self.first.set_result(False)
        self.owner.lost(self)


class Watchers:
    """The watches this process holds, and what their events said."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.open: dict[int, WatchConnection] = {}  # key index -> its watch
        self.events: list[tuple[int, float, float]] = []  # (seq, sent, received)
        self.heartbeats = 0
        self.refused = 0
        self.ended: list[str] = []  # names of end events (dropped, unavailable, ...)
        self.closed_by_node = 0
        self._closing: set[WatchConnection] = set()

    def lost(self, conn: WatchConnection) -> None:
        if conn in self._closing:
            self._closing.discard(conn)
            return
        for index, c in list(self.open.items()):
            if c is conn:
                del self.open[index]
                self.closed_by_node += 1

    async def open_keys(self, indexes: list[int]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        gate = asyncio.Semaphore(OPEN_IN_FLIGHT)
        failed = 0

        async def one(index: int) -> None:
            nonlocal failed
            path = f"/v1/tables/{TABLE}/keys/{key_text(index)}/watch"
            request = (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                "Accept: text/event-stream\r\n\r\n"
            ).encode()
            async with gate:
                try:
                    _, conn = await loop.create_connection(
                        lambda: WatchConnection(self, request), "127.0.0.1", self.port
                    )
                    ok = await asyncio.wait_for(conn.first, 30)
                except (OSError, TimeoutError):
                    ok = False
                if ok:
                    self.open[index] = conn
                else:
                    failed += 1

        await asyncio.gather(*(one(i) for i in indexes if i not in self.open))
        return {"open": len(self.open), "failed": failed, "seconds": time.monotonic() - t0}

    def close_all(self) -> dict[str, Any]:
        n = len(self.open)
        for conn in self.open.values():
            self._closing.add(conn)
            if conn.transport is not None:
                conn.transport.close()
        self.open.clear()
        return {"closed": n}

    def collect(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out = {
            "events": self.events,
            "heartbeats": self.heartbeats,
            "refused": self.refused,
            "ended": self.ended,
            "closed_by_node": self.closed_by_node,
            "open": len(self.open),
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024,
        }
        self.events, self.ended = [], []
        self.heartbeats = self.refused = self.closed_by_node = 0
        return out


async def serve_watchers(port: int) -> None:
    """Commands on stdin, one JSON line each; one JSON line answers each on stdout:
    {"cmd": "open", "keys": [index, ...]} (answered once every new watch has its first
    event), {"cmd": "close"}, {"cmd": "collect"}, {"cmd": "quit"}."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    watchers = Watchers(port)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        command = json.loads(line)
        cmd = command["cmd"]
        if cmd == "open":
            answer = await watchers.open_keys(command["keys"])
        elif cmd == "close":
            answer = watchers.close_all()
        elif cmd == "collect":
            answer = watchers.collect()
        elif cmd == "quit":
            watchers.close_all()
            break
        else:
            answer = {"error": f"unknown command {cmd!r}"}
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        sys.stdout.flush()


def watchers_main(port: int) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the node's own dependency
        asyncio.run(serve_watchers(port))
    else:
        uvloop.run(serve_watchers(port))


@dataclass
class WatcherProcess:
    """The watchers' process, driven from here."""

    port: int
    proc: subprocess.Popen[bytes] = field(init=False)

    def __post_init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "watchers", "--port", str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(orjson.dumps(command) + b"\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise SystemExit(f"the watchers' process ended (exit code {self.proc.poll()})")
        answer: dict[str, Any] = orjson.loads(line)
        return answer

    def open(self, indexes: Sequence[int]) -> dict[str, Any]:
        answer = self.ask({"cmd": "open", "keys": list(indexes)})
        if answer["failed"]:
            raise SystemExit(f"{answer['failed']} watches could not be opened: {answer}")
        return answer

    def close(self) -> None:
        self.ask({"cmd": "close"})

    def collect(self) -> dict[str, Any]:
        return self.ask({"cmd": "collect"})

    def stop(self) -> None:
        stdin = self.proc.stdin
        try:
            if stdin is not None:
                stdin.write(b'{"cmd": "quit"}\n')
                stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()  # by its PID
            self.proc.wait(10)


# == producing and probing ===================================================================


class Updates:
    """A steady stream of updates, `rate` per second, to random keys of `indexes` (a
    thread); counts what it produced to each key."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        indexes: Sequence[int],
        rate: float,
        seqs: itertools.count[int],
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.indexes = list(indexes)
        self.rate = rate
        self.seqs = seqs
        self.produced: dict[int, int] = {}  # key index -> updates produced to it
        self.late = 0  # updates sent more than 10 ms after their turn (this process lagged)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Updates:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(10)

    @property
    def count(self) -> int:
        return sum(self.produced.values())

    def _run(self) -> None:
        rng = random.Random(11)
        produce, poll = self.producer.produce, self.producer.poll
        t0 = time.monotonic()
        for i in itertools.count():
            due = t0 + i / self.rate
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                return
            if self._stop.is_set():
                return
            index = rng.choice(self.indexes)
            sent = time.monotonic()
            if sent - due > 0.01:
                self.late += 1
            produce(self.topic, value_of(next(self.seqs), sent), bench_scale.key_of(index))
            poll(0)
            self.produced[index] = self.produced.get(index, 0) + 1


@dataclass
class Probe:
    index: int
    seq: int
    sent: float
    visible: float | None  # when a GET first showed it (None: not within PROBE_TIMEOUT_S)
    gets: int


class Probes:
    """At random times, `rate` per second on average, an update to a random key of
    `indexes`, then GETs of that key on one keep-alive connection until the answer holds it
    or a later update (a thread; a probe due while one is polled waits for it)."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        port: int,
        indexes: Sequence[int],
        rate: float,
        seqs: itertools.count[int],
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.port = port
        self.indexes = list(indexes)
        self.rate = rate
        self.seqs = seqs
        self.done: list[Probe] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Probes:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(PROBE_TIMEOUT_S + 5)

    def _run(self) -> None:
        rng = random.Random(13)
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = sock.makefile("rb")
        try:
            due = time.monotonic()
            while True:
                # Poisson arrivals: a fixed period would lock onto the restorer's 100 ms
                # consume windows and see the same phase of them every time.
                due += rng.expovariate(self.rate)
                wait = due - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    return
                if self._stop.is_set():
                    return
                index = rng.choice(self.indexes)
                request = (
                    f"GET /v1/tables/{TABLE}/keys/{key_text(index)} HTTP/1.1\r\n"
                    "Host: 127.0.0.1\r\n\r\n"
                ).encode()
                seq = next(self.seqs)
                sent = time.monotonic()
                self.producer.produce(self.topic, value_of(seq, sent), bench_scale.key_of(index))
                self.producer.poll(0)
                visible, gets = None, 0
                while time.monotonic() - sent < PROBE_TIMEOUT_S:
                    sock.sendall(request)
                    body = _read_answer(stream)
                    gets += 1
                    if orjson.loads(body)["value"]["seq"] >= seq:
                        visible = time.monotonic()
                        break
                self.done.append(Probe(index, seq, sent, visible, gets))
        finally:
            stream.close()
            sock.close()


class BareConsumer:
    """A consumer as the node's restorer makes it (`new_consumer`, the same settings) and
    calls it (`next_batch(consumer, RESTORER_CONSUME_S)`), doing nothing with what it gets
    but note when each update of this phase came (a thread): the restore lag's floor."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, first_seq: int) -> None:
        self.consumer = new_consumer(bootstrap, {})
        self.consumer.assign([KafkaPartition(topic, p, OFFSET_END) for p in range(partitions)])
        self.first_seq = first_seq
        self.delays_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> BareConsumer:
        self._thread.start()
        time.sleep(1.0)  # its fetches under way before the first update
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            messages = next_batch(self.consumer, RESTORER_CONSUME_S)
            now = time.monotonic()
            for msg in messages:
                raw = msg.value()
                if msg.error() is not None or raw is None:
                    continue
                value = orjson.loads(raw)
                if value["seq"] >= self.first_seq:  # not one re-read from before the phase
                    self.delays_ms.append((now - value["t"]) * 1000)


def _read_answer(stream: IO[bytes]) -> bytes:
    """The body of one HTTP/1.1 answer with a content-length."""
    length = -1
    status = stream.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"a probe's GET was answered {status!r}")
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return stream.read(length)


# == measuring ===============================================================================


@dataclass
class Usage:
    """CPU seconds of the node, of the watchers' process and of this process, the
    machine's steal, over a span of time."""

    wall_s: float
    node_cpu_s: float
    watchers_cpu_s: float
    bench_cpu_s: float
    steal: float

    def line(self) -> str:
        w = self.wall_s or 1e-9
        return (
            f"CPU (share of one core): node {self.node_cpu_s / w:.0%}, watchers' process"
            f" {self.watchers_cpu_s / w:.0%}, producer and probes {self.bench_cpu_s / w:.0%};"
            f" steal {self.steal:.1%}"
        )


class Meter:
    def __init__(self, node_pid: int, watchers_pid: int) -> None:
        self.pids = (node_pid, watchers_pid)
        self.t = time.monotonic()
        self.cpu = [bench_scale.cpu_seconds([p]) for p in self.pids]
        self.own = time.process_time()
        self.machine = bench_scale.machine_times()

    def read(self) -> Usage:
        cpu = [bench_scale.cpu_seconds([p]) for p in self.pids]
        total, stolen = bench_scale.machine_times()
        return Usage(
            time.monotonic() - self.t,
            cpu[0] - self.cpu[0],
            cpu[1] - self.cpu[1],
            time.process_time() - self.own,
            (stolen - self.machine[1]) / max(total - self.machine[0], 1),
        )


@dataclass
class Latency:
    """One phase of measure 1."""

    name: str
    watches: int
    events: list[tuple[int, float, float]]  # (seq, sent, received)
    expected: int  # updates produced to watched keys
    probes: list[Probe]
    usage: Usage
    ended: list[str]
    late_updates: int
    bare_ms: list[float]  # produce -> consumed by a bare consumer (the 0-watch phase)

    def delays_ms(self, seqs: set[int] | None = None) -> list[float]:
        return [
            (got - sent) * 1000 for seq, sent, got in self.events if seqs is None or seq in seqs
        ]

    def visible_ms(self) -> list[float]:
        return [(p.visible - p.sent) * 1000 for p in self.probes if p.visible is not None]

    def after_visible_ms(self) -> list[float]:
        """Per probe: its event's arrival - the first GET that showed it."""
        got = {seq: received for seq, _, received in self.events}
        return [
            (got[p.seq] - p.visible) * 1000
            for p in self.probes
            if p.visible is not None and p.seq in got
        ]


@dataclass
class Lookups:
    """One wrk run of measure 2."""

    name: str
    watches: int
    updates: bool
    run: bench_scale.Run
    usage: Usage
    events: list[tuple[int, float, float]] = field(default_factory=list)
    expected: int = 0


@dataclass
class Memory:
    rss_mb: list[tuple[str, int, float]] = field(default_factory=list)  # (what, watches, MB)
    open_s: dict[int, float] = field(default_factory=dict)  # watches opened -> seconds
    watchers_cpu_s: float = 0.0


class Bench:
    def __init__(
        self,
        args: argparse.Namespace,
        node: NodeProcess,
        watchers: WatcherProcess,
        producer: Producer,
        bootstrap: str,
        topic: str,
        workdir: Path,
    ) -> None:
        assert node.pid is not None
        self.args = args
        self.node = node
        self.node_pid: int = node.pid
        self.watchers = watchers
        self.producer = producer
        self.bootstrap = bootstrap
        self.topic = topic
        self.workdir = workdir
        self.seqs = itertools.count()
        self.watched = list(range(args.watches))  # the N watched keys (and the stream's)
        self.lone = args.watches  # the key of the 1-watch phase (no stream goes to it)

    def meter(self) -> Meter:
        return Meter(self.node_pid, self.watchers.proc.pid)

    def rss_mb(self) -> float:
        return bench_scale.memory_mb(self.node_pid)[0]

    def watches_open(self) -> float | None:
        return bench_scale.metric(self.node, "sparkiq_watches_open")

    def wait_watches_open(self, n: int) -> None:
        deadline = time.monotonic() + 10
        while (seen := self.watches_open()) != n:
            if time.monotonic() > deadline:
                raise SystemExit(f"the node has {seen} watches open, not {n}")
            time.sleep(0.1)

    # -- 3. memory ---------------------------------------------------------------------------

    def memory(self) -> Memory:
        out = Memory()
        cpu0 = self.watchers.collect()["cpu_s"]
        self.watchers.open(range(10))  # code paths warmed once
        self.watchers.close()
        self.wait_watches_open(0)
        time.sleep(SETTLE_S)
        out.rss_mb.append(("before", 0, self.rss_mb()))
        before = 0
        for n in sorted({self.args.watches, self.args.memory_watches}):
            if n <= 0:
                continue
            opened = self.watchers.open(range(n))
            out.open_s[n - before] = opened["seconds"]
            self.wait_watches_open(n)
            time.sleep(SETTLE_S)
            out.rss_mb.append(("open", n, self.rss_mb()))
            print(
                f"  {n:,} watches open ({n - before:,} opened in {opened['seconds']:.1f} s):"
                f" node RSS {out.rss_mb[-1][2]:,.1f} MB",
                flush=True,
            )
            before = n
        self.watchers.close()
        self.wait_watches_open(0)
        time.sleep(SETTLE_S)
        out.rss_mb.append(("closed", 0, self.rss_mb()))
        collected = self.watchers.collect()
        out.watchers_cpu_s = collected["cpu_s"] - cpu0
        return out

    # -- 1. latency --------------------------------------------------------------------------

    def latency(
        self, name: str, watch: list[int], probe_keys: list[int], *, bare: bool = False
    ) -> Latency:
        """One phase: `watch` watched, the update stream and probes of `probe_keys` for
        `--latency-duration` s; with `bare`, a bare consumer beside the node."""
        args = self.args
        if watch:
            self.watchers.open(watch)
        self.wait_watches_open(len(watch))
        self.watchers.collect()  # nothing from before counts
        first_seq = next(self.seqs)
        consumer = None
        if bare:
            consumer = BareConsumer(self.bootstrap, self.topic, args.partitions, first_seq)
            consumer.start()
        meter = self.meter()
        updates = Updates(self.producer, self.topic, self.watched, args.rate, self.seqs).start()
        probes = Probes(
            self.producer, self.topic, self.node.port, probe_keys, args.probe_rate, self.seqs
        ).start()
        time.sleep(args.latency_duration)
        updates.stop()
        probes.stop()
        time.sleep(DRAIN_S)
        usage = meter.read()
        if consumer is not None:
            consumer.stop()
        got = self.watchers.collect()
        watched = set(watch)
        expected = sum(n for i, n in updates.produced.items() if i in watched) + sum(
            1 for p in probes.done if p.index in watched
        )
        if watch:
            self.watchers.close()
        return Latency(
            name,
            len(watch),
            [(e[0], e[1], e[2]) for e in got["events"] if e[0] >= first_seq],
            expected,
            probes.done,
            usage,
            got["ended"],
            updates.late,
            [] if consumer is None else consumer.delays_ms,
        )

    # -- 2. lookups --------------------------------------------------------------------------

    def lookups(self, watches: int, with_updates: bool) -> Lookups:
        name = f"{watches:,} watches" + (" + updates" if with_updates else ", idle")
        subject = bench_scale.Subject(
            name.replace(" ", "_").replace(",", ""),
            f"/v1/tables/{TABLE}/keys/{KEY_PREFIX}",
            self.args.keys,
        )
        self.watchers.collect()
        updates = None
        if with_updates:
            updates = Updates(
                self.producer, self.topic, self.watched, self.args.rate, self.seqs
            ).start()
        meter = self.meter()
        run = bench_scale.wrk(
            subject, self.node.port, self.args.duration, self.node_pid, self.workdir
        )
        usage = meter.read()
        expected = 0
        if updates is not None:
            updates.stop()
            time.sleep(DRAIN_S)
            if watches:
                expected = updates.count
        got = self.watchers.collect()
        result = Lookups(name, watches, with_updates, run, usage)
        if watches and with_updates:
            result.events = [tuple(e) for e in got["events"]]
            result.expected = expected
        return result


# == the run =================================================================================


@dataclass
class Results:
    memory: Memory
    latency: list[Latency] = field(default_factory=list)
    lookups: list[list[Lookups]] = field(default_factory=list)  # per round


def one_round(bench: Bench, r: int, results: Results) -> None:
    args = bench.args
    n = args.watches
    print(f"\n== round {r + 1} of {args.rounds} ==", flush=True)
    phases = [
        ("0 watches", [], [bench.lone]),
        ("1 watch", [bench.lone], [bench.lone]),
        (f"{n:,} watches", bench.watched, bench.watched),
    ]
    for name, watch, probe_keys in phases:
        lat = bench.latency(name, watch, probe_keys, bare=not watch)
        results.latency.append(lat)
        print(f"  latency, {name}: " + latency_line(lat), flush=True)
    runs: list[Lookups] = []
    order = [0, n] if r % 2 == 0 else [n, 0]
    for watches in order:
        if watches:
            bench.watchers.open(bench.watched)
            bench.wait_watches_open(watches)
        subjects = [False, True] if args.updates else [False]
        for with_updates in subjects:
            look = bench.lookups(watches, with_updates)
            runs.append(look)
            x = look.run
            print(
                f"  lookups, {look.name}: {x.rps:,.0f} req/s, p50 {x.p50_ms:.2f} ms,"
                f" p99 {x.p99_ms:.2f} ms, node {x.cpu_us:.1f} us/request, steal {x.steal:.1%}"
                + (f", ERRORS {x.errors} non-2xx {x.non2xx}" if x.errors or x.non2xx else ""),
                flush=True,
            )
        if watches:
            bench.watchers.close()
            bench.wait_watches_open(0)
    results.lookups.append(runs)


def latency_line(lat: Latency) -> str:
    parts = []
    if lat.bare_ms:
        b = lat.bare_ms
        parts.append(f"bare consumer p50 {pct(b, 0.5):.1f} p99 {pct(b, 0.99):.1f} ms")
    vis = lat.visible_ms()
    parts.append(f"produce->visible p50 {pct(vis, 0.5):.1f} p99 {pct(vis, 0.99):.1f} ms")
    if lat.watches:
        ev = lat.delays_ms()
        parts.append(
            f"produce->event p50 {pct(ev, 0.5):.1f} p99 {pct(ev, 0.99):.1f} ms"
            f" ({len(lat.events):,} of {lat.expected:,} events)"
        )
        after = lat.after_visible_ms()
        parts.append(f"event-visible p50 {pct(after, 0.5):.1f} p99 {pct(after, 0.99):.1f} ms")
    return "; ".join(parts) + f"; {lat.usage.line()}"


def run(args: argparse.Namespace, work: Path) -> tuple[Results, dict[str, Any]]:
    info: dict[str, Any] = {}
    with make_broker(args.broker) as broker:
        assert broker.pid is not None
        bootstrap = broker.bootstrap_servers
        app = f"watch{int(time.time()) % 100_000}"
        table = TableDef(
            TABLE,
            f"{app}-{TABLE}",
            args.partitions,
            Format.STRING,
            Format.JSON,
        )
        create_topic(bootstrap, table.topic, args.partitions)
        producer = update_producer(bootstrap)
        for i in range(args.keys):
            producer.produce(table.topic, value_of(-1, 0.0), bench_scale.key_of(i))
            if i % 10_000 == 0:
                producer.poll(0)
        if producer.flush(60):
            raise SystemExit("the table's first values were not all delivered")
        register_table(bootstrap, table, app=app)
        node = NodeProcess(
            port=free_port(),
            state_dir=work / "state",
            bootstrap_servers=bootstrap,
            app=app,
            log_path=work / "node.log",
            extra_args=("--standby-replicas", "0"),
        )
        watchers: WatcherProcess | None = None
        try:
            print(f"starting one node over {args.keys:,} keys ...", flush=True)
            rst = bench_scale.restore(node, broker.pid, args.keys, 300)
            info["ready_s"] = rst.seconds
            info["applied"] = rst.applied
            if rst.applied != args.keys:
                raise SystemExit(f"the node applied {rst.applied} records, not {args.keys}")
            watchers = WatcherProcess(node.port)
            bench = Bench(args, node, watchers, producer, bootstrap, table.topic, work)
            print("memory ...", flush=True)
            results = Results(bench.memory())
            for r in range(args.rounds):
                one_round(bench, r, results)
            if not node.is_running():
                raise SystemExit(f"the node exited; its log:\n{bench_scale.log_tail(node)}")
            assert node.pid is not None
            info["node_rss_end_mb"] = bench_scale.memory_mb(node.pid)[0]
            info["watchers_rss_mb"] = watchers.collect()["rss_mb"]
        finally:
            if watchers is not None:
                watchers.stop()
            node.stop()
    return results, info


# == report ==================================================================================


def stats(values: list[float]) -> str:
    if not values:
        return "- | - | - | 0"
    return f"{pct(values, 0.5):.1f} | {pct(values, 0.99):.1f} | {max(values):.1f} | {len(values):,}"


def spread(values: list[float]) -> float:
    """(max - min) / median."""
    return (max(values) - min(values)) / median(values) if values else math.nan


def report(
    results: Results, args: argparse.Namespace, info: dict[str, Any], load: Sequence[float]
) -> None:
    n = args.watches
    print(
        f"\n{os.cpu_count()} cores; load average at start {', '.join(f'{x:.2f}' for x in load)},"
        f" at the end {', '.join(f'{x:.2f}' for x in info['load_end'])};"
        f" one node, {args.keys:,} keys in {args.partitions} partitions (all active on it),"
        f" ready {info['ready_s']:.1f} s after its start; {args.rounds} rounds"
    )

    print(
        f"\n1. Latency: {args.rate:g} updates/s to keys 0..{n - 1} in every phase,"
        f" {args.probe_rate:g} probes/s, {args.latency_duration:g} s per phase and round"
        " (all rounds together)"
    )
    print(
        "   produce->consumed: from just before produce() to the return of the call that"
        " brought it, of a consumer beside the node with the restorer's settings and"
        f" call (next_batch(consumer, {RESTORER_CONSUME_S}));\n"
        "   produce->visible: from just before produce() to the first GET answer holding the"
        " update (the node's restore lag, to within one GET round trip);\n"
        "   produce->event: from just before produce() to the read that brought its event to"
        " the watchers' process;\n"
        "   event-visible: per probe, the event's arrival - the first GET that showed it: the"
        " time from the record being readable on the node to its event at the watcher.\n"
    )
    print("| phase | measure | p50 ms | p99 ms | max ms | samples |")
    print("|---|---|---|---|---|---|")
    by_phase: dict[str, list[Latency]] = {}
    for lat in results.latency:
        by_phase.setdefault(lat.name, []).append(lat)
    for name, lats in by_phase.items():
        bare = [x for lat in lats for x in lat.bare_ms]
        if bare:
            print(f"| {name} | produce->consumed (bare consumer, all updates) | {stats(bare)} |")
        vis = [x for lat in lats for x in lat.visible_ms()]
        print(f"| {name} | produce->visible (probes) | {stats(vis)} |")
        if lats[0].watches:
            probe_seqs = {p.seq for lat in lats for p in lat.probes}
            ev_all = [x for lat in lats for x in lat.delays_ms()]
            ev_probes = [x for lat in lats for x in lat.delays_ms(probe_seqs)]
            after = [x for lat in lats for x in lat.after_visible_ms()]
            if lats[0].watches > 1:
                print(f"| {name} | produce->event (all events) | {stats(ev_all)} |")
            print(f"| {name} | produce->event (probes) | {stats(ev_probes)} |")
            print(f"| {name} | event-visible (probes) | {stats(after)} |")
    print()
    for name, lats in by_phase.items():
        got = sum(len(lat.events) for lat in lats)
        expected = sum(lat.expected for lat in lats)
        p99s = ", ".join(f"{pct(lat.delays_ms(), 0.99):.1f}" for lat in lats)
        vis99 = ", ".join(f"{pct(lat.visible_ms(), 0.99):.1f}" for lat in lats)
        ended = [e for lat in lats for e in lat.ended]
        late = sum(lat.late_updates for lat in lats)
        extra = f"; events received {got:,} of {expected:,}" if lats[0].watches else ""
        print(
            f"  {name}: produce->visible p99 per round {vis99} ms"
            + (f"; produce->event p99 per round {p99s} ms" if lats[0].watches else "")
            + extra
            + (f"; END EVENTS {ended}" if ended else "")
            + (f"; {late} updates sent >10 ms late" if late else "")
        )
        for lat in lats:
            print(f"    {lat.usage.line()}")

    print(
        f"\n2. Lookups: wrk -t1 -c{CONNECTIONS}, random keys of {args.keys:,},"
        f" {args.duration} s per run after 1 s of warm-up; updates at {args.rate:g}/s where"
        " said"
    )
    print(
        "\n| subject | req/s per round | median | p50 / p99 ms (median) | node us/request"
        " (median) | steal per round |"
    )
    print("|---|---|---|---|---|---|")
    names: list[str] = []
    for runs in results.lookups:
        for x in runs:
            if x.name not in names:
                names.append(x.name)
    names.sort(key=lambda s: (" + updates" in s, not s.startswith("0 ")))
    by_name = {
        name: [x for runs in results.lookups for x in runs if x.name == name] for name in names
    }
    for name, xs in by_name.items():
        rps = [x.run.rps for x in xs]
        print(
            f"| {name} | {', '.join(f'{v:,.0f}' for v in rps)} | {median(rps):,.0f}"
            f" | {median(x.run.p50_ms for x in xs):.2f} / {median(x.run.p99_ms for x in xs):.2f}"
            f" | {median(x.run.cpu_us for x in xs):.1f}"
            f" | {', '.join(f'{x.run.steal:.1%}' for x in xs)} |"
        )
    print()
    for with_updates in [False, True] if args.updates else [False]:
        tail = " + updates" if with_updates else ", idle"
        ref = by_name.get(f"0 watches{tail}", [])
        sub = by_name.get(f"{n:,} watches{tail}", [])
        if not ref or not sub:
            continue
        ratios = [s.run.rps / z.run.rps for s, z in zip(sub, ref, strict=True)]
        p99_ratios = [s.run.p99_ms / z.run.p99_ms for s, z in zip(sub, ref, strict=True)]
        noise = spread([z.run.rps for z in ref])
        straddle = min(ratios) <= 1 <= max(ratios)
        verdict = (
            "within noise: the rounds' ratios straddle 1"
            if straddle
            else "within noise: off 1 by less than the reference's own spread"
            if abs(1 - median(ratios)) <= noise
            else "NOT within noise"
        )
        print(
            f"  {n:,} watches / 0 watches{tail}: req/s ratio per round"
            f" {', '.join(f'{v:.2f}' for v in ratios)}, median {median(ratios):.2f};"
            f" the 0-watch runs' own spread between rounds {noise:.0%} ({verdict});"
            f" p99 ratio per round {', '.join(f'{v:.2f}' for v in p99_ratios)}"
        )
    loaded = [x for runs in results.lookups for x in runs if x.events]
    if loaded:
        ev = [(got - sent) * 1000 for x in loaded for _, sent, got in x.events]
        got_n = sum(len(x.events) for x in loaded)
        expected = sum(x.expected for x in loaded)
        print(
            f"  produce->event during the `{n:,} watches + updates` runs (wrk saturating the"
            f" node): p50 {pct(ev, 0.5):.1f} ms, p99 {pct(ev, 0.99):.1f} ms, max"
            f" {max(ev, default=math.nan):.1f} ms; {got_n:,} of {expected:,} events"
        )

    mem = results.memory
    print("\n3. Memory: node VmRSS")
    print("\n| when | watches open | RSS MB | per watch vs before |")
    print("|---|---|---|---|")
    before = mem.rss_mb[0][2]
    for what, count, rss in mem.rss_mb:
        per = f"{(rss - before) * 1024 * 1024 / count / 1024:.1f} KiB" if count else "-"
        print(f"| {what} | {count:,} | {rss:,.1f} | {per} |")
    opened = ", then ".join(f"{k:,} in {v:.1f} s" for k, v in mem.open_s.items())
    print(
        f"\n  opened {opened}; the watchers' process used {mem.watchers_cpu_s:.1f} s of CPU"
        f" for the memory step, peak RSS {info.get('watchers_rss_mb', 0):,.0f} MB;"
        f" node RSS at the end {info.get('node_rss_end_mb', 0):,.0f} MB"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "watchers":
        sub = argparse.ArgumentParser(prog="bench_watch.py watchers")
        sub.add_argument("--port", type=int, required=True)
        watchers_main(sub.parse_args(sys.argv[2:]).port)
        return
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--watches", type=int, default=1_000, help="watches open on the node")
    parser.add_argument("--keys", type=int, default=10_000, help="keys in the table")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--rate", type=float, default=200, help="updates/s of the stream to watched keys"
    )
    parser.add_argument(
        "--probe-rate", type=float, default=5, help="probes per second (on average)"
    )
    parser.add_argument(
        "--latency-duration", type=float, default=15, help="seconds per latency phase"
    )
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--memory-watches", type=int, default=5_000, help="the larger count of the memory step"
    )
    parser.add_argument(
        "--no-updates",
        dest="updates",
        action="store_false",
        help="lookups only with idle watches (no `+ updates` runs)",
    )
    parser.add_argument(
        "--broker",
        choices=["kafka", "dev"],
        default="kafka",
        help="Apache Kafka (KRaft, one node; the default) or the dev broker",
    )
    args = parser.parse_args()
    if args.watches < 2 or args.keys <= max(args.watches, args.memory_watches):
        parser.error("--watches must be >= 2 and --keys more than --watches and --memory-watches")
    if args.rate <= 0 or args.probe_rate <= 0 or args.rounds < 1 or args.duration < 1:
        parser.error("--rate, --probe-rate, --rounds and --duration must be positive")
    bench_scale.require_wrk()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-watch-") as tmp:
        results, info = run(args, Path(tmp))
    info["load_end"] = os.getloadavg()
    report(results, args, info, load)


if __name__ == "__main__":
    main()
