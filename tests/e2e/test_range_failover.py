"""End to end: a range read while a partition's active is dead, before the group notices.

Three nodes, one standby per partition, a long session timeout (the map keeps naming the
dead node for the whole test). After a kill -9 of node A, a range over the whole table
through node B must be answered within the request budget, from the standby of each of A's
partitions wherever it is: on B itself, or on the third node C, asked as a stand-in. The
pages must equal the oracle, and the group must still be at the generation it had (so the
answer did not wait for a rebalance).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "items"
PARTITIONS = 6
BUDGET_S = 5.0  # the nodes' request budget (the default)
NODE_ENV = {
    "SPARKIQ_SESSION_TIMEOUT_MS": "45000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "1000",
    "SPARKIQ_STANDBY_REPLICAS": "1",
}


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, Oracle]]:
    app = f"rangefo{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-items"
    create_topic(bootstrap, topic, PARTITIONS)
    oracle = produce_seeded(bootstrap, topic, keys=3_000, updates=2, deletes=150, seed=31)
    register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS), app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c, oracle


def pick(nodes: list[NodeProcess], meta: dict[str, Any]) -> tuple[NodeProcess, NodeProcess]:
    """(victim A, reader B) such that some partition of A's has its standby on C, not B."""
    by_url = {n.url: n for n in nodes}
    for a, b in itertools.permutations(by_url, 2):
        if any(p["active"] == a and b not in p["standbys"] for p in meta["partitions"]):
            return by_url[a], by_url[b]
    raise AssertionError(f"no partition of one node has its standby on a third: {meta}")


def read_range(url: str) -> tuple[list[tuple[str, Any]], float, bool]:
    """Every item of the table through `url`, page by page; the slowest page; any standby."""
    items: list[tuple[str, Any]] = []
    cursor: str | None = None
    slowest = 0.0
    standby = False
    with httpx.Client(timeout=BUDGET_S + 5) as client:
        while True:
            params = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
            started = time.monotonic()
            r = client.get(f"{url}/v1/tables/{TABLE}/range", params=params)
            slowest = max(slowest, time.monotonic() - started)
            assert r.status_code == 200, r.text
            doc = r.json()
            items.extend((item["key"], item["value"]) for item in doc["items"])
            standby = standby or doc["standby"]
            cursor = doc["next_cursor"]
            if cursor is None:
                return items, slowest, standby


def test_a_range_is_answered_by_standbys_on_any_node_before_the_rebalance(
    cluster: tuple[LocalCluster, Oracle],
) -> None:
    c, oracle = cluster
    meta = c.nodes[0].http_get("/v1/metadata", 5.0).json()
    victim, reader = pick(c.nodes, meta)
    generation = meta["generation"]
    victim.stop(kill=True)
    items, slowest, standby = read_range(reader.url)
    after = reader.http_get("/v1/metadata", 5.0).json()
    print(f"\nrange of {len(items)} items through {reader.url}; slowest page {slowest:.2f} s")
    assert after["generation"] == generation, "the group rebalanced before the answer"
    assert victim.url in {n["url"] for n in after["nodes"]}
    assert items == oracle.sorted_items()
    assert standby, "no page said a standby answered"
    assert slowest < BUDGET_S
