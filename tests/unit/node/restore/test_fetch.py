from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_END, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.kafka.admin import create_topic
from sparkiq.node.restore.fetch import BATCH_SIZE, new_consumer, next_batch


class QueuedConsumer:
    """Behaves as a consumer whose fetched messages wait in its queue: `poll` takes one
    (waiting only when there is none), `consume(n, timeout)` takes up to n."""

    def __init__(self, queued: int) -> None:
        self.queue = list(range(queued))
        self.waits: list[tuple[str, float]] = []  # (call, timeout) of every call

    def poll(self, timeout: float) -> Any:
        self.waits.append(("poll", timeout))
        return self.queue.pop(0) if self.queue else None

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.waits.append(("consume", timeout))
        taken, self.queue = self.queue[:num_messages], self.queue[num_messages:]
        return taken


def test_an_empty_consumer_is_waited_for_once() -> None:
    consumer = QueuedConsumer(0)
    assert next_batch(consumer, 0.1) == []  # type: ignore[arg-type]
    assert consumer.waits == [("poll", 0.1)]


def test_a_few_queued_records_come_at_once_without_a_second_wait() -> None:
    consumer = QueuedConsumer(3)
    assert next_batch(consumer, 0.1) == [0, 1, 2]  # type: ignore[arg-type]
    assert consumer.waits == [("poll", 0.1), ("consume", 0)]


def test_a_full_queue_gives_full_batches_in_order() -> None:
    consumer = QueuedConsumer(2 * BATCH_SIZE + 5)
    batches = [next_batch(consumer, 0.1) for _ in range(3)]  # type: ignore[arg-type]
    assert [len(b) for b in batches] == [BATCH_SIZE, BATCH_SIZE, 5]
    assert [m for b in batches for m in b] == list(range(2 * BATCH_SIZE + 5))


def test_a_record_to_a_caught_up_partition_comes_without_waiting_out_the_timeout(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("nextbatch")
    create_topic(bootstrap, topic, 1)
    consumer = new_consumer(bootstrap, {})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    try:
        consumer.assign([CTopicPartition(topic, 0, OFFSET_END)])
        # Caught up: only the end-of-partition event, once the fetch from the end is under way.
        deadline = time.monotonic() + 30
        while not any(m.error() is not None for m in next_batch(consumer, 0.5)):
            assert time.monotonic() < deadline, "no end-of-partition event within 30 s"
        producer.produce(topic, key=b"k", value=b"v")
        assert producer.flush(10) == 0
        t0 = time.monotonic()
        got: list[bytes | None] = []
        while not got and time.monotonic() - t0 < 10:
            got = [m.value() for m in next_batch(consumer, 10.0) if m.error() is None]
        elapsed = time.monotonic() - t0
        assert got == [b"v"]
        # consume(BATCH_SIZE, 10.0) would have waited the 10 s out for more records.
        assert elapsed < 5.0
    finally:
        consumer.close()
