"""A seeded data set for the console's tests: a key-value table, a windowed table (sales per
store per minute), a global table and a pipeline's query figures, with the oracle of each."""

from __future__ import annotations

import random
import struct
import time
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from confluent_kafka import Producer

from sparkiq.core.partitioner import partition_for
from sparkiq.core.progress import QueryBatch
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.core.triggers import TriggerMode
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from sparkiq.kafka.progress import ProgressPublisher
from tests.support.e2e import Oracle, produce_seeded

ITEMS = "items"
SALES = "store-sales"
PLACES = "places"  # a global table: every node holds every partition
PLACES_PARTITIONS = 3
WINDOW_MS = 60_000
STORES = ("S1", "S2", "S3")
QUERIES = ("customers", "pos-routes")
REALTIME_QUERY = "pos-routes"  # its batches are Real-Time epochs (planned 5 s long)


@dataclass
class ConsoleData:
    items: Oracle
    # store -> window start -> value
    sales: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)
    queries: dict[str, list[QueryBatch]] = field(default_factory=dict)


def seed(bootstrap: str, app: str, *, seed: int = 11, windows: int = 30) -> ConsoleData:
    """Write the tables' changelogs, register them in `app`'s catalog, publish the queries'
    figures; returns what was written."""
    rng = random.Random(seed)
    items_topic, sales_topic = f"{app}-items", f"{app}-sales"
    create_topic(bootstrap, items_topic, 6)
    create_topic(bootstrap, sales_topic, 4)
    oracle = produce_seeded(bootstrap, items_topic, keys=300, updates=2, deletes=20, seed=seed)
    register_table(bootstrap, TableDef(ITEMS, items_topic, 6), app=app)
    data = ConsoleData(oracle)
    places_topic = f"{app}-places"
    create_topic(bootstrap, places_topic, PLACES_PARTITIONS)
    produce_seeded(bootstrap, places_topic, keys=20, updates=1, deletes=0, seed=seed)
    register_table(
        bootstrap,
        TableDef(PLACES, places_topic, PLACES_PARTITIONS, kind=TableKind.GLOBAL),
        app=app,
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    # The windows of the last `windows` minutes, so the key page charts them by default.
    first = (int(time.time() * 1000) // WINDOW_MS - windows) * WINDOW_MS
    for store in STORES:
        per_store = data.sales.setdefault(store, {})
        # A windowed key is partitioned by the key alone: all its windows live together.
        partition = partition_for(store.encode(), 4)
        for i in range(windows):
            start = first + i * WINDOW_MS
            value = {"sales": rng.randrange(100, 10_000), "invoices": rng.randrange(1, 40)}
            per_store[start] = value
            producer.produce(
                sales_topic,
                key=store.encode() + struct.pack(">q", start),
                value=orjson.dumps(value),
                partition=partition,
            )
    assert producer.flush(30) == 0
    register_table(
        bootstrap,
        TableDef(SALES, sales_topic, 4, kind=TableKind.WINDOWED, window_size_ms=WINDOW_MS),
        app=app,
    )
    publisher = ProgressPublisher(bootstrap, {}.get, app=app)
    now = int(time.time() * 1000)
    try:
        for name, tables in zip(QUERIES, ((ITEMS,), ()), strict=True):
            batches = data.queries.setdefault(name, [])
            for n in range(20):
                batch = QueryBatch(
                    name,
                    n,
                    now - (20 - n) * 1000,
                    tables,
                    rng.randrange(20, 80),
                    float(rng.randrange(20, 80)),
                    float(rng.randrange(100, 400)),
                    rng.randrange(300, 900),
                    n * 10 if tables else None,
                    n % 3 == 0,
                    sum(1 for m in range(n + 1) if m % 3 == 0),
                )
                if name == REALTIME_QUERY:
                    batch = replace(
                        batch,
                        trigger=TriggerMode.REALTIME,
                        batch_ms=rng.randrange(5_000, 5_300),
                        between_epochs_ms=rng.randrange(100, 300),
                    )
                batches.append(batch)
                publisher.query_done(batch)
    finally:
        publisher.close()
    return data


def value_text(value: Any) -> str:
    """A value as the key page prints it (pretty JSON, two spaces)."""
    import json

    return json.dumps(value, indent=2)
