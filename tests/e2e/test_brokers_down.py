"""End to end: every broker down for a minute, then back.

Three `sparkiq serve` processes (one standby per partition) serve a seeded table from a
broker of this test's own, all caught up. The broker's JVM is killed (kill -9) for 60 s.
Throughout the outage every node answers every key as the oracle says (each answer with its
offset), a read `after=` a position past the node's waits its budget and answers 503 as at
any time, `/readyz` stays 200 and it and `/v1/metadata` say the brokers are unreachable and
since when (and `/metrics` for how long); no node process exits, and between the rounds of
reads no node spends more than a tenth of a core (nothing spins). Each node logs the outage
once. Then the broker starts again on its port, more records arrive, and every node catches
up without a restart: every key from every node equals the updated oracle, and the nodes
say the brokers answer.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from sparkiq.core.tables import TableDef
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from sparkiq.kafka.clientlog import LOG_CONF
from tests.support.e2e import Oracle, fetch_all, mismatches, produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "accounts"
PARTITIONS = 6
KEYS = 2000
OUTAGE_S = 60.0
BUDGET_S = 1.5
ROUND_EVERY_S = 12.0  # a round of reads this often; between rounds only the probes
CPU_LIMIT = 0.10  # of one core, averaged over the quiet time between rounds
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
    "SPARKIQ_REQUEST_BUDGET_S": str(BUDGET_S),
}
LOST_LINE = "cannot reach the Kafka brokers at"
BACK_LINE = "answer again after"


@pytest.fixture
def own_broker() -> Iterator[KafkaBroker]:
    with KafkaBroker() as b:
        yield b


def wait_broker(bootstrap: str, timeout_s: float = 60.0) -> None:
    """Until the broker (started again) lists its topics."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **LOG_CONF})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if admin.list_topics(timeout=2).brokers:
                return
        except KafkaException:
            pass
        assert time.monotonic() < deadline, f"the broker at {bootstrap} did not come back"
        time.sleep(0.2)


def cpu_s(pid: int) -> float:
    """CPU time (user + system, all threads) the process has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def positions(node: NodeProcess) -> dict[int, int]:
    meta = node.http_get("/v1/metadata", 5.0).json()
    return {r["partition"]: r["position"] for r in meta["local"] if r["table"] == TABLE}


async def read_after(url: str, key: str, token: str) -> tuple[int, float, dict[str, Any]]:
    """GET *key* `after=` *token*: (status, seconds it took, body)."""
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        path = f"{url}/v1/tables/{TABLE}/keys/{key}?after={token}"
        async with session.get(path, timeout=aiohttp.ClientTimeout(total=30)) as resp:
            body = orjson.loads(await resp.read())
            return resp.status, time.monotonic() - started, body


def check_every_key(nodes: list[NodeProcess], oracle: Oracle) -> int:
    """Every key (deleted ones too) from every node equals the oracle; each found key's
    answer says its offset. Returns the answers checked."""
    keys = sorted(oracle.partition_of)
    checked = 0
    for node in nodes:
        answers = asyncio.run(fetch_all(node.url, TABLE, keys))
        wrong = mismatches(answers, oracle)
        assert not wrong, (node.url, wrong)
        no_offset = [k for k, (st, b) in answers.items() if st == 200 and not b.get("offset")]
        assert not no_offset, (node.url, no_offset[:5])
        checked += len(answers)
    return checked


def check_after_waits(nodes: list[NodeProcess], oracle: Oracle) -> None:
    """A read `after=` 1000 offsets past every replica's position in the key's partition
    waits the request budget, then answers 503 with Retry-After, on every node."""
    key = sorted(oracle.latest)[0]
    partition = oracle.partition_of[key]
    held = [pos[partition] for pos in map(positions, nodes) if partition in pos]
    assert len(held) == 2, held  # its active and its standby
    token = f"{partition}-{max(held) + 1000}"

    async def all_nodes() -> list[tuple[int, float, dict[str, Any]]]:
        return await asyncio.gather(*(read_after(n.url, key, token) for n in nodes))

    for node, (status, took, body) in zip(nodes, asyncio.run(all_nodes()), strict=True):
        assert status == 503, (node.url, status, body)
        assert body["error"]["code"] == "unavailable", body
        assert BUDGET_S * 0.9 <= took <= BUDGET_S + 3.0, (node.url, took)


def unreachable_seconds(node: NodeProcess) -> float:
    """The node's `sparkiq_kafka_unreachable_seconds`."""
    for family in text_string_to_metric_families(node.http_get("/metrics", 5.0).text):
        if family.name == "sparkiq_kafka_unreachable_seconds":
            return float(family.samples[0].value)
    raise AssertionError(f"{node.url} has no sparkiq_kafka_unreachable_seconds")


def kafka_says(node: NodeProcess) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `kafka` objects of the node's /readyz (asserted 200) and /v1/metadata."""
    ready = node.http_get("/readyz", 5.0)
    assert ready.status_code == 200, (node.url, ready.text)
    meta = node.http_get("/v1/metadata", 5.0).json()
    assert meta["ready"] is True, node.url
    kafka: dict[str, Any] = ready.json()["kafka"]
    return kafka, meta["kafka"]


