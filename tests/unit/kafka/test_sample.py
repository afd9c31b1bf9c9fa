"""Sampling a topic's keys on Apache Kafka: from the beginning, capped, to the true end."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest
from confluent_kafka import Producer

from sparkiq.core.errors import KafkaError
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.sample import sample_keys

PARTITIONS = 6
Record = tuple[int, bytes | None]


def _produce(bootstrap: str, topic: str, records: Sequence[Record], flushes: int) -> None:
    """Write *records* (partition, key) in order, in *flushes* separate flushes.

    Several flushes make several record batches per partition: the dev broker then
    reports an end offset short of the last batch's tail.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    chunk = -(-len(records) // flushes)
    for start in range(0, len(records), chunk):
        for partition, key in records[start : start + chunk]:
            producer.produce(topic, key=key, value=b"v", partition=partition)
        assert producer.flush(30) == 0


def _key(partition: int, i: int) -> bytes:
    return f"k-{partition}-{i}".encode()


def _keyed(partition: int, count: int) -> list[Record]:
    return [(partition, _key(partition, i)) for i in range(count)]


def _by_partition(samples: Sequence[tuple[int, bytes]]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for partition, key in samples:
        out.setdefault(partition, []).append(key)
    return out


@pytest.fixture
def topic(bootstrap: str, unique_name: Callable[[str], str]) -> str:
    name = unique_name("sample")
    create_topic(bootstrap, name, PARTITIONS)
    return name


def test_every_record_is_sampled_in_order_when_fewer_than_the_cap(
    bootstrap: str, topic: str
) -> None:
    # Partitions interleaved, so every flush writes a batch to every partition.
    records = [(p, _key(p, i)) for i in range(100) for p in range(PARTITIONS)]
    _produce(bootstrap, topic, records, flushes=4)

    samples = sample_keys(bootstrap, topic, PARTITIONS, max_records=3000)

    assert len(samples) == 600
    got = _by_partition(samples)
    for p in range(PARTITIONS):
        assert got[p] == [key for _, key in _keyed(p, 100)]


def test_the_tail_of_the_last_batch_is_not_missed(
    any_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    # Three batches of ten on partition 1: the dev broker reports its end as 21, not 30.
    bootstrap = any_bootstrap
    topic = unique_name("sample-tail")
    create_topic(bootstrap, topic, PARTITIONS)
    records = _keyed(1, 30)
    _produce(bootstrap, topic, records, flushes=3)

    samples = sample_keys(bootstrap, topic, PARTITIONS)

    assert samples == records


def test_the_cap_is_spread_evenly_over_the_partitions(bootstrap: str, topic: str) -> None:
    records = [r for p in range(PARTITIONS) for r in _keyed(p, 200)]
    _produce(bootstrap, topic, records, flushes=3)

    samples = sample_keys(bootstrap, topic, PARTITIONS, max_records=100)

    # ceil(100 / 6) = 17 per partition, the first 17 of each.
    got = _by_partition(samples)
    assert sorted(got) == list(range(PARTITIONS))
    for p in range(PARTITIONS):
        assert got[p] == [key for _, key in _keyed(p, 17)]


def test_null_keys_are_skipped_and_empty_keys_kept(bootstrap: str, topic: str) -> None:
    records: list[Record] = []
    for p in range(PARTITIONS):
        records += [(p, None), (p, b""), *_keyed(p, 5), (p, None)]
    _produce(bootstrap, topic, records, flushes=2)

    # Ten per partition: the null keys must not use up the share of keyed records.
    samples = sample_keys(bootstrap, topic, PARTITIONS, max_records=6 * PARTITIONS)

    assert sorted(samples) == sorted((p, k) for p, k in records if k is not None)
    assert all(key is not None for _, key in samples)


def test_an_empty_topic_gives_nothing_at_once(bootstrap: str, topic: str) -> None:
    start = time.monotonic()
    samples = sample_keys(bootstrap, topic, PARTITIONS, timeout_s=5.0)

    assert samples == []
    assert time.monotonic() - start < 1.5


def test_a_partly_filled_topic_returns_without_waiting(bootstrap: str, topic: str) -> None:
    records = _keyed(4, 3)
    _produce(bootstrap, topic, records, flushes=1)

    start = time.monotonic()
    samples = sample_keys(bootstrap, topic, PARTITIONS, timeout_s=5.0)

    assert samples == records
    assert time.monotonic() - start < 1.5


def test_an_unreachable_broker_fails_within_the_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(KafkaError, match="end offsets"):
        sample_keys(f"127.0.0.1:{free_port()}", "nowhere", 3, timeout_s=1.0)
    assert time.monotonic() - start < 2.5
