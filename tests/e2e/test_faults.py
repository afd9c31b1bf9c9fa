"""End to end, storage faults: a node whose local state goes bad heals itself.

Real `sparkiq serve` processes, Apache Kafka, a seeded table and its oracle. Each test
damages a node's state dir as a failing disk or an operator would (SST files overwritten in
the middle, a partition's directory deleted or filled with junk, the disk full), then reads
every key from every node, round after round, and asserts:

- no answer is ever a 500, and no answer is ever wrong (a value other than the oracle's, or
  absent for a present key): while a replica is rebuilt its reads go to another replica or
  answer 503 with Retry-After;
- every key is right again from every node within `HEAL_S` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from sparkiq.node.stores.registry import QUARANTINE_DIR
from tests.support.e2e import Oracle, fetch_all, produce_seeded
from tests.support.faults import corrupt_ssts

pytestmark = pytest.mark.e2e

TABLE = "items"
PARTITIONS = 4
KEYS = 12_000
HEAL_S = 90.0  # every key right again from every node within this many seconds
NODE_ENV = {
    "SPARKIQ_SESSION_TIMEOUT_MS": "3000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}


@dataclass
class Round:
    """One read of every key from one node."""

    statuses: Counter[int]
    wrong: list[str]
    missing: int  # keys not answered right (503s included)


def read_round(url: str, oracle: Oracle, keys: list[str]) -> Round:
    answers = asyncio.run(fetch_all(url, TABLE, keys, concurrency=16))
    statuses: Counter[int] = Counter()
    wrong: list[str] = []
    missing = 0
    for key, (status, body) in answers.items():
        statuses[status] += 1
        expected = oracle.latest.get(key)
        if status == 200:
            if body.get("value") != expected:
                wrong.append(f"{key}: got {body.get('value')}, expected {expected}")
        elif status == 404:
            if expected is not None:
                wrong.append(f"{key}: absent, expected {expected}")
        else:
            missing += 1
    return Round(statuses, wrong, missing)


def heal_and_check(nodes: list[NodeProcess], oracle: Oracle, what: str) -> dict[str, Any]:
    """Read every key from every node until all are right; fail on any 500 or wrong answer.
    What the rounds saw, for the test's own checks."""
    keys = sorted(oracle.latest) + sorted(oracle.deleted)
    started = time.monotonic()
    seen: Counter[int] = Counter()
    rounds = 0
    while True:
        rounds += 1
        done = True
        for node in nodes:
            r = read_round(node.url, oracle, keys)
            seen.update(r.statuses)
            assert r.statuses[500] == 0, f"{what}: {node.url} answered 500: {r.statuses}"
            assert not r.wrong, f"{what}: {node.url} answered wrong, e.g. {r.wrong[:3]}"
            done = done and r.missing == 0
        took = time.monotonic() - started
        if done:
            print(f"\n{what}: every key right after {took:.1f} s, {rounds} rounds; {dict(seen)}")
            return {"seconds": took, "statuses": seen, "rounds": rounds}
        assert took < HEAL_S, f"{what}: keys still not answered after {HEAL_S:.0f} s: {seen}"
        time.sleep(0.5)


def metric(node: NodeProcess, name: str) -> float:
    text = node.http_get("/metrics", 5.0).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")
    )


def setup_table(bootstrap: str, prefix: str, seed: int) -> tuple[str, Oracle]:
    app = f"{prefix}{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-items"
    create_topic(bootstrap, topic, PARTITIONS)
    # Values of a few hundred bytes: each partition's store spans many blocks and SST files.
    oracle = produce_seeded(
        bootstrap, topic, keys=KEYS, updates=2, deletes=300, seed=seed, value_pad=300
    )
    register_table(bootstrap, TableDef(TABLE, topic, PARTITIONS), app=app)
    return app, oracle


def partition_dirs(node: NodeProcess) -> list[Path]:
    return sorted(p for p in (node.state_dir / TABLE).iterdir() if p.name.isdigit())


def flush_to_ssts(node: NodeProcess) -> None:
    """Stop the node gracefully: its stores are flushed, so their data is in SST files."""
    node.stop()
    assert all(list(d.glob("*.sst")) for d in partition_dirs(node)), "no SST files to damage"


@pytest.fixture
def two_nodes(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, Oracle]]:
    app, oracle = setup_table(bootstrap, "fault2", seed=21)
    env = {**NODE_ENV, "SPARKIQ_STANDBY_REPLICAS": "1"}
    with LocalCluster(bootstrap, tmp_path, nodes=2, app=app, env=env) as cluster:
        cluster.wait_settled(timeout_s=120)
        yield cluster, oracle


@pytest.fixture
def one_node(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, Oracle]]:
    app, oracle = setup_table(bootstrap, "fault1", seed=22)
    env = {**NODE_ENV, "SPARKIQ_STANDBY_REPLICAS": "0"}
    with LocalCluster(bootstrap, tmp_path, nodes=1, app=app, env=env) as cluster:
        cluster.wait_settled(timeout_s=120)
        yield cluster, oracle


