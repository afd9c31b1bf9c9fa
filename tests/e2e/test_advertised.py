"""End to end: two nodes that advertise one URL are never merged.

Node A and node B both say `--advertised-url` A's URL (as two hosts that each listen on
0.0.0.0:8100 would). B started later: it must hold nothing, say why on `/readyz`, and
`/v1/metadata` and `sparkiq cluster` must show the conflict, while A and a third node C
serve every key right.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import NodeProcess, stop_nodes
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, fetch_all, mismatches, produce_seeded

pytestmark = pytest.mark.e2e


def wait_for(what: str, check: object, timeout_s: float = 90.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def setup(
    bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[NodeProcess], Oracle]]:
    app = f"e2eadv{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-items"
    create_topic(bootstrap, topic, 4)
    oracle = produce_seeded(bootstrap, topic, keys=2_000, updates=2, deletes=100, seed=3)
    register_table(bootstrap, TableDef("items", topic, 4), app=app)
    base: Path = tmp_path_factory.mktemp("advertised")
    ports = [free_port() for _ in range(3)]
    shared_url = f"http://127.0.0.1:{ports[0]}"
    nodes = [
        NodeProcess(
            port=port,
            state_dir=base / f"node{i}",
            bootstrap_servers=bootstrap,
            app=app,
            log_path=base / f"node{i}.log",
            # a and b claim one URL; c its own
            extra_args=("--advertised-url", shared_url) if i < 2 else (),
        )
        for i, port in enumerate(ports)
    ]
    try:
        nodes[0].start()
        wait_for("node a ready", nodes[0].is_ready)
        nodes[2].start()
        nodes[1].start()  # b starts last: the URL is a's
        yield nodes, oracle
    finally:
        stop_nodes(nodes)


def test_the_later_node_is_refused_and_says_why(
    setup: tuple[list[NodeProcess], Oracle],
) -> None:
    nodes, _ = setup
    a, b, c = nodes

    def refused() -> bool:
        try:
            r = b.http_get("/readyz", 2.0)
            return r.status_code == 503 and "advertises the same URL" in r.text
        except httpx.HTTPError:
            return False

    wait_for("b refused", refused)
    wait_for("a and c ready", lambda: a.is_ready() and c.is_ready())
    meta = a.http_get("/v1/metadata", 5.0).json()
    assert [n["url"] for n in meta["nodes"]] == sorted([a.url, c.url])
    assert meta["refused"] == [
        {"node_id": b.http_get("/v1/metadata", 5.0).json()["node_id"], "url": a.url}
    ]
    shown = subprocess.run(
        [sys.executable, "-m", "sparkiq", "cluster", "--url", a.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"CONFLICT: node {meta['refused'][0]['node_id']} advertises {a.url}" in shown.stdout
    assert "holds no partitions" in b.log_path.read_text()


def test_every_key_is_right_from_the_nodes_that_count(
    setup: tuple[list[NodeProcess], Oracle],
) -> None:
    nodes, oracle = setup
    a, _, c = nodes
    wait_for("a and c ready", lambda: a.is_ready() and c.is_ready())
    keys = sorted(oracle.latest) + sorted(oracle.deleted)
    for node in (a, c):
        answers = asyncio.run(fetch_all(node.url, "items", keys))
        assert not mismatches(answers, oracle), node.url
