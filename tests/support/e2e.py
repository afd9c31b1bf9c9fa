"""Helpers for the end-to-end tests: seeded data sets with their oracle, bulk HTTP checks."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from confluent_kafka import Message, Producer


@dataclass
class Oracle:
    """The expected table, computed in plain Python from what was produced."""

    latest: dict[str, Any] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    partition_of: dict[str, int] = field(default_factory=dict)
    produced_per_partition: dict[int, int] = field(default_factory=dict)

    def apply(self, key: str, value: Any | None, partition: int) -> None:
        self.partition_of[key] = partition
        self.produced_per_partition[partition] = self.produced_per_partition.get(partition, 0) + 1
        if value is None:
            self.latest.pop(key, None)
            self.deleted.add(key)
        else:
            self.latest[key] = value
            self.deleted.discard(key)

    def sorted_items(self) -> list[tuple[str, Any]]:
        return sorted(self.latest.items())


def produce_seeded(
    bootstrap: str,
    topic: str,
    *,
    keys: int,
    updates: int,
    deletes: int,
    seed: int,
    oracle: Oracle | None = None,
    value_pad: int = 40,
) -> Oracle:
    """Write `keys` keys with `updates` versions each (shuffled), then delete `deletes` keys.

    Every record's partition comes from the delivery report, i.e. what the Kafka client chose
    with Kafka's default partitioner.
    """
    rng = random.Random(seed)
    oracle = oracle if oracle is not None else Oracle()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20}
    )
    # Records of one key must be applied to the oracle in production order; delivery
    # callbacks of one partition arrive in order, and a key always maps to one partition.
    pending: list[tuple[str, Any | None]] = []

    def on_delivery(err: Any, msg: Message) -> None:
        assert err is None, f"delivery failed: {err}"
        key = (msg.key() or b"").decode()
        raw = msg.value()
        oracle.apply(key, None if raw is None else orjson.loads(raw), msg.partition() or 0)

    names = [f"k{i:06d}" for i in range(keys)]
    versions = [(name, v) for name in names for v in range(updates)]
    rng.shuffle(versions)
    seen: dict[str, int] = {}
    for name, _ in versions:
        version = seen.get(name, 0)
        seen[name] = version + 1
        value = {
            "key": name,
            "version": version,
            "n": rng.randrange(1_000_000),
            "pad": "x" * value_pad,
        }
        pending.append((name, value))
    for name in rng.sample(names, deletes):
        pending.append((name, None))
    for i, (name, value) in enumerate(pending):
        producer.produce(
            topic,
            key=name.encode(),
            value=None if value is None else orjson.dumps(value),
            on_delivery=on_delivery,
        )
        if i % 5000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not delivered"
    return oracle


async def fetch_all(
    url: str, table: str, keys: Iterable[str], *, concurrency: int = 32, params: str = ""
) -> dict[str, tuple[int, Any]]:
    """GET every key from one node; key -> (status, parsed body)."""
    out: dict[str, tuple[int, Any]] = {}
    queue: asyncio.Queue[str] = asyncio.Queue()
    for k in keys:
        queue.put_nowait(k)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while True:
                try:
                    key = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                path = f"{url}/v1/tables/{table}/keys/{quote(key, safe='')}{params}"
                async with session.get(path) as resp:
                    out[key] = (resp.status, orjson.loads(await resp.read()))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def mismatches(answers: dict[str, tuple[int, Any]], oracle: Oracle, limit: int = 5) -> list[str]:
    """Human-readable differences between a node's answers and the oracle."""
    wrong: list[str] = []
    for key, (status, body) in answers.items():
        if key in oracle.latest:
            if status != 200 or body.get("value") != oracle.latest[key]:
                wrong.append(f"{key}: got {status} {body}, expected {oracle.latest[key]}")
        elif status != 404:
            wrong.append(f"{key}: got {status} {body}, expected 404")
        if len(wrong) >= limit:
            break
    return wrong


def read_topic(
    bootstrap: str, topic: str, *, timeout_s: float = 60.0
) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of *topic* up to its true end, as (key, value), partition by partition."""
    return [
        (key, value) for _, _, key, value in read_records(bootstrap, topic, timeout_s=timeout_s)
    ]


def read_records(
    bootstrap: str, topic: str, *, timeout_s: float = 60.0
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of *topic* up to its true end, as (partition, offset, key, value)."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    from sparkiq.kafka.admin import partition_count
    from sparkiq.kafka.offsets import true_end_offsets

    n = partition_count(bootstrap, topic)
    ends = true_end_offsets(bootstrap, [(topic, p) for p in range(n)])
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "e2e-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(n) if ends[(topic, p)] > 0])
        remaining = {p: end for (_, p), end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    continue
                p, off = msg.partition(), msg.offset()
                if p is not None and p in remaining and off is not None and off < remaining[p]:
                    out.append((p, off, msg.key(), msg.value()))
                    if off + 1 >= remaining[p]:
                        del remaining[p]
        assert not remaining, f"could not read {topic} to its end: {remaining}"
    finally:
        consumer.close()
    return out
