"""End to end: a global table is held whole by every node and answered without forwarding.

Three `sparkiq serve` processes and a global table of four partitions. Every node restores
every partition and answers every key from its own copy: each node's answers equal the
oracle and its `forwarded` request count stays 0. Then a node is killed (kill -9): the
survivors go on answering every key, still locally, while the group notices and rebalances.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sparkiq.core.tables import TableDef, TableKind
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, fetch_all, mismatches, produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "stores"
PARTITIONS = 4
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, Oracle]]:
    app = f"global{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-stores"
    create_topic(bootstrap, topic, PARTITIONS)
    oracle = produce_seeded(bootstrap, topic, keys=300, updates=2, deletes=20, seed=25)
    register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS, kind=TableKind.GLOBAL), app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c, oracle


def forwarded(node: NodeProcess) -> float:
    """The node's answers passed on from another node, all endpoints and statuses."""
    total = 0.0
    for line in node.http_get("/metrics", 5.0).text.splitlines():
        if line.startswith("sparkiq_requests_total{") and 'outcome="forwarded"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def local_partitions(node: NodeProcess) -> dict[int, str]:
    meta = node.http_get("/v1/metadata", 5.0).json()
    return {r["partition"]: r["state"] for r in meta["local"] if r["table"] == TABLE}


def check_every_key(nodes: list[NodeProcess], oracle: Oracle) -> None:
    keys = sorted(oracle.partition_of)
    for node in nodes:
        answers = asyncio.run(fetch_all(node.url, TABLE, keys))
        assert not mismatches(answers, oracle), (node.url, mismatches(answers, oracle))
        assert {body.get("node") for status, body in answers.values() if status == 200} == {
            node.url
        }


def test_every_node_answers_every_key_itself_and_through_a_kill(
    cluster: tuple[LocalCluster, Oracle],
) -> None:
    c, oracle = cluster
    nodes = list(c.nodes)
    meta = nodes[0].http_get("/v1/metadata", 5.0).json()
    assert {t["name"]: t["kind"] for t in meta["tables"]} == {TABLE: "global"}
    for p in (p for p in meta["partitions"] if p["table"] == TABLE):
        assert {p["active"], *p["standbys"]} == set(c.urls)  # held by every node
    for node in nodes:
        assert local_partitions(node) == dict.fromkeys(range(PARTITIONS), "active")

    check_every_key(nodes, oracle)
    # A range across all partitions is read from the node's own copies as well.
    for node in nodes:
        page = node.http_get(f"/v1/tables/{TABLE}/range?limit=1000", 10.0).json()
        assert [(i["key"], i["value"]) for i in page["items"]] == oracle.sorted_items()
    assert [forwarded(n) for n in nodes] == [0, 0, 0]

    # kill -9 the node that is the map's active of the most partitions.
    actives = [p["active"] for p in meta["partitions"]]
    victim = max(nodes, key=lambda n: actives.count(n.url))
    victim.stop(kill=True)
    survivors = [n for n in nodes if n is not victim]
    # At once (the group has not noticed yet) and after the rebalance: every key, locally.
    check_every_key(survivors, oracle)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = survivors[0].http_get("/v1/metadata", 5.0).json()
        if {n["url"] for n in meta["nodes"]} == {n.url for n in survivors}:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the survivors' map still names the killed node")
    check_every_key(survivors, oracle)
    assert [forwarded(n) for n in survivors] == [0, 0]
    with httpx.Client() as http:
        for node in survivors:
            assert http.get(f"{node.url}/readyz", timeout=5).status_code == 200


def test_the_last_survivor_answers_every_key_itself_at_once(
    cluster: tuple[LocalCluster, Oracle],
) -> None:
    """kill -9 all nodes but one: the survivor answers every key from its own copy, also
    for partitions whose active and standby were both on killed nodes, before and after the
    group notices, without forwarding and without waiting."""
    c, oracle = cluster
    nodes = list(c.nodes)
    for node in nodes:
        assert local_partitions(node) == dict.fromkeys(range(PARTITIONS), "active")
    meta = nodes[0].http_get("/v1/metadata", 5.0).json()
    held = {p["partition"]: {p["active"], *p["standbys"]} for p in meta["partitions"]}
    actives = {p["partition"]: p["active"] for p in meta["partitions"]}
    # The survivor: the node that is the map's active of the fewest partitions.
    survivor = min(nodes, key=lambda n: list(actives.values()).count(n.url))
    assert any(url != survivor.url for url in actives.values())
    for node in nodes:
        if node is not survivor:
            node.stop(kill=True)
    started = time.monotonic()
    check_every_key([survivor], oracle)
    assert time.monotonic() - started < 5.0  # nothing waited on a dead node
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        check_every_key([survivor], oracle)  # and all the while the group rebalances
        meta = survivor.http_get("/v1/metadata", 5.0).json()
        if [n["url"] for n in meta["nodes"]] == [survivor.url]:
            break
    else:
        pytest.fail("the survivor's map still names the killed nodes")
    check_every_key([survivor], oracle)
    assert forwarded(survivor) == 0
    assert held  # every partition was held by every node before the kills
