"""Apply lag: a record appended to a changelog -> its change applied and readable on a node.

One broker (Apache Kafka; `--broker dev`: the dev broker), one table (`--keys` keys,
`--partitions` partitions, JSON values), one `sparkiq serve` node without standbys, so it
holds every partition as active. Once the node is ready:

1. Idle CPU: the node's CPU time over `--idle` s with nothing produced (every partition
   caught up, its fetches parked at the broker), by thread; it must stay low (no spinning).
   Then its CPU over as long with the update stream of 2. running and no watch open: what
   applying the stream costs the node.
2. Apply lag, `--duration` s: a steady stream of `--rate` updates/s to random keys, each
   value carrying the time it was sent (`{"seq": n, "t": <monotonic send time>}`;
   CLOCK_MONOTONIC is system-wide, so the processes' stamps compare). For every update:
   - produce -> applied on the node: the arrival of its event on one range watch of the
     whole table (`GET /v1/tables/{table}/changes`), which the node sends right after the
     record is written to its store, so the key reads the new value from then on (an event
     comes ~0.1-1 ms after a GET first sees the value: BENCHMARKS.md, "Watches");
   - produce -> consumed by a bare consumer beside the node (the reference): a
     confluent-kafka consumer with librdkafka's defaults in `assign()` mode, blocked in
     `poll()`, which returns each record as soon as it has it: the floor for any consumer.
   Both report p50 / p90 / p99 / max and the received / produced counts; the node's CPU
   over the span is reported beside.

The producer sends each update at once (`linger.ms` 0), so the lag is the consumer side's.
Goal: p99 of produce -> applied <= 20 ms.

With `--idle-tables T` the node also holds `T x --idle-partitions` partitions of other
tables (a couple of records each, nothing produced to them while measuring): a node with
many replicas, one table of which receives updates. The bare consumer then follows every one
of those partitions too (`--bare all`, what librdkafka costs with that assignment) or only
the updated table's (`--bare table`).

    .venv/bin/python benchmarks/bench_applylag.py [--rate 200] [--duration 30] [--idle 10]
        [--rounds 1] [--broker dev] [--idle-tables 40 --idle-partitions 50] [--bare table]
        [--settle 2]

Every process it starts (broker, node) is stopped by PID; its files live in a temporary
directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import math
import random
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson
from confluent_kafka import OFFSET_END, Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition

from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.broker import make_broker
from sparkiq.dev.localcluster import NodeProcess
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_scale  # noqa: E402  (a sibling script, not a package: node start-up and /proc)
from bench_watch import pct, update_producer  # noqa: E402  (a sibling script, as bench_scale)

TABLE = "lagged"
IDLE_RECORDS = 2  # per partition of an idle table
DRAIN_S = 1.0  # after the last update, before what arrived is collected
SETTLE_S = 2.0  # after the node is ready (or the watch open), before measuring


def key_of(i: int) -> bytes:
    return b"key-%06d" % i


def value_of(seq: int, sent: float) -> bytes:
    return b'{"seq":%d,"t":%.6f,"pad":"%s"}' % (seq, sent, b"x" * 64)


class Updates:
    """`rate` updates per second to random keys, each sent at once (a thread)."""

    def __init__(self, producer: Producer, topic: str, keys: int, rate: float) -> None:
        self.producer = producer
        self.topic = topic
        self.keys = keys
        self.rate = rate
        self.produced = 0
        self.first_seq = -1
        self.late = 0  # updates sent more than 5 ms after their turn (this process lagged)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, first_seq: int) -> Updates:
        self.first_seq = first_seq
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(10)

    def _run(self) -> None:
        rng = random.Random(7)
        produce, poll = self.producer.produce, self.producer.poll
        t0 = time.monotonic()
        for i in range(sys.maxsize):
            due = t0 + i / self.rate
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                return
            if self._stop.is_set():
                return
            sent = time.monotonic()
            if sent - due > 0.005:
                self.late += 1
            key = key_of(rng.randrange(self.keys))
            produce(self.topic, value_of(self.first_seq + i, sent), key)
            poll(0)
            self.produced += 1


class ChangesWatch:
    """One range watch of the whole table over a raw HTTP/1.1 connection (a thread) that
    stamps each change event with its arrival. The answer is chunked; every event sits whole
    in one chunk, so its `data:` line starts a line of the raw stream."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(
            (
                f"GET /v1/tables/{TABLE}/changes HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Accept: text/event-stream\r\n\r\n"
            ).encode()
        )
        self.events: list[tuple[int, float, float]] = []  # (seq, sent, received)
        self.opened = threading.Event()  # the `positions` event came
        self.ended: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)

    def _run(self) -> None:
        buffer = b""
        status_checked = False
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            now = time.monotonic()
            buffer += data
            if not status_checked:
                if len(buffer) < 12:
                    continue
                status_checked = True
                if not buffer.startswith(b"HTTP/1.1 200"):
                    self.ended.append(f"refused: {buffer[:200]!r}")
                    return
            lines = buffer.split(b"\n")
            buffer = lines.pop()
            for line in lines:
                if line.startswith(b"data: "):
                    doc = orjson.loads(line[6:])
                    if "positions" in doc:
                        self.opened.set()
                        continue
                    value = doc.get("value")
                    if isinstance(value, dict):
                        self.events.append((value["seq"], value["t"], now))
                elif line.startswith(b"event: ") and not line.startswith(b"event: positions"):
                    self.ended.append(line[7:].decode(errors="replace"))


