"""End to end: nodes stopped with SIGTERM while watches, relays and a restore are in flight
stop cleanly: exit 0 within a few seconds, nothing in their logs but their own lines (no
traceback, no Python warning such as a coroutine "never awaited").

Two `sparkiq serve` processes, no standbys, so each partition is on one node: watches of
ranges opened on the first node relay the second's partitions, watches of keys are relayed
or local. Then a third node joins with an empty state dir while the table has a backlog, and
all three are told to stop while it restores.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "scores"
PARTITIONS = 4
BACKLOG = 400_000  # records the joining node restores: about a second of work
STOP_S = 10.0  # every node gone within this many seconds of SIGTERM
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "0",
    "SPARKIQ_WATCH_HEARTBEAT_S": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}
# What a clean stop never writes: a traceback, a Python warning (`RuntimeWarning: coroutine
# ... was never awaited`, `ResourceWarning: ...`), a task or generator left to the collector.
NOT_CLEAN = re.compile(
    r"Traceback|[A-Za-z]+Warning: |never awaited|Task was destroyed|Exception ignored"
    r"|an error occurred during closing"
)


class EventStream(threading.Thread):
    """Reads one watch's stream until it ends (the node stops); `began` once a first event
    came (for a range: its `positions` event, so every partition's source, relays
    included, is open)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.began = threading.Event()
        self.received = b""

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10.0, read=60.0)) as client,
                client.stream("GET", self.url) as response,
            ):
                for chunk in response.iter_bytes():
                    self.received += chunk
                    if b"\ndata: " in self.received:
                        self.began.set()
        except httpx.HTTPError:
            pass  # the node stopped mid-stream: what this test makes it do


def key_in(table: TableDef, partitions: set[int]) -> str:
    return next(
        key
        for key in (f"k{i:06d}" for i in range(10_000))
        if table.partition_of(key.encode()) in partitions
    )


def joined(node: NodeProcess) -> bool:
    """Whether `node` has joined the group: its restore of what it was given begins."""
    return "joined group" in node.log_path.read_text(errors="replace")


def produce_backlog(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "partitioner": "murmur2_random"}
    )
    value = b'{"n": 1, "pad": "' + b"x" * 60 + b'"}'
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=b"bulk-%d" % (i % 50_000), value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def test_nodes_stopped_amid_watches_relays_and_a_restore_exit_cleanly(
    bootstrap: str, tmp_path: Path
) -> None:
    app = f"stops{int(time.time() * 1000) % 10**9}"
    table = TableDef(TABLE, f"{app}-scores", PARTITIONS)
    create_topic(bootstrap, table.topic, PARTITIONS)
    produce_seeded(bootstrap, table.topic, keys=200, updates=1, deletes=0, seed=7)
    register_table(bootstrap, table, app=app)
    cluster = LocalCluster(bootstrap, tmp_path, nodes=2, app=app, env=NODE_ENV)
    cluster.start()
    try:
        cluster.wait_settled(timeout_s=120)
        a, b = cluster.nodes
        meta = a.http_get("/v1/metadata", 5.0).json()
        on_b = {p["partition"] for p in meta["partitions"] if p["active"] == b.url}
        on_a = set(range(PARTITIONS)) - on_b
        assert on_a, meta["partitions"]
        assert on_b, meta["partitions"]
        base = f"/v1/tables/{TABLE}"
        streams = [
            EventStream(f"{a.url}{base}/changes?prefix=k"),  # relays b's partitions
            EventStream(f"{a.url}{base}/changes?from=k000000&to=k000099"),
            EventStream(f"{b.url}{base}/changes?prefix=k0"),  # relays a's partitions
            EventStream(f"{a.url}{base}/keys/{key_in(table, on_b)}/watch"),  # relayed
            EventStream(f"{a.url}{base}/keys/{key_in(table, on_a)}/watch"),  # local
            # Many relays end and start again together as the nodes leave: the moment a
            # watch's tasks were once cancelled before they ran ("never awaited").
            *(EventStream(f"{n.url}{base}/changes?prefix=k00") for n in (a, b) for _ in range(8)),
        ]
        for stream in streams:
            stream.start()
        for stream in streams:
            assert stream.began.wait(30), f"{stream.url} never began: {stream.received[:300]!r}"

        produce_backlog(bootstrap, table.topic, BACKLOG)
        c = cluster.add_node()
        deadline = time.monotonic() + 90
        while not joined(c):
            assert c.is_running(), f"the third node exited; see {c.log_path}"
            assert time.monotonic() < deadline, "the third node never joined"
            time.sleep(0.01)

        told = time.monotonic()
        for node in (c, a, b):  # the restoring one first: it is told mid-restore
            node.terminate()
        for node in cluster.nodes:
            assert node.proc is not None
            left = max(STOP_S - (time.monotonic() - told), 0.1)
            code = node.proc.wait(timeout=left)
            assert code == 0, f"{node.url} exited with {code}; see {node.log_path}"
        took = time.monotonic() - told
        print(f"\nthree nodes stopped in {took:.2f}s after SIGTERM")
    finally:
        cluster.stop()
    for node in cluster.nodes:
        text = node.log_path.read_text(errors="replace")
        bad = [line for line in text.splitlines() if NOT_CLEAN.search(line)]
        assert not bad, f"{node.log_path}:\n" + "\n".join(bad[:20])
        assert "stopped" in text.splitlines()[-1], text.splitlines()[-3:]
