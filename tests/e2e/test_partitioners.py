"""End to end: topics that sparkiq did not write, each placed by another partitioner.

Three 6-partition topics written by confluent-kafka -- with librdkafka's default
`consistent_random` (CRC32), with `fnv1a_random`, and with explicit partitions chosen by a
rule of the producer's own -- and a murmur2 topic with a few records in the wrong
partition. Each is registered with a plain `sparkiq table create` (the CLI samples the topic
and picks the partitioner), served by three `sparkiq serve` processes, and every key asked of
every node must equal the oracle: the latest value, 404 for deleted keys.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Message, Producer

from sparkiq.client import Client
from sparkiq.core.partitioner import partition_for
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from tests.support.e2e import Oracle, fetch_all, mismatches

pytestmark = pytest.mark.e2e

PARTITIONS = 6
KEYS = 800
ODD_KEYS = [
    "café-ü",
    "a/b",
    "a+b",
    "what?",
    "#tag",
    "100%",
    "with space",
    "日本語",
    "%2F",
    "ü/+?#% x",
]
MISPLACED = 25


def custom_rule(key: bytes) -> int:
    """A producer's own placement (like a partitioner by a field): no named partitioner."""
    return sum(key) % PARTITIONS


def produce(
    bootstrap: str,
    topic: str,
    *,
    seed: int,
    partitioner: str = "murmur2_random",
    place: Callable[[bytes], int] | None = None,
) -> Oracle:
    """Every key twice (shuffled), odd keys included, then tombstones for some of them."""
    rng = random.Random(seed)
    oracle = Oracle()
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner})

    def on_delivery(err: Any, msg: Message) -> None:
        assert err is None, f"delivery failed: {err}"
        raw = msg.value()
        key = (msg.key() or b"").decode()
        oracle.apply(key, None if raw is None else orjson.loads(raw), msg.partition() or 0)

    names = [f"k{i:05d}" for i in range(KEYS)] + ODD_KEYS
    versions = [(name, v) for name in names for v in range(2)]
    rng.shuffle(versions)
    seen: dict[str, int] = {}
    records: list[tuple[str, object | None]] = []
    for name, _ in versions:
        seen[name] = seen.get(name, 0) + 1
        records.append((name, {"key": name, "version": seen[name], "n": rng.randrange(10**6)}))
    records += [(name, None) for name in [*rng.sample(names[:KEYS], 60), *ODD_KEYS[:3]]]
    for name, value in records:
        key = name.encode()
        extra = {} if place is None else {"partition": place(key)}
        producer.produce(
            topic,
            key=key,
            value=None if value is None else orjson.dumps(value),
            on_delivery=on_delivery,
            **extra,
        )
        # Delivery reports of one partition arrive in order; each key stays in one
        # partition here, so the oracle applies every key's records in produced order.
        producer.poll(0)
    assert producer.flush(60) == 0
    return oracle