class BareConsumer:
    """The reference: librdkafka's defaults, `assign()` at the end of every partition,
    `poll()` for each record; notes when each update of the phase came (a thread)."""

    def __init__(self, bootstrap: str, follows: list[TableDef]) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-applylag-{uuid.uuid4()}",  # never joined: assign()
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign(
            [KafkaPartition(t.topic, p, OFFSET_END) for t in follows for p in range(t.partitions)]
        )
        self.first_seq = sys.maxsize
        self.delays_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()

    def _run(self) -> None:
        poll = self.consumer.poll
        while not self._stop.is_set():
            msg = poll(0.2)
            if msg is None:
                continue
            now = time.monotonic()
            raw = msg.value()
            if msg.error() is not None or raw is None:
                continue
            value = orjson.loads(raw)
            if value["seq"] >= self.first_seq:  # not one from before the phase
                self.delays_ms.append((now - value["t"]) * 1000)


@dataclass
class Round:
    produced: int
    late: int
    applied_ms: list[float]
    bare_ms: list[float]
    node_cpu_share: float  # of one core, over the phase
    ended: list[str]


def idle_cpu(pid: int, seconds: float) -> dict[str, float]:
    """The node's CPU over `seconds` as shares of one core, by thread name."""
    before = bench_scale.thread_cpu(pid)
    time.sleep(seconds)
    delta = bench_scale.cpu_delta(before, bench_scale.thread_cpu(pid))
    return {name: s / seconds for name, s in delta.items() if s > 0 or name.startswith("(")}


def one_round(
    args: argparse.Namespace,
    node: NodeProcess,
    producer: Producer,
    bootstrap: str,
    topic: str,
    bare_follows: list[TableDef],
) -> Round:
    assert node.pid is not None
    watch = ChangesWatch(node.port)
    if not watch.opened.wait(30):
        raise SystemExit(f"the changes watch did not open: {watch.ended}")
    bare = BareConsumer(bootstrap, bare_follows)
    time.sleep(SETTLE_S)  # the bare consumer's fetches under way before the first update
    first_seq = int(time.time() * 1000) * 1000  # above every earlier round's
    bare.first_seq = first_seq
    cpu0, t0 = bench_scale.cpu_seconds([node.pid]), time.monotonic()
    updates = Updates(producer, topic, args.keys, args.rate).start(first_seq)
    time.sleep(args.duration)
    updates.stop()
    time.sleep(DRAIN_S)
    share = (bench_scale.cpu_seconds([node.pid]) - cpu0) / (time.monotonic() - t0)
    bare.stop()
    watch.close()
    applied = [(got - sent) * 1000 for seq, sent, got in watch.events if seq >= first_seq]
    return Round(updates.produced, updates.late, applied, bare.delays_ms, share, watch.ended)


def by_thread(shares: dict[str, float]) -> str:
    return ", ".join(
        f"{name} {share:.1%}" for name, share in sorted(shares.items(), key=lambda kv: -kv[1])[:6]
    )


def line(name: str, values: list[float], produced: int) -> str:
    return (
        f"  {name:<34} p50 {pct(values, 0.5):6.1f}  p90 {pct(values, 0.9):6.1f}"
        f"  p99 {pct(values, 0.99):6.1f}  max {max(values, default=math.nan):6.1f} ms"
        f"  ({len(values):,} of {produced:,})"
    )


