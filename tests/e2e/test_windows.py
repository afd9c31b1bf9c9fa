"""End to end: windows of many keys, and desc orders, from every node of a 3-node cluster.

A windowed changelog is produced the way `materialize` writes one (key + 8-byte start,
partitioned by the key alone; later values replace earlier ones, null deletes a window),
with keys that begin other keys (`s1`, `s10`, `s100`) and window starts in the last hour.
Every node must answer `GET /v1/tables/{table}/windows` (paged, across partitions, time and
key bounds, `order=desc`), a key's windows in desc order, and a range in desc order with
exactly what a plain-Python oracle computes from what was produced.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.core.serde import window_wire_key
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table

pytestmark = pytest.mark.e2e

MINUTE = 60_000
PARTITIONS = 4
KEYS = ["s1", "s10", "s100", "s11", "s2", "s20", "t", *(f"store-{i:02d}" for i in range(30))]
OFFSETS_MIN = [-50, -40, -30, -20, -10, -5, -2]  # window starts, minutes before production

Windows = dict[tuple[str, int], Any]


def produce_windows(bootstrap: str, table: TableDef, seed: int) -> Windows:
    """Every key's windows, a few updated twice and a few deleted; the oracle of what the
    table then holds."""
    rng = random.Random(seed)
    base = int(time.time() * 1000) // MINUTE * MINUTE
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    oracle: Windows = {}
    records: list[tuple[str, int, Any]] = []
    for key in KEYS:
        for offset in rng.sample(OFFSETS_MIN, rng.randrange(2, len(OFFSETS_MIN) + 1)):
            start = base + offset * MINUTE
            for version in range(rng.choice((1, 1, 2))):
                records.append(
                    (key, start, {"key": key, "sales": rng.randrange(1000), "v": version})
                )
            if rng.random() < 0.08:
                records.append((key, start, None))
    for key, start, value in records:  # in order per key: one partition per key
        wire = key.encode()
        partition = table.partition_of(wire)
        assert partition is not None
        producer.produce(
            table.topic,
            key=window_wire_key(wire, start),
            value=None if value is None else orjson.dumps(value),
            partition=partition,
        )
        if value is None:
            oracle.pop((key, start), None)
        else:
            oracle[(key, start)] = value
    assert producer.flush(60) == 0
    return oracle


def expected(
    windows: Windows,
    *,
    lo: int | None = None,
    keys: tuple[str, str] | None = None,
    prefix: str | None = None,
    desc: bool = False,
) -> list[tuple[str, int, int, Any]]:
    picked = [
        (key, start, start + MINUTE, value)
        for (key, start), value in windows.items()
        if (lo is None or start >= lo)
        and (keys is None or keys[0] <= key <= keys[1])
        and (prefix is None or key.startswith(prefix))
    ]
    return sorted(picked, reverse=desc)


def read_pages(http: httpx.Client, url: str, path: str, params: dict[str, str]) -> list[Any]:
    items: list[Any] = []
    asked = dict(params)
    while True:
        r = http.get(f"{url}{path}", params=asked)
        assert r.status_code == 200, r.text
        body = r.json()
        items.extend(body["items"])
        if body["next_cursor"] is None:
            return items
        asked["cursor"] = body["next_cursor"]


def as_rows(items: list[dict[str, Any]]) -> list[tuple[str, int, int, Any]]:
    return [(i["key"], i["start"], i["end"], i["value"]) for i in items]


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, TableDef, Windows]]:
    app = f"windows{int(time.time() * 1000) % 10**9}"
    table = TableDef(
        "store-sales",
        f"{app}-store-sales",
        PARTITIONS,
        kind=TableKind.WINDOWED,
        window_size_ms=MINUTE,
    )
    create_topic(bootstrap, table.topic, PARTITIONS)
    oracle = produce_windows(bootstrap, table, seed=5)
    register_table(bootstrap, table, app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=3, app=app) as c:
        c.wait_settled(timeout_s=120)
        yield c, table, oracle


def test_window_ranges_and_desc_orders_equal_the_oracle_from_every_node(
    cluster: tuple[LocalCluster, TableDef, Windows],
) -> None:
    c, table, oracle = cluster
    windows = f"/v1/tables/{table.name}/windows"
    asked_at = int(time.time() * 1000)
    cases: list[tuple[dict[str, str], list[tuple[str, int, int, Any]]]] = [
        ({}, expected(oracle)),
        ({"order": "desc"}, expected(oracle, desc=True)),
        ({"from": "-15m"}, expected(oracle, lo=asked_at - 15 * MINUTE)),
        ({"prefix": "s1", "order": "desc"}, expected(oracle, prefix="s1", desc=True)),
        ({"key_from": "s10", "key_to": "s2"}, expected(oracle, keys=("s10", "s2"))),
    ]
    assert [row[0] for row in cases[0][1][:1]] == ["s1"]  # the key that begins others first
    with httpx.Client(timeout=30) as http:
        for node in c.nodes:
            # Every node answers everything itself or through the owners, in the same order.
            deadline = time.monotonic() + 60
            while as_rows(read_pages(http, node.url, windows, {"limit": "500"})) != cases[0][1]:
                assert time.monotonic() < deadline, f"{node.url} never caught up"
                time.sleep(0.5)
            for params, want in cases:
                got = as_rows(read_pages(http, node.url, windows, {**params, "limit": "7"}))
                assert got == want, (node.url, params)
            for key in ("s1", "s10", "store-07"):
                path = f"/v1/tables/{table.name}/keys/{key}/windows"
                got = read_pages(http, node.url, path, {"order": "desc", "limit": "2"})
                newest_first = [row[1:] for row in expected(oracle, keys=(key, key), desc=True)]
                assert [(w["start"], w["end"], w["value"]) for w in got] == newest_first
            got = read_pages(
                http, node.url, f"/v1/tables/{table.name}/range", {"order": "desc", "limit": "9"}
            )
            assert as_rows(got) == expected(oracle, desc=True), node.url
    assert time.time() * 1000 - asked_at < 4 * MINUTE  # `-15m` kept the same windows
