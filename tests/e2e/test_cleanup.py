"""End to end: the stores of partitions that moved away are deleted after the cleanup delay,
and a partition that comes back before it resumes from its checkpoint.

Two `sparkiq serve` processes with no standbys (so every partition lives on exactly one
node) and a short `--state-cleanup-delay-s`. A third node joins and takes partitions from
both; it leaves again before the delay is over and they come back to the first two, which
replay only what was written meanwhile. Then a fourth joins and stays: once the delay is
over the first two hold on disk exactly the partitions they serve, and every key still
answers right from every node. The tests share the cluster and run in file order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.http.messages.models import Metadata
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, fetch_all, mismatches, produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "items"
PARTITIONS = 6
KEYS = 3_000
TAIL = 300  # records written while the third node holds its partitions
DELAY_S = 15
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "0",
    "SPARKIQ_STATE_CLEANUP_DELAY_S": str(DELAY_S),
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    return f"cleanup{int(time.time() * 1000) % 10**9}-items"


@pytest.fixture(scope="module")
def oracle(bootstrap: str, topic: str) -> Oracle:
    create_topic(bootstrap, topic, PARTITIONS)
    return produce_seeded(bootstrap, topic, keys=KEYS, updates=2, deletes=200, seed=5)


@pytest.fixture(scope="module")
def cluster(
    bootstrap: str, topic: str, oracle: Oracle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    app = topic.partition("-")[0]
    register_table(
        bootstrap,
        TableDef(TABLE, topic, PARTITIONS, key_format=Format.STRING, value_format=Format.JSON),
        app=app,
    )
    base: Path = tmp_path_factory.mktemp("cleanup")
    with LocalCluster(bootstrap, base, nodes=2, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c


def metadata(node: NodeProcess) -> dict[str, Any]:
    meta: dict[str, Any] = node.http_get("/v1/metadata", 5.0).json()
    return meta


def held(meta: dict[str, Any]) -> set[int]:
    return {r["partition"] for r in meta["local"] if r["table"] == TABLE}


def on_disk(node: NodeProcess) -> set[int]:
    return {int(p.name) for p in (node.state_dir / TABLE).iterdir() if p.name.isdigit()}


def check_every_key(nodes: list[NodeProcess], oracle: Oracle) -> None:
    keys = sorted(oracle.latest) + sorted(oracle.deleted)
    for node in nodes:
        answers = asyncio.run(fetch_all(node.url, TABLE, keys))
        assert len(answers) == len(keys)
        assert mismatches(answers, oracle) == [], f"node {node.url}"


def produce_tail(bootstrap: str, topic: str, oracle: Oracle) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None
        oracle.apply(msg.key().decode(), orjson.loads(msg.value()), msg.partition())

    for i in range(TAIL):
        key = f"k{i * 7:06d}"
        value = orjson.dumps({"key": key, "tail": i})
        producer.produce(topic, key=key.encode(), value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0


def test_a_partition_back_before_the_delay_resumes_from_its_checkpoint(
    cluster: LocalCluster, oracle: Oracle, bootstrap: str, topic: str
) -> None:
    a, b = cluster.nodes
    before = {n.url: metadata(n) for n in (a, b)}
    assert held(before[a.url]) | held(before[b.url]) == set(range(PARTITIONS))

    c = cluster.add_node()
    cluster.wait_settled(timeout_s=90)
    moved_at = time.time()
    away: dict[str, set[int]] = {}
    for node in (a, b):
        meta = metadata(node)
        Metadata.model_validate(meta)  # the answer's documented shape (OpenAPI)
        away[node.url] = held(before[node.url]) - held(meta)
        pending = {p["partition"]: p for p in meta["cleanup"]["pending"]}
        # Closed at once, listed with when it goes, still on disk until then.
        assert set(pending) == away[node.url], meta["cleanup"]
        for p in pending.values():
            assert not p["quarantined"]
            assert p["delete_at_ms"] - p["closed_ms"] == DELAY_S * 1000
        assert on_disk(node) == held(before[node.url])
    assert away[a.url] | away[b.url], "the third node took no partition"
    restored = {n.url: metadata(n)["restored_records"] for n in (a, b)}

    produce_tail(bootstrap, topic, oracle)
    c.stop()  # it leaves the group: its partitions come back
    cluster.wait_settled(timeout_s=60)
    assert time.time() - moved_at < DELAY_S, "too slow to test a return within the delay"

    back = 0
    for node in (a, b):
        meta = metadata(node)
        now_held = held(meta)
        returned = now_held & away[node.url]
        fresh = now_held - held(before[node.url])  # never on this node: restored whole
        back += len(returned)
        whole = sum(oracle.produced_per_partition.get(p, 0) for p in fresh)
        applied = meta["restored_records"] - restored[node.url]
        # The tail, not the whole partitions the stores on disk held.
        assert applied <= TAIL + whole, (node.url, returned, fresh, applied)
        assert meta["cleanup"]["deleted"] == 0
        assert {p["partition"] for p in meta["cleanup"]["pending"]} == on_disk(node) - now_held
    assert back, "no partition came back to the node that had its store"
    check_every_key([a, b], oracle)


def test_stores_moved_away_are_deleted_after_the_delay(
    cluster: LocalCluster, oracle: Oracle
) -> None:
    a, b = cluster.nodes[:2]
    d = cluster.add_node()
    cluster.wait_settled(timeout_s=90)
    deadline = time.monotonic() + DELAY_S + 30
    while True:
        metas = {n.url: metadata(n) for n in (a, b)}
        if all(on_disk(n) == held(metas[n.url]) for n in (a, b)):
            break
        assert time.monotonic() < deadline, {
            n.url: (sorted(on_disk(n)), sorted(held(metas[n.url]))) for n in (a, b)
        }
        time.sleep(0.5)
    deleted = 0
    for node in (a, b):
        meta = metadata(node)
        assert meta["cleanup"]["pending"] == []
        deleted += meta["cleanup"]["deleted"]
        metrics = node.http_get("/metrics", 5.0).text
        assert f"sparkiq_store_cleanups_total {float(meta['cleanup']['deleted'])}" in metrics
    assert deleted >= len(held(metadata(d))) > 0
    check_every_key([a, b, d], oracle)