def add_idle_tables(
    bootstrap: str, app: str, producer: Producer, args: argparse.Namespace
) -> list[TableDef]:
    """`--idle-tables` tables of `--idle-partitions` partitions, `IDLE_RECORDS` records in
    each partition, registered for the node."""
    tables = [
        TableDef(f"idle{i}", f"{app}-idle{i}", args.idle_partitions, Format.STRING, Format.JSON)
        for i in range(args.idle_tables)
    ]
    for t in tables:
        create_topic(bootstrap, t.topic, t.partitions)
        for p in range(t.partitions):
            for i in range(IDLE_RECORDS):
                producer.produce(t.topic, value_of(-1, 0.0), key_of(i), partition=p)
    if producer.flush(120):
        raise SystemExit("the idle tables' values were not all delivered")
    for t in tables:
        register_table(bootstrap, t, app=app)
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="updates per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per round")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--broker", choices=["kafka", "dev"], default="kafka")
    parser.add_argument(
        "--settle", type=float, default=SETTLE_S, help="seconds after ready, before the idle CPU"
    )
    parser.add_argument("--idle-tables", type=int, default=0, help="tables not updated")
    parser.add_argument("--idle-partitions", type=int, default=50, help="of each idle table")
    parser.add_argument(
        "--bare",
        choices=["all", "table"],
        default="all",
        help="the bare consumer follows every partition the node holds, or the table's only",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sparkiq-bench-applylag-") as tmp:
        work = Path(tmp)
        with make_broker(args.broker) as broker:
            assert broker.pid is not None
            bootstrap = broker.bootstrap_servers
            app = f"applylag{uuid.uuid4().hex[:6]}"
            table = TableDef(TABLE, f"{app}-{TABLE}", args.partitions, Format.STRING, Format.JSON)
            create_topic(bootstrap, table.topic, args.partitions)
            producer = update_producer(bootstrap)
            for i in range(args.keys):
                producer.produce(table.topic, value_of(-1, 0.0), key_of(i))
            if producer.flush(60):
                raise SystemExit("the table's first values were not all delivered")
            register_table(bootstrap, table, app=app)
            idle_tables = add_idle_tables(bootstrap, app, producer, args)
            replicas = args.partitions + sum(t.partitions for t in idle_tables)
            bare_follows = [table, *idle_tables] if args.bare == "all" else [table]
            node = NodeProcess(
                port=free_port(),
                state_dir=work / "state",
                bootstrap_servers=bootstrap,
                app=app,
                log_path=work / "node.log",
                # Few connections: the open-file limit's room goes to the stores.
                extra_args=("--standby-replicas", "0", "--max-connections", "200"),
            )
            try:
                total = args.keys + IDLE_RECORDS * (replicas - args.partitions)
                rst = bench_scale.restore(node, broker.pid, total, 600)
                assert node.pid is not None
                print(
                    f"node ready in {rst.seconds:.1f} s ({rst.applied:,} records),"
                    f" {replicas:,} replicas; the bare consumer follows"
                    f" {sum(t.partitions for t in bare_follows):,} partitions",
                    flush=True,
                )
                # A node just ready flushes its restored stores (`Replica.settle`) meanwhile.
                time.sleep(args.settle)
                idle = idle_cpu(node.pid, args.idle)
                print(
                    f"idle node, {args.idle:.0f} s: CPU share of one core: {by_thread(idle)}"
                    " (python: the interpreter's threads)"
                )
                updates = Updates(producer, table.topic, args.keys, args.rate).start(0)
                busy = idle_cpu(node.pid, args.idle)
                updates.stop()
                print(
                    f"node applying {args.rate:.0f} updates/s, no watch, {args.idle:.0f} s:"
                    f" CPU share of one core: {by_thread(busy)}"
                )
                rounds: list[Round] = []
                for r in range(1, args.rounds + 1):
                    load0 = Path("/proc/loadavg").read_text().split()[0]
                    rounds.append(
                        one_round(args, node, producer, bootstrap, table.topic, bare_follows)
                    )
                    rd = rounds[-1]
                    print(
                        f"round {r}: {rd.produced:,} updates at {args.rate:.0f}/s"
                        f" ({rd.late} sent late), load average {load0},"
                        f" node CPU {rd.node_cpu_share:.1%} of one core"
                        + (f", watch ended: {rd.ended}" if rd.ended else "")
                    )
                    print(line("produce -> applied on the node", rd.applied_ms, rd.produced))
                    print(line("produce -> consumed, bare consumer", rd.bare_ms, rd.produced))
                if not node.is_running():
                    raise SystemExit(f"the node exited; its log:\n{bench_scale.log_tail(node)}")
                if args.rounds > 1:
                    applied = [x for rd in rounds for x in rd.applied_ms]
                    bare_all = [x for rd in rounds for x in rd.bare_ms]
                    produced = sum(rd.produced for rd in rounds)
                    print(f"all {args.rounds} rounds:")
                    print(line("produce -> applied on the node", applied, produced))
                    print(line("produce -> consumed, bare consumer", bare_all, produced))
                p99 = pct([x for rd in rounds for x in rd.applied_ms], 0.99)
                print(f"goal: p99 produce -> applied <= 20 ms: {'met' if p99 <= 20 else 'not met'}")
            finally:
                node.stop()


if __name__ == "__main__":
    main()
