"""Reading offset ranges in a task (pooled consumers, Arrow batches) against Apache Kafka."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer

from sparkiq.kafka.admin import create_topic
from sparkiq.spark.rangeread import OffsetRange, close_pooled_consumers, read_range
from sparkiq.spark.source import SourceOptions


def test_a_range_behind_thousands_of_small_batches_is_read_at_once(
    any_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The dev broker lists a partition's batches from the first one within the fetch's max
    wait and answers with no records when the wait runs out first: with a 1 ms wait, a range
    behind a few thousand one-record batches (a few minutes of the demo's live invoices) was
    never read, and the demo's pipeline failed after pollTimeoutMs."""
    bootstrap = any_bootstrap
    topic = unique_name("many-batches")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    count = 6_000
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=0)
        if i % 500 == 499:
            producer.flush()
    assert producer.flush(30) == 0
    options = SourceOptions.parse(
        {"bootstrap.servers": bootstrap, "subscribe": topic, "pollTimeoutMs": "20000"}
    )
    try:
        started = time.monotonic()
        for start in (count // 2, count - 10):
            part = OffsetRange(topic, 0, start, start + 10)
            batches = list(read_range(options, part))
            assert [o for b in batches for o in b.column("offset").to_pylist()] == list(
                range(start, start + 10)
            )
        assert time.monotonic() - started < 15
    finally:
        close_pooled_consumers()
