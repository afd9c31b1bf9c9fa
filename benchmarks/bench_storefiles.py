"""A node holding many stores under a flood of idle connections: neither starves the other.

One `sparkiq serve` process on Apache Kafka (one KRaft node, started here), `--tables`
tables of `--partitions` partitions each, no standbys, so the node holds every partition: one
store each. Once it is ready (every store restored):

- the node's split of its open-file limit: its connection limit (`/metrics`) and the room
  for stores (`/v1/metadata`, `stores.capacity`), against the stores it holds;
- then `--connections` idle connections (default: the node's connection limit + 500) are
  opened at it, 200 at a time, while one keep-alive connection opened before the flood
  reads `--reads` keys spread over every partition, checked against what was produced;
- reported: the node's descriptors before and at the peak, connections held and refused
  (those past the limit are answered 503 and closed), reads that failed or were wrong, the
  node's storage faults, and any "Too many open files" in its log.

    .venv/bin/python benchmarks/bench_storefiles.py [--tables 40] [--partitions 15]
        [--connections N] [--reads 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx
from confluent_kafka import Producer

from sparkiq.core.openfiles import raise_open_file_limit
from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table

APP = "storefiles"
KEYS_PER_PARTITION = 20
AT_ONCE = 200


def node_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def produce(bootstrap: str, tables: list[TableDef]) -> dict[tuple[str, str], bytes]:
    """KEYS_PER_PARTITION keys per partition of each table (on average); key -> value."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    expected: dict[tuple[str, str], bytes] = {}
    for table in tables:
        for i in range(table.partitions * KEYS_PER_PARTITION):
            key = f"k{i:06d}"
            value = b'{"n": %d}' % i
            expected[(table.name, key)] = value
            while True:
                try:
                    producer.produce(table.topic, key=key.encode(), value=value)
                    break
                except BufferError:
                    producer.poll(0.1)
    assert producer.flush(120) == 0
    return expected


class Flood(threading.Thread):
    """Opens `count` idle connections to host:port, AT_ONCE at a time; keeps them."""

    def __init__(self, host: str, port: int, count: int) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.count = host, port, count
        self.sockets: list[socket.socket] = []
        self.failed = 0

    def run(self) -> None:
        async def one() -> None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            self.sockets.append(sock)
            try:
                await asyncio.get_running_loop().sock_connect(sock, (self.host, self.port))
            except OSError:
                self.failed += 1

        async def all_of_them() -> None:
            for start in range(0, self.count, AT_ONCE):
                n = min(AT_ONCE, self.count - start)
                await asyncio.gather(*(one() for _ in range(n)))
                await asyncio.sleep(0.05)

        asyncio.run(all_of_them())

    def held(self) -> int:
        """Connections the node has not closed (a refused one gets a 503 and EOF)."""
        alive = 0
        for sock in self.sockets:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                alive += 1
                continue
            except OSError:
                continue
            if not data:
                continue
        return alive

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=15)
    parser.add_argument("--connections", type=int, default=None)
    parser.add_argument("--reads", type=int, default=3_000)
    args = parser.parse_args()
    files = raise_open_file_limit()  # the node does the same; this process holds the flood
    base = Path(tempfile.mkdtemp(prefix="bench-storefiles-"))
    try:
        run(args, files, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(args: argparse.Namespace, files: int, base: Path) -> None:
    with KafkaBroker() as broker:
        bootstrap = broker.bootstrap_servers
        tables = [
            TableDef(
                f"t{i:03d}",
                f"{APP}-t{i:03d}",
                args.partitions,
                key_format=Format.STRING,
                value_format=Format.JSON,
            )
            for i in range(args.tables)
        ]
        for table in tables:
            create_topic(bootstrap, table.topic, table.partitions)
        expected = produce(bootstrap, tables)
        for table in tables:
            register_table(bootstrap, table, app=APP)
        env = {"SPARKIQ_STANDBY_REPLICAS": "0"}
        with LocalCluster(bootstrap, base, nodes=1, app=APP, env=env) as cluster:
            started = time.monotonic()
            cluster.wait_ready(timeout_s=600)
            node = cluster.nodes[0]
            assert node.pid is not None
            ready_s = time.monotonic() - started
            meta = node.http_get("/v1/metadata", 10.0).json()
            metrics = node.http_get("/metrics", 10.0).text
            limit = int(metric(metrics, "sparkiq_http_connections_limit"))
            stores = meta["stores"]
            files_ready = node_files(node.pid)
            flood = Flood(node.host, node.port, args.connections or limit + 500)
            sample = random.Random(3).sample(sorted(expected), min(args.reads, len(expected)))
            wrong = failed = 0
            peak = files_ready
            with httpx.Client(base_url=node.url, timeout=10.0) as client:
                assert client.get("/readyz").status_code == 200  # held before the flood
                flood.start()
                for i, (name, key) in enumerate(sample):
                    try:
                        answer = client.get(f"/v1/tables/{name}/keys/{key}")
                    except httpx.HTTPError:
                        failed += 1
                        continue
                    if answer.status_code != 200:
                        failed += 1
                    elif answer.json()["value"] != json.loads(expected[(name, key)]):
                        wrong += 1
                    if i % 50 == 0:
                        peak = max(peak, node_files(node.pid))
                flood.join()
                peak = max(peak, node_files(node.pid))
                time.sleep(1.0)
                held = flood.held()
                after = client.get("/metrics").text
            flood.close()
            log = node.log_path.read_text(errors="replace")
    print(f"open-file limit {files}; {len(tables)} tables x {args.partitions} partitions")
    print(
        f"stores open {stores['open']}, room for {stores['capacity']}; connection limit "
        f"{limit}; ready {ready_s:.1f} s after start"
    )
    print(
        f"node descriptors: {files_ready} when ready ({files_ready / stores['open']:.1f} per "
        f"store), peak {peak} during the flood"
    )
    print(
        f"connections asked {flood.count}: held {held}, refused "
        f"{metric(after, 'sparkiq_http_connections_refused_total'):.0f}, failed to connect "
        f"{flood.failed}"
    )
    print(
        f"reads during the flood: {len(sample)}, failed {failed}, wrong {wrong}; storage "
        f"faults {metric(after, 'sparkiq_storage_faults_total'):.0f}; 'Too many open files' "
        f"in the node's log: {log.count('Too many open files')}"
    )


if __name__ == "__main__":
    main()