def table_create(bootstrap: str, app: str, name: str, topic: str, *extra: str) -> str:
    """`sparkiq table create` as a user runs it; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "sparkiq", "table", "create", name, "--topic", topic, *extra],
        env={**os.environ, "SPARKIQ_BOOTSTRAP_SERVERS": bootstrap, "SPARKIQ_APP": app},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def app_id() -> str:
    return f"e2eparts{int(time.time() * 1000) % 10**9}"


@pytest.fixture(scope="module")
def tables(bootstrap: str, app_id: str) -> dict[str, tuple[Oracle, str]]:
    """table name -> (its oracle, what `sparkiq table create` printed)."""
    out: dict[str, tuple[Oracle, str]] = {}
    setups: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        ("crc", {"partitioner": "consistent_random"}, ()),
        ("fnv", {"partitioner": "fnv1a_random"}, ()),
        ("custom", {"place": custom_rule}, ()),
    ]
    for i, (name, how, extra) in enumerate(setups):
        topic = f"{app_id}-{name}"
        create_topic(bootstrap, topic, PARTITIONS)
        oracle = produce(bootstrap, topic, seed=i, **how)
        out[name] = (oracle, table_create(bootstrap, app_id, name, topic, *extra))
    # murmur2 as sparkiq's sinks write, but a few records went to another partition.
    topic = f"{app_id}-stray"
    create_topic(bootstrap, topic, PARTITIONS)
    oracle = produce(bootstrap, topic, seed=9)
    strays = [f"stray-{i}" for i in range(MISPLACED)]
    producer = Producer({"bootstrap.servers": bootstrap})
    for name in strays:
        key = name.encode()
        p = (partition_for(key, PARTITIONS) + 1) % PARTITIONS
        producer.produce(topic, key=key, value=orjson.dumps({"stray": name}), partition=p)
        oracle.apply(name, {"stray": name}, p)
    assert producer.flush(30) == 0
    printed = table_create(bootstrap, app_id, "stray", topic, "--partitioner", "murmur2")
    out["stray"] = (oracle, printed)
    return out


@pytest.fixture(scope="module")
def cluster(
    bootstrap: str,
    app_id: str,
    tables: dict[str, tuple[Oracle, str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("partitioners")
    with LocalCluster(bootstrap, base, nodes=3, app=app_id) as c:
        c.wait_ready(timeout_s=120)
        yield c


def test_the_cli_prints_the_partitioner_it_chose(tables: dict[str, tuple[Oracle, str]]) -> None:
    sampled = len(ODD_KEYS) * 2 + KEYS * 2 + 63  # every record: under the sample's cap
    for name, chosen in (("crc", "crc32"), ("fnv", "fnv1a"), ("custom", "any")):
        printed = tables[name][1]
        assert f"partitioner {chosen}" in printed, printed
        assert f"of {sampled:,} sampled records in place" in printed, printed
        assert f"table {name!r} registered" in printed, printed
    assert "crc32: 1,683 of 1,683" in tables["crc"][1]
    assert "partitioner murmur2" in tables["stray"][1]


def test_every_key_from_every_node_equals_the_oracle(
    cluster: LocalCluster, tables: dict[str, tuple[Oracle, str]]
) -> None:
    wait_for_misplaced(cluster, "stray", MISPLACED)
    for name, (oracle, _) in tables.items():
        keys = sorted(oracle.latest) + sorted(oracle.deleted)
        for url in cluster.urls:
            answers = asyncio.run(fetch_all(url, name, keys))
            wrong = mismatches(answers, oracle)
            assert not wrong, f"table {name} from {url}: {wrong}"


def test_multi_get_through_one_node_agrees(
    cluster: LocalCluster, tables: dict[str, tuple[Oracle, str]]
) -> None:
    wait_for_misplaced(cluster, "stray", MISPLACED)
    for name, (oracle, _) in tables.items():
        keys = sorted(oracle.latest) + sorted(oracle.deleted)
        got: list[Any] = []
        for start in range(0, len(keys), 500):
            r = httpx.post(
                f"{cluster.urls[1]}/v1/tables/{name}/multi-get",
                json={"keys": keys[start : start + 500]},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            got += [item["value"] for item in r.json()["items"]]
        assert got == [oracle.latest.get(k) for k in keys], name


def test_the_client_routes_every_table(
    cluster: LocalCluster, tables: dict[str, tuple[Oracle, str]]
) -> None:
    with Client(cluster.urls) as client:
        for name, (oracle, _) in tables.items():
            sample = sorted(oracle.latest)[:50] + sorted(oracle.deleted)[:10]
            assert [client.get(name, k) for k in sample] == [oracle.latest.get(k) for k in sample]
            items = client.multi_get(name, sample)
            assert [i["value"] for i in items] == [oracle.latest.get(k) for k in sample]


def test_misplaced_records_show_in_tables_metrics_and_cluster(
    cluster: LocalCluster, app_id: str
) -> None:
    wait_for_misplaced(cluster, "stray", MISPLACED)
    for url in cluster.urls:
        tables = {t["name"]: t for t in httpx.get(f"{url}/v1/tables").json()["tables"]}
        assert tables["stray"]["misplaced_records"] == MISPLACED
        assert tables["crc"]["misplaced_records"] == 0
        assert tables["custom"]["partitioner"] == "any"
        metrics = httpx.get(f"{url}/metrics").text
        assert f'sparkiq_misplaced_records{{table="stray"}} {MISPLACED}.0' in metrics
    shown = subprocess.run(
        [sys.executable, "-m", "sparkiq", "cluster", "--url", cluster.urls[0]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"table stray: partitioner murmur2, {MISPLACED} misplaced records" in shown.stdout
    assert "table custom: partitioner any" in shown.stdout


def wait_for_misplaced(
    cluster: LocalCluster, table: str, count: int, timeout_s: float = 60
) -> None:
    """Until every node knows the misplaced records that some node's restore counted."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = []
        for url in cluster.urls:
            tables = httpx.get(f"{url}/v1/tables", timeout=5).json()["tables"]
            seen.append(next(t["misplaced_records"] for t in tables if t["name"] == table))
        if seen == [count] * len(cluster.urls):
            return
        assert time.monotonic() < deadline, f"misplaced records seen by the nodes: {seen}"
        time.sleep(0.5)
