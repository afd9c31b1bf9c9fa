"""One local SparkSession for the whole test session, and helpers shared by the Spark tests.

Test modules that need Spark declare ``pytest_plugins = ["tests.support.spark"]`` and take the
``spark`` fixture; every one of them gets the same session (starting Spark costs seconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from sparkiq.kafka.offsets import true_end_offsets


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from sparkiq.spark.session import local_session

    session = local_session("sparkiq-tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()


def read_topic(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0
) -> list[Message]:
    """Every record of *topic*, up to the true end of each partition, in partition order."""
    tps = [(topic, p) for p in range(partitions)]
    ends = true_end_offsets(bootstrap, tps)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sparkiq-tests-read",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    out: list[Message] = []
    try:
        want = {tp: end for tp, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(t, p, 0) for (t, p) in want])
        seen = {tp: 0 for tp in want}
        deadline = time.monotonic() + timeout_s
        while any(seen[tp] < want[tp] for tp in want) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    continue
                tp = (msg.topic(), msg.partition())
                offset = msg.offset()
                assert offset is not None
                seen[tp] = offset + 1  # type: ignore[index]
                out.append(msg)
    finally:
        consumer.close()
    out.sort(key=lambda m: (m.partition() or 0, m.offset() or 0))
    return out
