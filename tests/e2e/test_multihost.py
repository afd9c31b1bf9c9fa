"""End to end across hosts: three nodes on three (network-namespace) hosts, one setting.

Each host is a network namespace with its own address on a bridge; Apache Kafka runs in
the root namespace on the bridge's address. Every node is started the same way, as on
three servers: `--listen 0.0.0.0:8100` and no advertised URL, so each must advertise its
own host's address. Every key from every node must equal the oracle (forwards cross
hosts), `/v1/metadata` must list three nodes at their own addresses, the Python client and
`sparkiq get` from the root namespace must work, and a kill -9 of one host's node must
fail no read. Root only (network namespaces); skipped with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import pytest

from sparkiq.client import Client
from sparkiq.core.errors import ClientError
from sparkiq.core.tables import TableDef
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.localcluster import NodeProcess, stop_nodes
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, fetch_all, mismatches, produce_seeded
from tests.support.netns import Network, network, unavailable

pytestmark = pytest.mark.e2e

TABLE = "items"
PARTITIONS = 6
PORT = 8100
NODE_ENV = {
    "SPARKIQ_SESSION_TIMEOUT_MS": "3000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
    "SPARKIQ_STANDBY_REPLICAS": "1",
}


@dataclass
class Hosts:
    net: Network
    bootstrap: str
    nodes: list[NodeProcess]
    oracle: Oracle
    keys: list[str] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]


def wait_for(what: str, check: object, timeout_s: float = 120.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def metadata(url: str) -> dict[str, object]:
    meta: dict[str, object] = httpx.get(f"{url}/v1/metadata", timeout=5.0).json()
    return meta


def settled(nodes: list[NodeProcess]) -> bool:
    """Every node ready, each sees exactly these nodes; a node that exited fails the wait
    with its log's end (no node running would otherwise count as settled)."""
    for node in nodes:
        assert node.is_running(), f"{node.url} exited: {node.log_path.read_text()[-3000:]}"
    running = nodes
    if not all(n.is_ready() for n in running):
        return False
    urls = sorted(n.url for n in running)
    try:
        metas = [metadata(n.url) for n in running]
    except httpx.HTTPError:
        return False
    return all(
        sorted(str(m["url"]) for m in meta["nodes"]) == urls  # type: ignore[attr-defined]
        for meta in metas
    )


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    base: Path = tmp_path_factory.mktemp("multihost")
    with network(3) as net:
        broker = KafkaBroker(host=net.gateway, data_dir=base / "kafka")
        nodes: list[NodeProcess] = []
        try:
            broker.start()
            bootstrap = broker.bootstrap_servers
            app = f"mh{int(time.time() * 1000) % 10**9}"
            topic = f"{app}-items"
            create_topic(bootstrap, topic, PARTITIONS)
            oracle = produce_seeded(bootstrap, topic, keys=3_000, updates=2, deletes=150, seed=9)
            register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS), app=app)
            nodes = [
                NodeProcess(
                    port=PORT,
                    state_dir=base / f"host{i}" / "state",
                    bootstrap_servers=bootstrap,
                    app=app,
                    log_path=base / f"host{i}.log",
                    env=NODE_ENV,
                    listen_host="0.0.0.0",
                    host=host.address,
                    prefix=host.prefix,
                )
                for i, host in enumerate(net.hosts)
            ]
            for node in nodes:
                node.start()
            wait_for("three hosts settled", lambda: settled(nodes))
            keys = sorted(oracle.latest) + sorted(oracle.deleted)
            yield Hosts(net, bootstrap, nodes, oracle, keys)
        finally:
            stop_nodes(nodes)
            broker.stop()


def test_each_node_advertises_its_own_host(hosts: Hosts) -> None:
    expected = [f"http://{h.address}:{PORT}" for h in hosts.net.hosts]
    assert hosts.urls == expected
    for node in hosts.nodes:
        meta = metadata(node.url)
        assert meta["node"] == node.url
        assert sorted(str(n["url"]) for n in meta["nodes"]) == expected  # type: ignore[attr-defined]
        assert meta["refused"] == []
        assert f"advertised as {node.url}" in node.log_path.read_text()
    # Every node holds actives, none holds them all: reads of the others' keys are forwarded.
    meta = metadata(hosts.urls[0])
    owners = {p["active"] for p in meta["partitions"]}  # type: ignore[attr-defined]
    assert owners == set(expected), owners