def test_corrupt_ssts_with_a_standby_fail_over_and_rebuild(
    two_nodes: tuple[LocalCluster, Oracle],
) -> None:
    cluster, oracle = two_nodes
    victim = cluster.nodes[1]
    flush_to_ssts(victim)
    damaged = sum(corrupt_ssts(d, files=3, size=4096) for d in partition_dirs(victim))
    assert damaged >= PARTITIONS
    victim.start()
    cluster.wait_ready(timeout_s=120)
    heal_and_check(cluster.nodes, oracle, "corrupt SSTs, one standby")
    # The damage was met, counted, moved aside and rebuilt; the node is ready again.
    assert metric(victim, "sparkiq_storage_faults_total") >= 1
    assert metric(victim, "sparkiq_store_rebuilds_total") >= 1
    assert list((victim.state_dir / QUARANTINE_DIR).iterdir())
    log = victim.log_path.read_text()
    assert "Corruption" in log
    assert "rebuilt from the changelog" in log
    assert "another node" not in log  # no talk of a shared state dir: none is shared
    cluster.wait_ready(timeout_s=HEAL_S)


def test_corrupt_ssts_without_a_standby_answer_503_then_heal(
    one_node: tuple[LocalCluster, Oracle],
) -> None:
    cluster, oracle = one_node
    node = cluster.nodes[0]
    flush_to_ssts(node)
    for d in partition_dirs(node):
        corrupt_ssts(d, files=3, size=4096)
    node.start()
    cluster.wait_ready(timeout_s=120)
    seen = heal_and_check(cluster.nodes, oracle, "corrupt SSTs, no standby")
    assert metric(node, "sparkiq_store_rebuilds_total") >= 1
    # Meanwhile nobody else held the partitions: 503s, with Retry-After, not 500s.
    assert seen["statuses"][503] > 0 or seen["rounds"] == 1
    cluster.wait_ready(timeout_s=HEAL_S)


def test_a_deleted_or_junk_partition_directory_is_rebuilt(
    one_node: tuple[LocalCluster, Oracle],
) -> None:
    cluster, oracle = one_node
    node = cluster.nodes[0]
    node.stop()
    dirs = partition_dirs(node)
    shutil.rmtree(dirs[0])  # deleted
    for child in dirs[1].iterdir():  # junk where a store was
        if child.is_file():
            child.write_bytes(b"not a RocksDB file\n" * 10)
    shutil.rmtree(dirs[2])
    dirs[2].mkdir()  # empty
    node.start()
    cluster.wait_ready(timeout_s=120)
    heal_and_check(cluster.nodes, oracle, "deleted, junk and empty partition directories")
    log = node.log_path.read_text()
    assert "on_assignment callback failed" not in log
    assert metric(node, "sparkiq_store_rebuilds_total") >= 1  # the junk one


def test_a_second_node_on_the_same_state_dir_is_refused_at_once(
    one_node: tuple[LocalCluster, Oracle], bootstrap: str, tmp_path: Path
) -> None:
    cluster, oracle = one_node
    node = cluster.nodes[0]
    twin = NodeProcess(
        port=free_port(),
        state_dir=node.state_dir,
        bootstrap_servers=bootstrap,
        app=cluster.app,
        log_path=tmp_path / "twin.log",
    ).start()
    assert twin.proc is not None
    assert twin.proc.wait(timeout=60) == 2
    assert "another node is using the state dir" in twin.log_path.read_text()
    heal_and_check(cluster.nodes, oracle, "after a refused second node")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("the full-disk test mounts a small tmpfs and needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_makes_the_node_not_ready_until_space_returns(
    bootstrap: str, tmp_path: Path, small_disk: Path
) -> None:
    app, oracle = setup_table(bootstrap, "full", seed=23)
    node = NodeProcess(
        port=free_port(),
        state_dir=small_disk / "state",
        bootstrap_servers=bootstrap,
        app=app,
        log_path=tmp_path / "node.log",
        # A short budget: reads of the partitions that cannot apply answer 503 soon.
        env={**NODE_ENV, "SPARKIQ_STANDBY_REPLICAS": "0", "SPARKIQ_REQUEST_BUDGET_S": "1"},
    )
    node.start()
    try:
        deadline = time.monotonic() + 120
        while not node.is_ready():
            assert node.is_running(), node.log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "node not ready"
            time.sleep(0.3)
        heal_and_check([node], oracle, "before the disk fills")
        filler = small_disk / "filler"
        with filler.open("wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * (1 << 20))
        # More records while the disk is full: the node cannot apply them.
        topic = f"{app}-items"
        produce_seeded(
            bootstrap,
            topic,
            keys=3_000,
            updates=1,
            deletes=0,
            seed=24,
            oracle=oracle,
            value_pad=300,
        )
        reason = ""
        deadline = time.monotonic() + 60
        while "no disk space left" not in reason:
            assert time.monotonic() < deadline, f"never not ready for the full disk: {reason}"
            with contextlib.suppress(httpx.HTTPError):
                r = node.http_get("/readyz", 2.0)
                reason = r.text if r.status_code == 503 else ""
            time.sleep(0.3)
        # Meanwhile a read answers 503 or a value; never 500, never one half-written.
        keys = sorted(oracle.latest)[:200]
        answers = asyncio.run(fetch_all(node.url, TABLE, keys, concurrency=50))
        assert not [k for k, (s, _) in answers.items() if s == 500]
        filler.unlink()
        heal_and_check([node], oracle, "after space returned")
        assert node.is_ready()
        assert metric(node, "sparkiq_storage_faults_total") >= 1
        assert "space again; resuming" in node.log_path.read_text()
    finally:
        node.stop()
