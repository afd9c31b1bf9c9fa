"""Restorers under test: changelog records produced with an oracle of what each partition
should hold, and the fixtures that start restorers.

Test modules that restore declare ``pytest_plugins = ["tests.support.restore"]`` and take the
``tables`` and ``make_restorer`` fixtures.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from sparkiq.core.tables import TableDef
from sparkiq.node.changes import ChangeFeed
from sparkiq.node.restore import ReplicaState, Restorer
from sparkiq.node.stores.registry import StoreRegistry

Oracle = dict[int, dict[bytes, bytes]]


def wait_for(cond: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[int, bytes | None, bytes | None]],
    oracle: Oracle | None = None,
    *,
    flush_every: int = 0,
) -> None:
    """Produce (partition, key, value) records; mirror them in *oracle*."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, (partition, key, value) in enumerate(records, 1):
        producer.produce(topic, key=key, value=value, partition=partition)
        if oracle is not None and key is not None:
            if value is None:
                oracle.setdefault(partition, {}).pop(key, None)
            else:
                oracle.setdefault(partition, {})[key] = value
        if flush_every and i % flush_every == 0:
            producer.flush()
    producer.flush()


def random_records(
    partitions: int, n: int, keyspace: int, seed: int
) -> list[tuple[int, bytes | None, bytes | None]]:
    rng = random.Random(seed)
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for i in range(n):
        k = rng.randrange(keyspace)
        value = None if rng.random() < 0.15 else f"v{i}".encode()
        out.append((k % partitions, f"key-{k:05d}".encode(), value))
    return out


def contents(restorer: Restorer, tp: tuple[str, int]) -> dict[bytes, bytes]:
    store = restorer.store(tp)
    assert store is not None
    return dict(store.scan(limit=1_000_000))


class Tables:
    def __init__(self) -> None:
        self.by_topic: dict[str, TableDef] = {}

    def add(self, table: TableDef) -> TableDef:
        self.by_topic[table.topic] = table
        return table

    def __call__(self, topic: str) -> TableDef | None:
        return self.by_topic.get(topic)


@pytest.fixture
def tables() -> Tables:
    return Tables()


@pytest.fixture
def make_restorer(
    bootstrap: str, tables: Tables, tmp_path: Path
) -> Iterator[Callable[..., Restorer]]:
    started: list[Restorer] = []

    def make(
        state_dir: Path | None = None,
        on_change: Callable[[], None] | None = None,
        feed: ChangeFeed | None = None,
    ) -> Restorer:
        registry = StoreRegistry(state_dir or tmp_path / "state")
        r = Restorer(bootstrap, registry, tables, on_change=on_change, feed=feed)
        r.start()
        started.append(r)
        return r

    yield make
    for r in started:
        r.stop()


def all_in(restorer: Restorer, tps: list[tuple[str, int]], state: ReplicaState) -> bool:
    st = restorer.statuses()
    return all(tp in st and st[tp].state is state for tp in tps)
