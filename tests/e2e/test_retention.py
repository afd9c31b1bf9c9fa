"""End to end: a windowed table with a retention keeps only the windows within it.

A windowed table (1-minute windows, 2-minute retention) is fed six minutes of windows, in
data time: three minutes before three `sparkiq serve` processes start (they expire while
they restore), three while they run, then late updates of windows long expired. Every node
must end up answering, for every key, exactly the windows the oracle keeps (those ending no
earlier than two minutes before the newest window end of the key's partition); once the
nodes are stopped, each store holds exactly that many keys; the changelog topic deletes by
age as well as compacting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.core.partitioner import partition_for
from sparkiq.core.serde import window_wire_key
from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import topic_config
from sparkiq.node.stores.registry import StoreRegistry
from sparkiq.spark.materialize import define_table, prepare_table

pytestmark = pytest.mark.e2e

MINUTE = 60_000
BASE = 1_790_000_000_000 // MINUTE * MINUTE  # data time of the first window
PARTITIONS = 3
STORES = [f"store-{i:02d}" for i in range(24)]
NODE_ENV = {"SPARKIQ_STANDBY_REPLICAS": "1"}


class Feed:
    """Produces window records and keeps, per partition, what the nodes must hold."""

    def __init__(self, bootstrap: str, table: TableDef) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.table = table
        self.topic = table.topic
        self.windows: dict[str, dict[int, dict[str, int]]] = {}  # key -> start -> value

    def minute(self, m: int, *, keys: list[str] = STORES, late: bool = False) -> None:
        for i, key in enumerate(keys):
            start = BASE + m * MINUTE
            value = {"sales": m * 100 + i, "late": late}
            wire = window_wire_key(key.encode(), start)
            self.producer.produce(
                self.topic,
                key=wire,
                value=orjson.dumps(value),
                partition=partition_for(key.encode(), PARTITIONS),
            )
            self.windows.setdefault(key, {})[start] = value
        assert self.producer.flush(30) == 0

    def kept(self) -> dict[str, dict[int, dict[str, int]]]:
        """Per key, the windows within the retention of its partition's newest window."""
        newest: dict[int, int] = {}
        for key, windows in self.windows.items():
            p = partition_for(key.encode(), PARTITIONS)
            newest[p] = max(newest.get(p, BASE), *windows)
        return {
            key: {
                s: v
                for s, v in windows.items()
                if s >= newest[partition_for(key.encode(), PARTITIONS)] - 2 * MINUTE
            }
            for key, windows in self.windows.items()
        }


@pytest.fixture
def app() -> str:
    return f"keep{int(time.time() * 1000) % 10**9}"


@pytest.fixture
def feed(bootstrap: str, app: str) -> Feed:
    table = define_table(
        "sales", window_size="1 minute", retention="2 minutes", partitions=PARTITIONS, app=app
    )
    prepare_table(bootstrap, table, app=app)
    return Feed(bootstrap, table)


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path, app: str, feed: Feed) -> Iterator[LocalCluster]:
    for m in range(3):  # before the nodes start: expired while restoring
        feed.minute(m)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c


def windows_of(node: NodeProcess, key: str) -> dict[int, dict[str, int]]:
    body = node.http_get(f"/v1/tables/sales/keys/{key}/windows", 5.0).json()
    assert all(w["end"] - w["start"] == MINUTE for w in body["items"])
    return {w["start"]: w["value"] for w in body["items"]}


def wrong_answers(
    nodes: list[NodeProcess], kept: dict[str, dict[int, dict[str, int]]]
) -> list[str]:
    wrong = []
    for node in nodes:
        for key, want in kept.items():
            got = windows_of(node, key)
            if got != want:
                wrong.append(f"{node.url} {key}: {sorted(got)} != {sorted(want)}")
    return wrong


def test_only_windows_within_the_retention_stay_on_every_node(
    bootstrap: str, cluster: LocalCluster, feed: Feed, tmp_path: Path
) -> None:
    config = topic_config(bootstrap, feed.topic)
    assert config["cleanup.policy"] == "compact,delete"
    assert int(config["retention.ms"]) >= 2 * MINUTE

    for m in range(3, 6):  # while the nodes run
        feed.minute(m)
    feed.minute(1, keys=STORES[:5], late=True)  # late updates of windows already expired
    kept = feed.kept()
    assert {len(w) for w in kept.values()} == {3}  # minutes 3, 4 and 5 of every store
    nodes = list(cluster.nodes)
    deadline = time.monotonic() + 90
    wrong = wrong_answers(nodes, kept)
    while wrong and time.monotonic() < deadline:
        time.sleep(1.0)
        wrong = wrong_answers(nodes, kept)
    assert not wrong, wrong[:5]
    removed = [
        float(line.rsplit(" ", 1)[1])
        for node in nodes
        for line in node.http_get("/metrics", 5.0).text.splitlines()
        if line.startswith("sparkiq_windows_expired_total ")
    ]
    assert len(removed) == 3
    assert all(n > 0 for n in removed)

    held = {
        node.state_dir: [r["partition"] for r in node.http_get("/v1/metadata", 5.0).json()["local"]]
        for node in nodes
    }
    cluster.stop()
    for state_dir, partitions in held.items():
        assert sorted(partitions) == sorted(set(partitions))
        registry = StoreRegistry(state_dir)
        try:
            for p in partitions:
                store = registry.open(feed.table, p)
                want = sum(
                    len(w) for k, w in kept.items() if partition_for(k.encode(), PARTITIONS) == p
                )
                assert len(store.scan(limit=1_000_000)) == want, (state_dir, p)
        finally:
            registry.close_all()
