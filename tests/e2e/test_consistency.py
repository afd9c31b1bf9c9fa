"""End to end: consistency tokens keep reads monotonic across nodes and through a failover.

Three `sparkiq serve` processes, one standby per partition, a key updated every 20 ms. A
read from the key's active gives a value and its token; a read of the same key through its
standby's node with `after=` that token (and a lag bound wide enough that the standby could
answer from its own replica) must never be older. Then the active is killed (kill -9): reads
through the survivors with the newest token must never go back either, and the latest value
must arrive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "balances"
PARTITIONS = 4
KEY = "member-1"
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}
PATH = f"/v1/tables/{TABLE}/keys/{KEY}"


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, str]]:
    app = f"tokens{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-balances"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_seeded(bootstrap, topic, keys=200, updates=1, deletes=0, seed=8)  # every partition
    register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS), app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c, topic


class Updates(threading.Thread):
    """Sets KEY to {"n": 0, 1, 2, ...} every 20 ms until stopped; `last` is the newest sent."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
        self.topic = topic
        self.last = -1
        self.stopped = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            self.producer.produce(self.topic, key=KEY.encode(), value=orjson.dumps({"n": n}))
            self.producer.flush(10)
            self.last = n
            n += 1
            time.sleep(0.02)


def test_reads_after_a_token_never_go_back_across_nodes_and_a_failover(
    bootstrap: str, cluster: tuple[LocalCluster, str]
) -> None:
    c, topic = cluster
    updates = Updates(bootstrap, topic)
    updates.start()
    try:
        owner = c.nodes[0].http_get(f"{PATH}/owner", 5.0).json()
        active = next(n for n in c.nodes if n.url == owner["active"])
        standby = next(n for n in c.nodes if n.url in owner["standbys"])
        with httpx.Client(timeout=10.0) as http:
            while http.get(active.url + PATH).status_code != 200:
                time.sleep(0.1)
            reads = older_without = 0
            for _ in range(150):
                first = http.get(active.url + PATH).json()
                loose = http.get(standby.url + PATH, params={"max_lag": 1_000_000})
                tied = http.get(
                    standby.url + PATH, params={"max_lag": 1_000_000, "after": first["token"]}
                )
                assert tied.status_code == 200, tied.text
                assert tied.json()["value"]["n"] >= first["value"]["n"], (first, tied.json())
                reads += 1
                # Without the token the standby answers from its replica, even when behind.
                assert loose.status_code in (200, 404), loose.text
                if loose.status_code == 404:
                    older_without += 1  # the key had not reached it yet
                else:
                    older_without += loose.json()["value"]["n"] < first["value"]["n"]
            print(f"\n{reads} reads after a token, none older; {older_without} without were older")

            newest = http.get(active.url + PATH).json()
            seen, token = newest["value"]["n"], newest["token"]
            active.stop(kill=True)
            survivors = [n for n in c.nodes if n is not active]
            answered = unavailable = 0
            deadline = time.monotonic() + 90
            updates.stopped.set()
            updates.join()
            while True:
                assert time.monotonic() < deadline, f"the latest value never came; saw {seen}"
                for node in survivors:
                    r = http.get(node.url + PATH, params={"after": token})
                    if r.status_code == 503:
                        unavailable += 1
                        continue
                    assert r.status_code == 200, r.text
                    body = r.json()
                    assert body["value"]["n"] >= seen, f"{body} is older than n={seen}"
                    answered += 1
                    seen, token = body["value"]["n"], body["token"]
                if seen == updates.last:
                    break
                time.sleep(0.1)
            print(f"after the kill: {answered} answers, {unavailable} 503s, last n={seen}")
    finally:
        updates.stopped.set()