def test_nodes_serve_through_a_broker_outage_and_catch_up_after(
    own_broker: KafkaBroker, tmp_path: Path
) -> None:
    started = time.monotonic()
    bootstrap = own_broker.bootstrap_servers
    app = f"outage{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-{TABLE}"
    create_topic(bootstrap, topic, PARTITIONS)
    oracle = produce_seeded(bootstrap, topic, keys=KEYS, updates=2, deletes=150, seed=52)
    register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS), app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=60)
        nodes = c.nodes
        pids = [n.pid for n in nodes]
        checked = check_every_key(nodes, oracle)
        for node in nodes:
            assert kafka_says(node) == ({"reachable": True}, {"reachable": True})

        (broker_node,) = own_broker.node_ids
        own_broker.kill_node(broker_node)
        down_at = time.time()
        t0 = time.monotonic()
        # Until every node has noticed: then each says so on every probe, with one moment.
        since: dict[str, str] = {}
        while len(since) < len(nodes):
            assert time.monotonic() - t0 < 15, f"not every node noticed the outage: {since}"
            for node in nodes:
                ready, meta = kafka_says(node)
                if not ready["reachable"]:
                    since[node.url] = ready["unreachable_since"]
            time.sleep(0.2)
        noticed_s = time.monotonic() - t0

        quiet_s = 0.0
        quiet_cpu = dict.fromkeys(pids, 0.0)
        rounds = 0
        while True:
            # A round: every key from every node, an `after=` read per node.
            checked += check_every_key(nodes, oracle)
            check_after_waits(nodes, oracle)
            rounds += 1
            # Then quiet until the next round, probing /readyz and /v1/metadata only.
            next_round = min(time.monotonic() + ROUND_EVERY_S, t0 + OUTAGE_S)
            cpu_before = {pid: cpu_s(pid) for pid in pids if pid is not None}
            quiet_from = time.monotonic()
            while time.monotonic() < next_round:
                for node in nodes:
                    assert node.is_running(), f"{node.url} exited; see {node.log_path}"
                    ready, meta = kafka_says(node)
                    assert ready == meta or abs(ready["unreachable_s"] - meta["unreachable_s"]) < 1
                    assert ready["reachable"] is False, (node.url, ready)
                    assert ready["unreachable_since"] == since[node.url], (node.url, ready)
                    assert ready["unreachable_s"] >= time.time() - down_at - 15, ready
                    assert ready["reason"], ready
                time.sleep(2.0)
            quiet_s += time.monotonic() - quiet_from
            for pid, before in cpu_before.items():
                quiet_cpu[pid] += cpu_s(pid) - before
            if time.monotonic() >= t0 + OUTAGE_S:
                break
        for node in nodes:
            assert node.is_running(), f"{node.url} exited; see {node.log_path}"
        for node in nodes:
            assert unreachable_seconds(node) >= OUTAGE_S - 15, node.url
        cpu_share = {pid: spent / quiet_s for pid, spent in quiet_cpu.items()}
        assert all(share < CPU_LIMIT for share in cpu_share.values()), cpu_share
        example = kafka_says(nodes[0])

        own_broker.start_node(broker_node)
        back = time.monotonic()
        wait_broker(bootstrap)
        broker_up_s = time.monotonic() - back
        produce_seeded(
            bootstrap, topic, keys=KEYS + 500, updates=1, deletes=100, seed=53, oracle=oracle
        )
        produced = time.monotonic()
        deadline = back + 60
        while True:
            try:
                checked += check_every_key(nodes, oracle)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        caught_up_s = time.monotonic() - produced
        while not all(kafka_says(n) == ({"reachable": True}, {"reachable": True}) for n in nodes):
            assert time.monotonic() < deadline, [kafka_says(n) for n in nodes]
            time.sleep(0.5)
        assert all(unreachable_seconds(n) == 0 for n in nodes)
        assert [n.pid for n in nodes] == pids  # no node restarted
        assert all(n.is_running() for n in nodes)
        for node in nodes:
            text = node.log_path.read_text()
            assert text.count(LOST_LINE) == 1, (node.url, text.count(LOST_LINE))
            assert text.count(BACK_LINE) == 1, (node.url, text.count(BACK_LINE))
    print(
        f"brokers down {OUTAGE_S:.0f} s: noticed by every node in {noticed_s:.1f} s; "
        f"{rounds} rounds, {checked} answers checked; CPU between rounds "
        + ", ".join(f"{share:.1%}" for share in cpu_share.values())
        + f" of a core; the broker answered {broker_up_s:.1f} s after its start, and every "
        f"node held the {len(oracle.partition_of)} keys written since {caught_up_s:.1f} s "
        f"after they were; {time.monotonic() - started:.0f} s in all; e.g. /readyz and "
        f"/v1/metadata said {example}"
    )
