"""End to end, high availability: queries keep succeeding through kill -9, restart and scaling.

Three `sparkiq serve` processes (one standby per partition, short session timeout, a small
acceptable lag so a returning node has to warm up), Apache Kafka, a seeded table and its
oracle. A steady query load (threads with their own `sparkiq.Client`, cycling over every
key) checks each answer against the oracle while the cluster is disturbed; a request that
the client's retries could not answer within its budget is a failure. The tests share the
cluster and run in file order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.client import Client
from sparkiq.core.errors import ClientError
from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "accounts"
PARTITIONS = 6
KEYS = 3_000
ACCEPTABLE_LAG = 100
NODE_ENV = {
    "SPARKIQ_SESSION_TIMEOUT_MS": "3000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
    "SPARKIQ_ACCEPTABLE_LAG": str(ACCEPTABLE_LAG),
    "SPARKIQ_STANDBY_REPLICAS": "1",
}
CLIENT_BUDGET_S = 10.0


@dataclass
class Update:
    """A key rewritten during the test: before its record is applied, the old value is right."""

    old: Any
    new: Any
    offset: int | None = None  # the new record's changelog offset, once delivered


@dataclass
class Expectations:
    """What each key may answer: the oracle, and updates in flight with their offsets."""

    oracle: Oracle
    updates: dict[str, Update] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wrong(self, key: str, entry: dict[str, Any] | None) -> str | None:
        """Why `entry` (None = absent) is a wrong answer for `key`, or None if it is right."""
        value = None if entry is None else entry["value"]
        with self.lock:
            update = self.updates.get(key)
            expected = self.oracle.latest.get(key)
        if update is None:
            return None if value == expected else f"{key}: got {entry}, expected {expected}"
        if value == update.new:
            return None
        # The old value is right only from a replica that had not applied the new record:
        # an answer's offset is the next changelog offset its replica was to apply.
        if value == update.old and (
            entry is None or update.offset is None or entry["offset"] <= update.offset
        ):
            return None
        return f"{key}: got {entry}, expected {update.new} (or {update.old} before {update.offset})"


@dataclass
class Stats:
    requests: int = 0
    standby_answers: int = 0
    failures: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else 0.0

    def summary(self) -> str:
        return (
            f"{self.requests} requests, {len(self.failures)} failed, {len(self.wrong)} wrong, "
            f"{self.standby_answers} from standbys; latency p50 {self.percentile(0.5) * 1000:.1f}"
            f" ms, p99 {self.percentile(0.99) * 1000:.1f} ms; longest a key was unanswerable: "
            f"{self.slowest[0]:.2f} s ({self.slowest[1]})"
        )


class QueryLoad:
    """Threads that GET every key in turn through `sparkiq.Client` and check each answer."""

    def __init__(self, urls: list[str], keys: list[str], expect: Expectations, threads: int = 3):
        self._urls = urls
        self._keys = keys
        self._expect = expect
        self._threads = threads
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.stats = Stats()

    def __enter__(self) -> QueryLoad:
        for i in range(self._threads):
            worker = threading.Thread(target=self._run, args=(i,), daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(CLIENT_BUDGET_S + 5)

    def _run(self, index: int) -> None:
        keys = self._keys[index :: self._threads]
        with Client(self._urls, budget_s=CLIENT_BUDGET_S, timeout_s=2.0) as client:
            while not self._stop.is_set():
                for key in keys:
                    if self._stop.is_set():
                        return
                    self._one(client, key)

    def _one(self, client: Client, key: str) -> None:
        started = time.monotonic()
        failure = wrong = None
        standby = False
        try:
            entry = client.get_entry(TABLE, key)
        except ClientError as exc:
            failure = f"{key}: {exc}"
        else:
            wrong = self._expect.wrong(key, entry)
            standby = bool(entry and entry.get("standby"))
        took = time.monotonic() - started
        with self._lock:
            stats = self.stats
            stats.requests += 1
            stats.standby_answers += standby
            stats.latencies.append(took)
            if took > stats.slowest[0]:
                stats.slowest = (took, key)
            if failure:
                stats.failures.append(failure)
            if wrong:
                stats.wrong.append(wrong)


@pytest.fixture(scope="module")
def app_id() -> str:
    return f"ha{int(time.time() * 1000) % 10**9}"


@pytest.fixture(scope="module")
def topic(app_id: str) -> str:
    return f"{app_id}-accounts"


@pytest.fixture(scope="module")
def expect(bootstrap: str, app_id: str, topic: str) -> Expectations:
    create_topic(bootstrap, topic, PARTITIONS)
    oracle = produce_seeded(bootstrap, topic, keys=KEYS, updates=2, deletes=200, seed=4)
    register_table(
        bootstrap,
        TableDef(
            name=TABLE,
            topic=topic,
            partitions=PARTITIONS,
            key_format=Format.STRING,
            value_format=Format.JSON,
        ),
        app=app_id,
    )
    return Expectations(oracle)


@pytest.fixture(scope="module")
def cluster(
    bootstrap: str, app_id: str, expect: Expectations, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("ha")
    with LocalCluster(bootstrap, base, nodes=3, app=app_id, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=120)
        yield c


def all_keys(expect: Expectations) -> list[str]:
    oracle = expect.oracle
    return sorted(oracle.latest) + sorted(oracle.deleted)


def check(stats: Stats, what: str) -> None:
    print(f"\n{what}: {stats.summary()}")
    assert stats.requests > 1_000, f"{what}: the load hardly ran"
    assert stats.wrong == [], f"{what}: wrong answers, e.g. {stats.wrong[:5]}"
    assert stats.failures == [], f"{what}: failed requests, e.g. {stats.failures[:5]}"


def test_kill_9_of_a_node_fails_no_query(cluster: LocalCluster, expect: Expectations) -> None:
    victim = cluster.nodes[0]
    with QueryLoad(cluster.urls, all_keys(expect), expect) as load:
        time.sleep(2.0)
        victim.stop(kill=True)
        killed_at = time.monotonic()
        cluster.wait_settled(timeout_s=60)
        print(f"\nsurvivors settled {time.monotonic() - killed_at:.1f} s after kill -9")
        time.sleep(2.0)
    check(load.stats, "kill -9 of one of 3 nodes")
    assert load.stats.standby_answers > 0, "no answer came from a standby while the node was down"


def test_restarted_node_warms_up_then_takes_actives(
    cluster: LocalCluster, expect: Expectations, bootstrap: str, topic: str
) -> None:
    node = cluster.nodes[0]
    assert not node.is_running()
    on_disk = {int(p.name) for p in (node.state_dir / TABLE).iterdir() if p.is_dir()}
    tail = _produce_tail(bootstrap, topic, expect, records=1_800)
    assert min(tail.values()) > ACCEPTABLE_LAG, "every partition must need a warm-up"
    roles = RoleWatch(cluster.nodes[1].url, node.url)
    with QueryLoad(cluster.urls, all_keys(expect), expect) as load, roles:
        time.sleep(1.0)
        node.start()
        cluster.wait_settled(timeout_s=90)
        time.sleep(2.0)
    check(load.stats, "restart of the killed node")
    print(f"roles of the restarted node: {roles.timeline}")
    assert roles.warmed_before_active(), f"took actives without warming up: {roles.timeline}"
    # Made active only with a reported lag within the acceptable lag (-1: none reported).
    assert roles.lag_when_made_active
    assert all(0 <= lag <= ACCEPTABLE_LAG for lag in roles.lag_when_made_active)
    meta = httpx.get(f"{node.url}/v1/metadata").json()
    held = {r["partition"] for r in meta["local"] if r["table"] == TABLE}
    assert held & on_disk, "expected the node to get back partitions it had on disk"
    # It replayed only the tail of the stores it had on disk (the records written while it
    # was down); a partition it had no store of was restored whole.
    ever = {p for _, _, p in roles.timeline} | held
    sizes = expect.oracle.produced_per_partition
    expected = sum(tail.get(p, 0) if p in on_disk else sizes[p] for p in ever)
    print(
        f"restored {meta['restored_records']} records; held {sorted(ever)}, on disk "
        f"{sorted(on_disk)}; tail {tail}"
    )
    assert meta["restored_records"] == expected
    # And it ends with its share of the actives.
    balanced = _wait_balanced(node.url, timeout_s=30)
    mine = next(n for n in balanced["nodes"] if n["url"] == node.url)
    print(f"it is now active for {mine['active']}, standby for {mine['standby']}")


def test_scale_out_to_4_and_in_to_2_fails_no_query(
    cluster: LocalCluster, expect: Expectations
) -> None:
    with QueryLoad(cluster.urls, all_keys(expect), expect) as load:
        time.sleep(1.0)
        started = time.monotonic()
        added = cluster.add_node()
        cluster.wait_settled(timeout_s=90)
        print(f"\n4 nodes settled after {time.monotonic() - started:.1f} s")
        # Graceful leaves, one at a time: each waits for the others to settle first.
        for leaving in (cluster.nodes[1], added):
            started = time.monotonic()
            leaving.stop()
            cluster.wait_settled(timeout_s=90)
            print(f"{leaving.url} left; settled after {time.monotonic() - started:.1f} s")
        time.sleep(2.0)
    check(load.stats, "scale out to 4, in to 2")
    assert sum(n.is_running() for n in cluster.nodes) == 2


def _wait_balanced(url: str, *, timeout_s: float) -> dict[str, Any]:
    """The metadata once every node has its share of actives (within one) and none warms up."""
    deadline = time.monotonic() + timeout_s
    while True:
        meta: dict[str, Any] = httpx.get(f"{url}/v1/metadata").json()
        counts = [len(n["active"]) for n in meta["nodes"]]
        if max(counts) - min(counts) <= 1 and not any(p["warming"] for p in meta["partitions"]):
            return meta
        assert time.monotonic() < deadline, f"actives never balanced: {meta['nodes']}"
        time.sleep(0.5)


class RoleWatch:
    """Polls one node's metadata for another node's roles while a test runs."""

    def __init__(self, observer: str, watched: str) -> None:
        self._observer = observer
        self._watched = watched
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.timeline: list[tuple[int, str, int]] = []  # (generation, role, partition), new ones
        self.lag_when_made_active: list[int] = []

    def __enter__(self) -> RoleWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def warmed_before_active(self) -> bool:
        """It became active somewhere, and only where it had followed the partition first."""
        actives = [(i, p) for i, (_, role, p) in enumerate(self.timeline) if role == "active"]
        return bool(actives) and all(
            any(p2 == p and role != "active" for _, role, p2 in self.timeline[:i])
            for i, p in actives
        )

    def _run(self) -> None:
        seen: set[tuple[str, int]] = set()
        with httpx.Client(timeout=2.0) as http:
            while not self._stop.wait(0.1):
                try:
                    meta = http.get(f"{self._observer}/v1/metadata").json()
                except (httpx.HTTPError, ValueError):
                    continue
                for part in meta.get("partitions", []):
                    for role in ("active", "warming", "standbys"):
                        holders = part[role] if role != "active" else [part["active"]]
                        if self._watched not in holders or (role, part["partition"]) in seen:
                            continue
                        seen.add((role, part["partition"]))
                        self.timeline.append((meta["generation"], role, part["partition"]))
                        if role == "active":
                            # The lag it reported to the rebalance that made it active.
                            self.lag_when_made_active.append(
                                int(part.get("lags", {}).get(self._watched, -1))
                            )


def _produce_tail(
    bootstrap: str, topic: str, expect: Expectations, *, records: int
) -> dict[int, int]:
    """New values for `records` live keys, registered as updates in flight; per partition."""
    oracle = expect.oracle
    keys = sorted(oracle.latest)[: records * 3 : 3]
    per_partition: dict[int, int] = {}
    with expect.lock:
        for i, key in enumerate(keys):
            expect.updates[key] = Update(old=oracle.latest[key], new={"key": key, "tail": i})
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        key, p = msg.key().decode(), msg.partition()
        per_partition[p] = per_partition.get(p, 0) + 1
        with expect.lock:
            expect.updates[key].offset = msg.offset()
            oracle.apply(key, orjson.loads(msg.value()), p)

    for key in keys:
        producer.produce(
            topic,
            key=key.encode(),
            value=orjson.dumps(expect.updates[key].new),
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    return per_partition
