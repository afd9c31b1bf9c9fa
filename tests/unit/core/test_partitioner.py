"""The partitioners must choose exactly the partitions Kafka's producers choose."""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import KafkaError as CKafkaError
from hypothesis import given
from hypothesis import strategies as st

from sparkiq.core.partitioner import (
    IMPLEMENTATION,
    Partitioner,
    PlaceFn,
    crc32_partition,
    fnv1a,
    fnv1a_partition,
    fnv1a_py,
    murmur2,
    murmur2_py,
    partition_for,
    placer,
    to_positive,
)
from sparkiq.kafka.admin import create_topic

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


# librdkafka's unittest_fnv1a (rdfnv1a.c), whose values come from Go's hash/fnv: rd_fnv1a.
LIBRDKAFKA_FNV1A_GOLDEN = [
    (b"kafka", 0xD33C4E1),
    (b"giberish123456789", 0x77A58295),
    (b"1234", 0x23BDD03),
    (b"234", 0x2DEA3CD2),
    (b"34", 0x740FA83E),
    (b"4", 0x310CA263),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x65CBD69C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x6E49C79A),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0x69EED356),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x6ABCC023),
    (b"", 0x7EE3623B),
]
# Its 32-bit FNV-1a hash is 0x80000000 (INT_MIN), which negates to itself: librdkafka and
# Sarama then take it as 2**31, where clearing the sign bit would give 0.
FNV1A_INT_MIN_KEY = b"user-79-5feya"


@pytest.mark.parametrize(("data", "expected"), LIBRDKAFKA_FNV1A_GOLDEN)
def test_fnv1a_matches_librdkafka_golden_vectors(data: bytes, expected: int) -> None:
    assert fnv1a(data) == expected
    assert fnv1a_py(data) == expected


def test_fnv1a_int_min_is_taken_as_two_to_the_31() -> None:
    assert fnv1a(FNV1A_INT_MIN_KEY) == fnv1a_py(FNV1A_INT_MIN_KEY) == 2**31
    for n in (5, 6, 7, 64):
        assert fnv1a_partition(FNV1A_INT_MIN_KEY, n) == 2**31 % n
    assert fnv1a_partition(FNV1A_INT_MIN_KEY, 7) == 2  # not 0 (sign bit cleared)


def test_crc32_partition_is_unsigned_ieee_crc32() -> None:
    # The CRC-32 check value: its top bit is set, so a signed reading would differ.
    assert crc32_partition(b"123456789", 2**31 + 1) == 0xCBF43926 % (2**31 + 1)
    assert crc32_partition(b"123456789", 7) == 0xCBF43926 % 7
    assert crc32_partition(b"", 7) == 0


@given(st.binary(max_size=200))
def test_fnv1a_fast_path_equals_pure_python(data: bytes) -> None:
    assert fnv1a(data) == fnv1a_py(data)
    assert 0 <= fnv1a(data) <= 2**31


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_crc32_partition_in_range_and_from_crc32(data: bytes, n: int) -> None:
    p = crc32_partition(data, n)
    assert 0 <= p < n
    assert p == zlib.crc32(data) % n


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_fnv1a_partition_in_range_and_from_fnv1a(data: bytes, n: int) -> None:
    p = fnv1a_partition(data, n)
    assert 0 <= p < n
    assert p == fnv1a_py(data) % n


def test_all_partitioners_accept_bytearray_and_memoryview() -> None:
    for place in (partition_for, crc32_partition, fnv1a_partition):
        expected = place(b"foobar", 7)
        assert place(bytearray(b"foobar"), 7) == expected
        assert place(memoryview(b"foobar"), 7) == expected
    assert fnv1a(bytearray(b"kafka")) == 0xD33C4E1


def test_placer_gives_each_partitioners_function() -> None:
    assert placer(Partitioner.MURMUR2) is partition_for
    assert placer(Partitioner.CRC32) is crc32_partition
    assert placer(Partitioner.FNV1A) is fnv1a_partition
    assert placer(Partitioner.ANY) is None
    assert [p.value for p in Partitioner] == ["murmur2", "crc32", "fnv1a", "any"]
    assert Partitioner("crc32") is Partitioner.CRC32


def _test_keys(count: int, seed: int) -> list[bytes]:
    """*count* distinct keys of every kind producers write, all tail lengths included."""
    rng = random.Random(seed)
    keys = [b"", FNV1A_INT_MIN_KEY]
    # Text keys as pipelines usually write them.
    keys += [f"user-{rng.randint(0, 10**9)}".encode() for _ in range(count * 3 // 10)]
    keys += [f"klient-{rng.randint(0, 10**6)}-Ölçü-€-ключ-😀".encode() for _ in range(count // 5)]
    keys += [rng.randbytes(rng.randint(1, 64)) for _ in range(count * 9 // 20)]
    keys += [rng.randbytes(rng.randint(1024, 4096)) for _ in range(count // 20)]
    distinct = list(dict.fromkeys(keys))
    return distinct[:count]


def _partitions_chosen_by_librdkafka(
    bootstrap: str, topic: str, num_partitions: int, keys: list[bytes], partitioner: str
) -> dict[bytes, set[int]]:
    """Produce *keys* with librdkafka's *partitioner* and read each record's partition back."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": partitioner, "linger.ms": 5}
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
            "fetch.wait.max.ms": 10,
        }
    )
    read: dict[bytes, set[int]] = {}
    seen = 0
    try:
        # assign() rather than subscribe(): no group join to wait for.
        consumer.assign([TopicPartition(topic, p, 0) for p in range(num_partitions)])
        deadline = time.monotonic() + 60
        while seen < len(keys) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=len(keys) - seen, timeout=0.5):
                if msg.error() is not None:
                    continue
                read.setdefault(msg.key(), set()).add(msg.partition())
                seen += 1
    finally:
        consumer.close()
    assert seen == len(keys), f"read back {seen} of {len(keys)} records"
    # What the broker stored is what the producer reported (an empty key stays empty).
    assert read == delivered
    return read


# librdkafka's partitioner settings for keyed records, and the function that must agree.
LIBRDKAFKA_SETTINGS = [
    pytest.param(setting, place, id=setting)
    for setting, place in [
        ("murmur2_random", partition_for),
        ("consistent", crc32_partition),
        ("consistent_random", crc32_partition),
        ("fnv1a", fnv1a_partition),
        ("fnv1a_random", fnv1a_partition),
    ]
]
# librdkafka places an empty key at random under this setting (partitioner.py).
EMPTY_KEY_RANDOM = {"consistent_random"}


@pytest.mark.parametrize("num_partitions", [1, 3, 6, 7, 64])
@pytest.mark.parametrize(("setting", "place"), LIBRDKAFKA_SETTINGS)
def test_matches_librdkafka(
    bootstrap: str,
    unique_name: Callable[[str], str],
    setting: str,
    place: PlaceFn,
    num_partitions: int,
) -> None:
    topic = unique_name(f"partitioner-{setting.replace('_', '-')}-{num_partitions}")
    create_topic(bootstrap, topic, num_partitions)
    keys = _test_keys(3000, seed=num_partitions)
    chosen = _partitions_chosen_by_librdkafka(bootstrap, topic, num_partitions, keys, setting)
    assert set(chosen) == set(keys)
    if setting in EMPTY_KEY_RANDOM:
        assert chosen.pop(b"") <= set(range(num_partitions))
    mismatches = {
        k: (p, place(k, num_partitions))
        for k, ps in chosen.items()
        for p in ps
        if p != place(k, num_partitions)
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
