from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer

from sparkiq.kafka.admin import create_topic, partition_count
from sparkiq.kafka.offsets import true_end_offsets


def test_true_end_counts_the_tail_of_the_last_batch(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
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
