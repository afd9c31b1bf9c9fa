"""True end offsets, on Apache Kafka (one ListOffsets) and on the dev broker (whose reported
end stops at its last batch's first record, so the tail is read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from sparkiq.kafka.admin import create_topic, partition_count
from sparkiq.kafka.offsets import (
    FOLLOWING_FETCH_BYTES,
    ends_from,
    probe_consumer,
    true_end_offsets,
    watermarks,
)
from sparkiq.kafka.security import PLAINTEXT


class _Recording:
    """A real consumer that notes which partitions it was told to read."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.assigned: list[Any] = []

    def assign(self, partitions: list[Any]) -> None:
        self.assigned.extend(partitions)
        self.consumer.assign(partitions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def test_true_end_counts_the_tail_of_the_last_batch(
    any_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    bootstrap = any_bootstrap
    topic = unique_name("ends")
    create_topic(bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(3):  # three batches of ten records on partition 1
        for i in range(10):
            producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=1)
        producer.flush()
    producer.produce(topic, key=b"x", value=b"v", partition=2)
    producer.flush()

    ends = true_end_offsets(bootstrap, [(topic, 0), (topic, 1), (topic, 2)])

    assert ends == {(topic, 0): 0, (topic, 1): 30, (topic, 2): 1}


def test_partition_count(bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("count")
    create_topic(bootstrap, topic, 4)
    assert partition_count(bootstrap, topic) == 4


def test_on_apache_kafka_an_end_is_one_list_offsets_and_no_read(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("ends-kafka")
    create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200})
    for i in range(500):  # one batch: the dev broker would report 1
        producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=0)
    assert producer.flush(10) == 0
    probe = _Recording(probe_consumer(bootstrap))
    try:
        assert watermarks(probe.consumer, [(topic, 0)])[(topic, 0)] == (0, 500)
        ends = true_end_offsets(bootstrap, [(topic, 0), (topic, 1)], consumer=probe)  # type: ignore[arg-type]
        following = ends_from(probe, bootstrap, [(topic, 0)], ends, security=PLAINTEXT)  # type: ignore[arg-type]
    finally:
        probe.close()
    assert ends == {(topic, 0): 500, (topic, 1): 0}
    assert following == {(topic, 0): 500}
    assert probe.assigned == []


def test_true_end_counts_a_large_last_batch_whole_through_a_reused_probe(
    dev_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    bootstrap = dev_bootstrap
    # The read stops at the first record of a partition's last batch and takes the rest of
    # that batch from what librdkafka has already queued: a last batch of thousands of
    # records must still be counted to its end, also by a probe consumer reused for a
    # second read (as the Spark source reuses its own).
    topic = unique_name("ends-large")
    create_topic(bootstrap, topic, 2)
    tps = [(topic, 0), (topic, 1)]
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 500, "batch.num.messages": 10_000}
    )
    probe = probe_consumer(bootstrap)
    try:
        total = 0
        for round_, count in enumerate((3_000, 4_000), start=1):
            for i in range(count):
                producer.produce(topic, key=f"k{i}".encode(), value=b"v" * 50, partition=0)
            producer.produce(topic, key=b"x", value=b"v", partition=1)
            producer.flush()
            total += count
            marks = watermarks(probe, tps)
            # The dev broker reports the last batch's base offset + 1: the tail is unreported.
            assert marks[(topic, 0)][1] < total

            # Alone, the partition is done at the first record of its last batch.
            assert true_end_offsets(bootstrap, tps[:1], consumer=probe) == {(topic, 0): total}
            ends = true_end_offsets(bootstrap, tps, consumer=probe)
            assert ends == {(topic, 0): total, (topic, 1): round_}
    finally:
        probe.close()


def test_ends_from_known_ends_and_the_long_way_agree(
    any_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    bootstrap = any_bootstrap
    # Partition 0 has an end known from before (one fetch from there), partition 1 none
    # (watermarks and the last batch): both come out exact, through a probe with small
    # fetches, as the publisher and the source's planner use it.
    topic = unique_name("ends-from")
    create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(12):
        producer.produce(topic, key=f"k{i}".encode(), value=b"v" * 100, partition=i % 2)
    producer.flush()
    probe = probe_consumer(bootstrap, max_partition_fetch_bytes=FOLLOWING_FETCH_BYTES)
    try:
        known = ends_from(probe, bootstrap, [(topic, 0)], {}, security=PLAINTEXT)
        assert known == {(topic, 0): 6}
        for i in range(2_000):  # more than one small fetch's worth past the known end
            producer.produce(topic, key=f"m{i}".encode(), value=b"v" * 100, partition=i % 2)
        producer.flush()
        ends = ends_from(probe, bootstrap, [(topic, 0), (topic, 1)], known, security=PLAINTEXT)
    finally:
        probe.close()
    assert ends == {(topic, 0): 1_006, (topic, 1): 1_006}


class _LeaderGoes:
    """A consumer whose first watermark request meets the partition's leader dying (what
    librdkafka raises then), and whose next one reaches the new leader."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.asked = 0

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return (0, 42)


def test_watermarks_ask_again_when_the_leader_died_under_the_request() -> None:
    consumer = _LeaderGoes(KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT)
    marks = watermarks(consumer, [("t", 0)], timeout_s=5.0)  # type: ignore[arg-type]
    assert marks == {("t", 0): (0, 42)}
    assert consumer.asked == 3


def test_watermarks_give_up_on_other_errors_and_at_the_deadline() -> None:
    with pytest.raises(KafkaException):
        watermarks(_LeaderGoes(KafkaError.TOPIC_AUTHORIZATION_FAILED), [("t", 0)])  # type: ignore[arg-type]
    gone = _LeaderGoes(*[KafkaError._DESTROY_BROKER] * 1000)
    with pytest.raises(KafkaException):
        watermarks(gone, [("t", 0)], timeout_s=0.3)  # type: ignore[arg-type]
    assert 1 < gone.asked < 1000
