"""The partitioner must choose exactly the partitions Kafka's producers choose."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import KafkaError as CKafkaError
from hypothesis import given
from hypothesis import strategies as st

from sparkiq.kafka.admin import create_topic
from sparkiq.partitioner import (
    IMPLEMENTATION,
    murmur2,
    murmur2_py,
    partition_for,
    to_positive,
)

# Kafka's own UtilsTest.testMurmur2 (clients/src/test/java/.../utils/UtilsTest.java).
KAFKA_GOLDEN = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_GOLDEN)
def test_murmur2_matches_kafka_golden_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert murmur2_py(data) == expected


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-(2**31)) == 0  # Integer.MIN_VALUE: not abs()
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-973932308) == (-973932308) & 0x7FFFFFFF
    assert to_positive(479470107) == 479470107


def test_partition_for_golden_keys() -> None:
    for data, h in KAFKA_GOLDEN:
        for n in (1, 3, 6, 7, 12, 100):
            assert partition_for(data, n) == to_positive(h) % n


@given(st.binary(max_size=200))
def test_fast_path_equals_pure_python(data: bytes) -> None:
    assert murmur2(data) == murmur2_py(data)
    assert -(2**31) <= murmur2(data) < 2**31


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_from_murmur2(data: bytes, n: int) -> None:
    p = partition_for(data, n)
    assert 0 <= p < n
    assert p == to_positive(murmur2(data)) % n


def test_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == -790332482
    assert partition_for(memoryview(b"foobar"), 7) == to_positive(-790332482) % 7


def _random_keys(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randint(1, 64)) for _ in range(count // 2)]
    # Text keys as pipelines usually write them, all tail lengths (len % 4) included.
    keys += [f"user-{rng.randint(0, 10**9)}".encode() for _ in range(count - len(keys))]
    return keys


def _partitions_chosen_by_librdkafka(
    bootstrap: str, topic: str, num_partitions: int, keys: list[bytes]
) -> dict[bytes, set[int]]:
    """Produce *keys* with murmur2_random and read each record's partition back."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    )
    delivered: dict[bytes, set[int]] = {}
    errors: list[str] = []

    def on_delivery(err: CKafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
            return
        delivered.setdefault(msg.key(), set()).add(msg.partition())  # type: ignore[attr-defined]

    for key in keys:
        producer.produce(topic, key=key, value=b"v", on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    read: dict[bytes, set[int]] = {}
    seen = 0
    try:
        # assign() rather than subscribe(): no group join to wait for.
        consumer.assign([TopicPartition(topic, p, 0) for p in range(num_partitions)])
        deadline = time.monotonic() + 60
        while seen < len(keys) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                if msg.error() is not None:
                    continue
                read.setdefault(msg.key(), set()).add(msg.partition())
                seen += 1
    finally:
        consumer.close()
    assert seen == len(keys), f"read back {seen} of {len(keys)} records"
    # What the broker stored is what the producer reported.
    assert read == delivered
    return read


@pytest.mark.parametrize("num_partitions", [6, 7])
def test_matches_librdkafka_murmur2_random(
    bootstrap: str, unique_name: Callable[[str], str], num_partitions: int
) -> None:
    topic = unique_name(f"partitioner-{num_partitions}")
    create_topic(bootstrap, topic, num_partitions)
    keys = _random_keys(3000, seed=num_partitions)
    chosen = _partitions_chosen_by_librdkafka(bootstrap, topic, num_partitions, keys)
    assert len(chosen) == len(set(keys))
    mismatches = {
        k: (p, partition_for(k, num_partitions))
        for k, ps in chosen.items()
        for p in ps
        if p != partition_for(k, num_partitions)
    }
    assert not mismatches, f"{len(mismatches)} keys differ, e.g. {next(iter(mismatches.items()))}"
    # Every partition got keys: a constant partitioner would not pass this test.
    assert {p for ps in chosen.values() for p in ps} == set(range(num_partitions))


def test_partition_for_is_fast() -> None:
    """Guards the hot path against a regression to slow code; the bound is generous."""
    keys = [f"customer-{i:08d}-region".encode() for i in range(2000)]
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for k in keys:
            partition_for(k, 6)
        best = min(best, (time.perf_counter() - start) / len(keys))
    bound = 5e-6 if IMPLEMENTATION == "murmurhash2" else 40e-6
    assert best < bound, f"partition_for took {best * 1e9:.0f} ns per call ({IMPLEMENTATION})"
