"""End to end: a watch of a key opened on a node that holds no replica of it.

Three `sparkiq serve` processes, one standby per partition. The watch goes to the node that
is neither the key's active nor its standby, so every event is relayed. It must see the
key's value, then each of 40 updates in order; after a kill -9 of the active it must go on
(from the standby, then from whoever the group makes active) and see every later value,
never an older one after a newer one. The watcher here resumes with Last-Event-ID when a
stream ends, as a client does.
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
from confluent_kafka import Producer

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.http.messages.sse import EventReader
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "scores"
PARTITIONS = 4
KEY = "player-1"
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
    "SPARKIQ_WATCH_HEARTBEAT_S": "1",
}


class Watcher(threading.Thread):
    """Reads a watch's events into `seen` ((id, n) per event); resumes ended streams."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = f"{url}/v1/tables/{TABLE}/keys/{KEY}/watch"
        self.seen: list[tuple[str, int | None]] = []
        self.streams = 0
        self.ended: list[str] = []  # the names of the last events of ended streams
        self._stop = threading.Event()
        self.changed = threading.Condition()

    def run(self) -> None:
        last: str | None = None
        with httpx.Client(timeout=httpx.Timeout(10.0, read=30.0)) as client:
            while not self._stop.is_set():
                headers = {} if last is None else {"last-event-id": last}
                try:
                    with client.stream("GET", self.url, headers=headers) as response:
                        if response.status_code != 200:
                            time.sleep(0.5)
                            continue
                        self.streams += 1
                        reader = EventReader()
                        for chunk in response.iter_bytes():
                            for ev in reader.feed(chunk):
                                if ev.name != "message":
                                    self.ended.append(ev.name)
                                    continue
                                value: Any = orjson.loads(ev.data)["value"]
                                last = ev.event_id
                                with self.changed:
                                    self.seen.append((ev.event_id or "", value and value["n"]))
                                    self.changed.notify_all()
                            if self._stop.is_set():
                                return
                except httpx.HTTPError:
                    time.sleep(0.5)

    def wait_for(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not any(value == n for _, value in self.seen):
                left = deadline - time.monotonic()
                assert left > 0, f"n={n} never came; saw {self.seen[-5:]}"
                self.changed.wait(left)

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, str]]:
    app = f"watch{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-scores"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_seeded(bootstrap, topic, keys=200, updates=1, deletes=0, seed=5)  # every partition
    register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS), app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c, topic


def produce(producer: Producer, topic: str, n: int) -> None:
    producer.produce(topic, key=KEY.encode(), value=orjson.dumps({"n": n}))
    producer.flush(10)


def test_a_relayed_watch_sees_every_update_in_order_through_a_kill_of_the_owner(
    bootstrap: str, cluster: tuple[LocalCluster, str]
) -> None:
    c, topic = cluster
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    produce(producer, topic, 0)
    owner = c.nodes[0].http_get(f"/v1/tables/{TABLE}/keys/{KEY}/owner", 5.0).json()
    holders = {owner["active"], *owner["standbys"]}
    reader = next(n for n in c.nodes if n.url not in holders)
    active = next(n for n in c.nodes if n.url == owner["active"])
    deadline = time.monotonic() + 30
    while reader.http_get(f"/v1/tables/{TABLE}/keys/{KEY}", 5.0).status_code != 200:
        assert time.monotonic() < deadline, "the first value never became readable"
        time.sleep(0.2)

    watcher = Watcher(reader.url)
    watcher.start()
    try:
        watcher.wait_for(0, timeout_s=30)
        for n in range(1, 41):
            produce(producer, topic, n)
        watcher.wait_for(40, timeout_s=30)
        assert [n for _, n in watcher.seen] == list(range(41))
        assert watcher.streams == 1

        active.stop(kill=True)
        for n in range(41, 61):  # while the cluster notices and moves the partition
            produce(producer, topic, n)
            time.sleep(0.2)
        watcher.wait_for(60, timeout_s=90)
    finally:
        watcher.stop()
    values = [n for _, n in watcher.seen]
    positions = [int(event_id.rpartition("-")[2]) for event_id, _ in watcher.seen]
    print(
        f"\nwatch through {reader.url}: {len(values)} events, {watcher.streams} streams, "
        f"ended: {watcher.ended}"
    )
    assert values == sorted(values), "an older value came after a newer one"
    assert positions == sorted(set(positions)), "an event id repeated or went back"
    assert values[:41] == list(range(41))
    assert values[-1] == 60
