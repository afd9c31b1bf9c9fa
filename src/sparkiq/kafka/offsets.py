"""End offsets that can be trusted, also on the dev broker.

The dev broker reports a partition's high watermark as the base offset of the last record
batch + 1, not the last offset + 1 (../shared/BASELINES.md). A reader that stops at the
reported end misses the tail of the last batch. `true_end_offsets` reads from the reported
end - 1 and takes the last offset actually returned + 1; on real Kafka this gives the same
answer as the watermark.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import KafkaError as CKafkaError

from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

TopicPartitionKey = tuple[str, int]

# librdkafka settings that make a short read of a partition tail return at once.
_PROBE_CONF: Mapping[str, str | int | float | bool] = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "fetch.wait.max.ms": 10,
    "auto.offset.reset": "latest",
}


def probe_consumer(bootstrap_servers: str, security: KafkaSecurity = PLAINTEXT) -> Consumer:
    """A group-less consumer for offset look-ups."""
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"sparkiq-probe-{uuid.uuid4()}",
    }
    conf.update(security.librdkafka_conf())
    conf.update(_PROBE_CONF)
    return Consumer(conf)


def watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartitionKey], timeout_s: float = 10.0
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """(low, reported high) watermark per partition, as the broker reports them."""
    return {
        (t, p): tuple(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s))  # type: ignore[misc]
        for t, p in partitions
    }


def true_end_offsets(
    bootstrap_servers: str,
    partitions: Iterable[TopicPartitionKey],
    *,
    timeout_s: float = 10.0,
    consumer: Consumer | None = None,
    security: KafkaSecurity = PLAINTEXT,
) -> dict[TopicPartitionKey, int]:
    """The offset after the last record of each partition (0 for an empty one).

    *consumer* (already configured) is used if given; otherwise a probe consumer is made
    with *security*.
    """
    own = consumer is None
    c = consumer if consumer is not None else probe_consumer(bootstrap_servers, security)
    try:
        marks = watermarks(c, partitions, timeout_s)
        ends: dict[TopicPartitionKey, int] = {}
        to_probe: dict[TopicPartitionKey, int] = {}
        for tp, (low, high) in marks.items():
            if high <= low:
                ends[tp] = high
            else:
                ends[tp] = high
                to_probe[tp] = high - 1
        if to_probe:
            _read_tails(c, to_probe, ends, timeout_s)
        return ends
    finally:
        if own:
            c.close()


def _read_tails(
    consumer: Consumer,
    starts: Mapping[TopicPartitionKey, int],
    ends: dict[TopicPartitionKey, int],
    timeout_s: float,
) -> None:
    consumer.assign([TopicPartition(t, p, off) for (t, p), off in starts.items()])
    pending = set(starts)
    deadline = time.monotonic() + timeout_s
    try:
        while pending and time.monotonic() < deadline:
            # consume() waits for the whole batch or the timeout; the tail of one batch per
            # partition is all there is to read, so a small count returns at once.
            for msg in consumer.consume(num_messages=len(pending), timeout=0.2):
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                if topic is None or partition is None or offset is None:
                    continue
                tp = (topic, partition)
                err = msg.error()
                if err is not None:
                    if err.code() == CKafkaError._PARTITION_EOF:
                        ends[tp] = max(ends[tp], offset)
                        pending.discard(tp)
                    continue
                ends[tp] = max(ends[tp], offset + 1)
    finally:
        consumer.unassign()