def forwarded_answers(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=5.0).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("sparkiq_http_requests_total{")
        and 'outcome="forwarded"' in line
        and 'status="200"' in line
    )


def test_every_key_is_right_from_every_host(hosts: Hosts) -> None:
    for node in hosts.nodes:
        before = forwarded_answers(node.url)
        answers = asyncio.run(fetch_all(node.url, TABLE, hosts.keys))
        assert not mismatches(answers, hosts.oracle), node.url
        # About two thirds of the keys live on the other two hosts.
        assert forwarded_answers(node.url) - before > len(hosts.keys) // 3, node.url


def test_client_and_cli_from_the_root_namespace(hosts: Hosts) -> None:
    sample = hosts.keys[::97]
    with Client([hosts.urls[0]]) as client:
        for key in sample:
            assert client.get(TABLE, key) == hosts.oracle.latest.get(key), key
        values = client.multi_get(TABLE, sample)
        assert [v.get("value") for v in values] == [hosts.oracle.latest.get(k) for k in sample]
    present = next(k for k in hosts.keys if k in hosts.oracle.latest)
    absent = next(iter(sorted(hosts.oracle.deleted)))
    shown = subprocess.run(
        [sys.executable, "-m", "sparkiq", "get", TABLE, present, "--url", hosts.urls[1]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout)["value"] == hosts.oracle.latest[present]
    missing = subprocess.run(
        [sys.executable, "-m", "sparkiq", "get", TABLE, absent, "--url", hosts.urls[2]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert "not found" in missing.stderr


class Reads:
    """Threads reading every key in turn through `sparkiq.Client` from the root namespace."""

    def __init__(self, urls: list[str], keys: list[str], oracle: Oracle, threads: int = 3):
        self.requests = 0
        self.failures: list[str] = []
        self.wrong: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers = [
            threading.Thread(target=self._run, args=(urls, keys[i::threads], oracle), daemon=True)
            for i in range(threads)
        ]

    def __enter__(self) -> Reads:
        for worker in self._workers:
            worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(20)

    def _run(self, urls: list[str], keys: list[str], oracle: Oracle) -> None:
        with Client(urls, budget_s=10.0, timeout_s=2.0) as client:
            while not self._stop.is_set():
                for key in keys:
                    if self._stop.is_set():
                        return
                    failure = wrong = None
                    try:
                        value = client.get(TABLE, key)
                    except ClientError as exc:
                        failure = f"{key}: {exc}"
                    else:
                        if value != oracle.latest.get(key):
                            wrong = f"{key}: got {value}, expected {oracle.latest.get(key)}"
                    with self._lock:
                        self.requests += 1
                        if failure:
                            self.failures.append(failure)
                        if wrong:
                            self.wrong.append(wrong)


def test_kill_9_of_one_hosts_node_fails_no_read(hosts: Hosts) -> None:
    victim, *survivors = hosts.nodes
    with Reads(hosts.urls, hosts.keys, hosts.oracle) as reads:
        time.sleep(2.0)
        victim.stop(kill=True)
        killed = time.monotonic()
        wait_for("the two other hosts settled", lambda: settled(survivors))
        print(f"\nsurvivors settled {time.monotonic() - killed:.1f} s after kill -9")
        time.sleep(2.0)
    print(f"{reads.requests} reads, {len(reads.failures)} failed, {len(reads.wrong)} wrong")
    assert reads.requests > 1_000, "the load hardly ran"
    assert reads.wrong == [], reads.wrong[:5]
    assert reads.failures == [], reads.failures[:5]
    for node in survivors:
        answers = asyncio.run(fetch_all(node.url, TABLE, hosts.keys))
        assert not mismatches(answers, hosts.oracle), node.url
