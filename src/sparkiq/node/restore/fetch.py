"""The restorer's consumer: its settings, how it takes a batch, and where it stands in each
partition it fetches."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.topology import TopicPartition
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.consumers import TUNED_READ_CONF
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

# The restorer reads with the project's tuned settings. The fetch wait (`fetch.wait.max.ms`)
# costs no lag: with `fetch.min.bytes` 1 the broker answers a parked fetch as soon as a record
# arrives, and `next_batch` hands it on at once. A position the broker finds out of range
# (the log start moved past it) is reported, not reset silently:
# `sparkiq.node.restore.truncation`.
CONSUMER_CONF: Mapping[str, str | int | float | bool] = {
    **TUNED_READ_CONF,
    "auto.offset.reset": "error",
    # librdkafka's default, said out loud: a changelog written in transactions (Kafka
    # Streams' exactly-once) is served with its committed records only.
    "isolation.level": "read_committed",
    # A partition whose fetched records fill the consumer's queue (`queued.min.messages`,
    # `queued.max.messages.kbytes`: one 60-MB fetch nearly does) is fetched again only after
    # this wait; librdkafka's default, 1 s, left a restoring restorer waiting in `poll` for
    # 0.5-1 s of a 1M-record restore once it had drained the queue
    # (`benchmarks/bench_restore.py`). It applies only to a full queue: a caught-up or idle
    # consumer never waits on it.
    "fetch.queue.backoff.ms": 10,
}

BATCH_SIZE = 10_000  # records per batch taken, and so at most per store write


def next_batch(consumer: Consumer, wait_s: float) -> list[Message]:
    """Up to `BATCH_SIZE` messages: waits at most *wait_s* for the first, then takes only
    what the consumer holds already.

    `consume(n, timeout)` would return before its timeout only once it has *n* messages: a
    partition that is caught up (a few records a fetch) would wait out the whole timeout on
    every batch, which was the apply lag (p50 ~50 ms, p99 ~100 ms with 0.1 s). While
    restoring, the consumer holds up to `queued.min.messages` fetched ahead, so batches stay
    full; once caught up a record is applied as soon as its fetch returns. An idle consumer
    still blocks in `poll` for the whole *wait_s*: no busy loop.
    """
    first = consumer.poll(wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(BATCH_SIZE - 1, 0)]


def new_consumer(
    bootstrap: str, overrides: Mapping[str, str], security: KafkaSecurity = PLAINTEXT
) -> Consumer:
    """A consumer for `assign()` mode: it never joins its group."""
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"sparkiq-restore-{uuid.uuid4()}",  # required by librdkafka, never joined
    }
    conf.update(security.librdkafka_conf())
    conf.update(CONSUMER_CONF)
    conf.update(overrides)
    return Consumer({**conf, **LOG_CONF})


class Fetching:
    """The partitions the consumer fetches, each with its cursor.

    A cursor is the offset the consumer has delivered a partition up to (exclusive): the
    offset it was started at, moved past every record and end-of-partition event it returned
    since. Every record the consumer returns is either written to the partition's store or
    not; only while the cursor equals the store's position does the consumer continue
    exactly where the store stops. A partition whose cursor and position differ (records
    returned while it was unassigned, or a write that failed) must be stopped and started
    again from its store's checkpoint, or its checkpoint would skip records never written.

    Used by the restorer thread only.
    """

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.cursors: dict[TopicPartition, int] = {}

    def __bool__(self) -> bool:
        return bool(self.cursors)

    def start(self, checkpoints: Mapping[TopicPartition, int | None]) -> None:
        """Fetch each partition from its checkpoint (None: from the beginning)."""
        if not checkpoints:
            return
        self.consumer.incremental_assign(
            [
                CTopicPartition(t, p, OFFSET_BEGINNING if at is None else at)
                for (t, p), at in checkpoints.items()
            ]
        )
        self.cursors.update((tp, at or 0) for tp, at in checkpoints.items())

    def stop(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching *tps*; records the consumer had already fetched are dropped."""
        gone = [tp for tp in tps if self.cursors.pop(tp, None) is not None]
        if gone:
            self.consumer.incremental_unassign([CTopicPartition(t, p) for t, p in gone])

    def delivered(self, tp: TopicPartition, last: int | None, eof: int | None) -> int | None:
        """Move *tp*'s cursor past a returned batch: its last record's offset, and the offset
        of an end-of-partition event. Returns the cursor before (None: *tp* not fetched)."""
        before = self.cursors.get(tp)
        if before is None:
            return None
        after = before if last is None else last + 1
        if eof is not None and eof > after:
            after = eof
        self.cursors[tp] = after
        return before
