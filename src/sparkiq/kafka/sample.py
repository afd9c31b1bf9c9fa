"""Reads a sample of a topic's keyed records: which key is in which partition.

`sparkiq.core.placement.detect` tells from such a sample which partitioner the producers used.
The sample is taken from the beginning of every partition, up to an even share of
*max_records* per partition, so every partition has its say and a large topic costs no
more than a small one. Records with a null key are skipped: they were placed at random
and name nothing a table serves. An empty key (``b""``) is a key and is kept.

Each partition is read to its *true* end at most (`sparkiq.kafka.offsets.true_end_offsets`):
the dev broker under-reports the end offset, and a reader that trusted it would stop short
of the last batch's tail. The whole read is bounded by a timeout: a sample is a best
effort, and what was read by then is returned.
"""

from __future__ import annotations

import logging
import math
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka import KafkaError as CKafkaError

from sparkiq.core.errors import KafkaError
from sparkiq.core.formatcheck import SampledRecord
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.consumers import says_nothing_wrong
from sparkiq.kafka.offsets import true_end_offsets
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = ["SampledRecord", "sample_keys", "sample_records"]

log = logging.getLogger(__name__)

# A sample is small: a short empty-fetch wait keeps the last round trips quick.
_FETCH_WAIT_MS = 10
# The most records asked of one consume() call; it returns earlier once they are here.
_BATCH = 10_000
# Longest single wait in consume(), so the deadline is checked often.
_POLL_S = 0.2


def sample_keys(
    bootstrap: str,
    topic: str,
    num_partitions: int,
    *,
    max_records: int = 3000,
    timeout_s: float = 5.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[tuple[int, bytes]]:
    """(partition, key) of the first keyed records of every partition of *topic*.

    At most ``ceil(max_records / num_partitions)`` records per partition, read from the
    beginning; null-key records are skipped. Returns within about *timeout_s* with what
    was read by then; an empty topic returns ``[]`` at once.
    """
    records = sample_records(
        bootstrap,
        topic,
        num_partitions,
        max_records=max_records,
        timeout_s=timeout_s,
        security=security,
    )
    return [(r.partition, r.key) for r in records]


def sample_records(
    bootstrap: str,
    topic: str,
    num_partitions: int,
    *,
    max_records: int = 3000,
    timeout_s: float = 5.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[SampledRecord]:
    """The first keyed records of every partition of *topic*, as `sample_keys` picks them,
    with their offsets and values."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if max_records < 1:
        return []
    deadline = time.monotonic() + timeout_s
    per_partition = math.ceil(max_records / num_partitions)
    consumer = _sample_consumer(bootstrap, security)
    try:
        # Half the time for finding the ends: their look-ups could otherwise take all of it
        # (watermarks, then the tail reads, each bounded by the timeout given).
        ends = _true_ends(bootstrap, topic, num_partitions, consumer, timeout_s / 2, security)
        reader = _Reader(topic, ends, per_partition)
        if reader.pending:
            consumer.assign([TopicPartition(topic, p, 0) for p in sorted(reader.pending)])
            reader.read(consumer, deadline)
        return reader.samples
    finally:
        consumer.close()


def _sample_consumer(bootstrap: str, security: KafkaSecurity) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Required by librdkafka, never joined: the consumer only uses assign().
            "group.id": f"sparkiq-sample-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": _FETCH_WAIT_MS,
            **LOG_CONF,
            # Reads start at offset 0, not OFFSET_BEGINNING: resolving that costs the dev
            # broker ~0.5 s on a large partition. Where retention removed offset 0, the
            # reset goes to the earliest offset left.
            "auto.offset.reset": "earliest",
            **security.librdkafka_conf(),
        }
    )


def _true_ends(
    bootstrap: str,
    topic: str,
    num_partitions: int,
    consumer: Consumer,
    timeout_s: float,
    security: KafkaSecurity,
) -> dict[int, int]:
    """True end offset per partition of *topic*."""
    tps = [(topic, p) for p in range(num_partitions)]
    try:
        ends = true_end_offsets(
            bootstrap, tps, timeout_s=timeout_s, consumer=consumer, security=security
        )
    except KafkaException as exc:
        raise KafkaError(
            f"cannot read the end offsets of topic {topic!r} from {bootstrap}: {exc}; check "
            "that the brokers are reachable and that the topic exists"
        ) from exc
    return {p: end for (_, p), end in ends.items()}


class _Reader:
    """Collects keyed records until each partition has its share or is read to its end."""

    def __init__(self, topic: str, ends: dict[int, int], per_partition: int) -> None:
        self.topic = topic
        self.ends = ends
        self.per_partition = per_partition
        self.samples: list[SampledRecord] = []
        self.taken = dict.fromkeys(ends, 0)
        self.next_offset = dict.fromkeys(ends, 0)
        self.pending = {p for p, end in ends.items() if end > 0}

    def read(self, consumer: Consumer, deadline: float) -> None:
        """Consume until no partition is pending or *deadline* (monotonic) has passed."""
        while self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.info(
                    "sampling topic %r stopped at the timeout with %d keys; partitions %s "
                    "not read to the end",
                    self.topic,
                    len(self.samples),
                    sorted(self.pending),
                )
                return
            # consume() waits for the whole batch or the timeout: ask for no more than
            # can still come, so it returns as soon as they are here.
            batch = consumer.consume(num_messages=self._wanted(), timeout=min(_POLL_S, remaining))
            finished = [p for p in map(self._take, batch) if p is not None]
            if finished:
                # Pausing drops what was fetched ahead for these partitions: otherwise the
                # pending ones' records would wait behind them in the consumer's one queue.
                consumer.pause([TopicPartition(self.topic, p) for p in finished])

    def _wanted(self) -> int:
        wanted = sum(
            min(self.ends[p] - self.next_offset[p], self.per_partition - self.taken[p])
            for p in self.pending
        )
        return max(1, min(_BATCH, wanted))

    def _take(self, msg: Message) -> int | None:
        """Take one consumed message; returns its partition if that is now finished."""
        partition, offset = msg.partition(), msg.offset()
        if partition is None or offset is None or partition not in self.pending:
            return None
        err = msg.error()
        if err is not None:
            # Real Kafka's end may follow a transaction marker, never returned as a record:
            # the end-of-partition event is then what says the partition is read.
            if err.code() == CKafkaError._PARTITION_EOF:
                return self._finish(partition) if offset >= self.ends[partition] else None
            if not says_nothing_wrong(err):
                log.warning("sampling topic %r: consumer error %s", self.topic, err.str())
            return None
        self.next_offset[partition] = offset + 1
        key = msg.key()
        if key is not None:
            self.samples.append(SampledRecord(partition, offset, key, msg.value()))
            self.taken[partition] += 1
        if (
            self.taken[partition] >= self.per_partition
            or self.next_offset[partition] >= self.ends[partition]
        ):
            return self._finish(partition)
        return None

    def _finish(self, partition: int) -> int:
        self.pending.discard(partition)
        return partition
