"""End to end: a watch of a range of keys (`GET /v1/tables/{table}/changes?prefix=`) across
three `sparkiq serve` processes.

The table's partitions are spread over the three nodes, so the node the watch is opened on
reads some partitions from its own replicas and relays the others from the two other nodes.
Updates to keys inside and outside the prefix go to every partition; the watch must deliver
exactly the ones inside, each partition's in changelog order, each with its record's offset + 1.
Then the watch is closed, more updates are written, and it is resumed on ANOTHER node with the
id of the last event: exactly the missed changes must come (read again from the changelog by
the nodes that hold the partitions), then the live ones. The expected changes are the
producer's delivery reports (key, value, partition, offset), filtered in plain Python.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Message, Producer

from sparkiq.core import positions
from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.http.messages.sse import EventReader
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "scores"
PARTITIONS = 6
PREFIX = "in-"
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
    "SPARKIQ_WATCH_HEARTBEAT_S": "1",
}

Change = tuple[str, Any, int, int]  # key, value, partition, offset (the position after it)


class Stream(threading.Thread):
    """One watch of the prefix's changes, read into `changes` until stopped (no resume: the
    test resumes it itself)."""

    def __init__(self, url: str, last_event_id: str | None = None) -> None:
        super().__init__(daemon=True)
        self.url = f"{url}/v1/tables/{TABLE}/changes?prefix={PREFIX}"
        self.headers = {} if last_event_id is None else {"last-event-id": last_event_id}
        self.start_vector: dict[int, int] | None = None
        self.changes: list[Change] = []
        self.last_id: str | None = None
        self.other: list[str] = []  # names of events that are neither positions nor changes
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self.changed = threading.Condition()

    def run(self) -> None:
        try:
            timeout = httpx.Timeout(10.0, read=30.0)
            with (
                httpx.Client(timeout=timeout) as client,
                client.stream("GET", self.url, headers=self.headers) as response,
            ):
                assert response.status_code == 200, response.read()
                reader = EventReader()
                for chunk in response.iter_bytes():
                    for ev in reader.feed(chunk):
                        self._take(ev.name, ev.event_id, ev.data)
                    if self._stopping.is_set():
                        return
        except BaseException as exc:
            self.error = exc

    def _take(self, name: str, event_id: str | None, data: bytes) -> None:
        with self.changed:
            if name == "positions":
                self.start_vector = positions.decode(event_id or "")
            elif name == "message":
                doc = orjson.loads(data)
                vector = positions.decode(event_id or "")
                assert vector[doc["partition"]] == doc["offset"], (event_id, doc)
                self.changes.append((doc["key"], doc["value"], doc["partition"], doc["offset"]))
            else:
                self.other.append(name)
            self.last_id = event_id or self.last_id
            self.changed.notify_all()

    def wait_for(self, what: str, done: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not done():
                left = deadline - time.monotonic()
                assert left > 0, f"{what} never came: {len(self.changes)} changes, {self.other}"
                assert self.error is None, self.error
                self.changed.wait(min(left, 1.0))

    def stop(self) -> None:
        self._stopping.set()


class Writer:
    """Produces updates and keeps their delivery reports: what the changelog holds."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
        self.delivered: list[Change] = []

    def write(self, first: int, count: int) -> list[Change]:
        """`count` updates from number `first`: keys in and out of the prefix, every fifth
        one of a key inside deleted; their changes, in delivery order."""
        before = len(self.delivered)

        def on_delivery(err: Any, msg: Message) -> None:
            assert err is None, err
            raw = msg.value()
            value = None if raw is None else orjson.loads(raw)
            key = (msg.key() or b"").decode()
            self.delivered.append((key, value, msg.partition(), msg.offset() + 1))

        for n in range(first, first + count):
            key = f"{PREFIX if n % 2 else 'out-'}{n % 96}"
            value = None if n % 10 == 9 else orjson.dumps({"n": n})
            self.producer.produce(
                self.topic, key=key.encode(), value=value, on_delivery=on_delivery
            )
            if n % 20 == 19:
                self.producer.flush(10)  # keeps each partition's order as produced
        self.producer.flush(10)
        return self.delivered[before:]


def inside(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c[0].startswith(PREFIX)]


def by_partition(changes: list[Change]) -> dict[int, list[Change]]:
    out: dict[int, list[Change]] = {}
    for c in changes:
        out.setdefault(c[2], []).append(c)
    return out


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, str]]:
    app = f"changes{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-scores"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_seeded(bootstrap, topic, keys=200, updates=1, deletes=0, seed=7)  # every partition
    register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS), app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c, topic


def test_a_watch_of_a_prefix_sees_exactly_its_changes_and_resumes_on_another_node(
    bootstrap: str, cluster: tuple[LocalCluster, str]
) -> None:
    c, topic = cluster
    writer = Writer(bootstrap, topic)
    first = Stream(c.nodes[0].url)
    first.start()
    try:
        first.wait_for("the positions event", lambda: first.start_vector is not None, 30)
        assert first.start_vector is not None
        assert set(first.start_vector) == set(range(PARTITIONS))
        expected = inside(writer.write(0, 240))
        assert {c[2] for c in expected} == set(range(PARTITIONS)), "some partition got none"
        first.wait_for("the first changes", lambda: len(first.changes) >= len(expected), 60)
        time.sleep(1.0)  # nothing more may come
        assert by_partition(first.changes) == by_partition(expected)
        assert first.other == []
        last = first.last_id
    finally:
        first.stop()
    first.join(5)  # its next heartbeat ends it
    assert last is not None
    vector = positions.decode(last)
    for p, changes in by_partition(expected).items():
        assert vector[p] >= changes[-1][3]

    missed = inside(writer.write(240, 240))  # while nobody watches
    resumed = Stream(c.nodes[1].url, last)
    resumed.start()
    try:
        resumed.wait_for("the missed changes", lambda: len(resumed.changes) >= len(missed), 60)
        assert resumed.start_vector == positions.decode(last)
        live = inside(writer.write(480, 120))
        want = missed + live
        resumed.wait_for("the live changes", lambda: len(resumed.changes) >= len(want), 60)
        time.sleep(1.0)
        assert by_partition(resumed.changes) == by_partition(want)
        assert resumed.other == []
    finally:
        resumed.stop()
    print(
        f"\nwatch of {PREFIX!r}: {len(first.changes)} changes on {c.nodes[0].url}, then "
        f"{len(resumed.changes)} resumed on {c.nodes[1].url}"
    )
