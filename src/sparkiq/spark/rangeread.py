"""Reads offset ranges of Kafka partitions in Spark tasks (the task side of `sparkiq-kafka`).

A task reads each of its `OffsetRange`s with a consumer borrowed from a per-process pool, so a
reused Python worker keeps its broker connections from one micro-batch to the next, and
returns the records as Arrow record batches in `SCHEMA`, the row schema of the source (not
Python tuples, which Spark would convert row by row).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka import KafkaError as CKafkaError
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparkiq.core.errors import KafkaError
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.consumers import TUNED_READ_CONF

_log = logging.getLogger(__name__)

HEADER_TYPE = StructType(
    [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
)

SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
        StructField("headers", ArrayType(HEADER_TYPE, True), True),
    ]
)

# Spark compares the Arrow schema of returned batches with this one, field names and
# nullability included, so it is derived from SCHEMA by Spark's own conversion.
ARROW_SCHEMA: pa.Schema = to_arrow_schema(SCHEMA, timezone="UTC")

_ARROW_ROWS_PER_BATCH = 50_000


@dataclass(frozen=True)
class OffsetRange:
    """The records ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


class ReadOptions(Protocol):
    """What reading a range takes from the source's options (`SourceOptions` has it): a
    protocol, so the task side imports nothing of the driver side."""

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def kafka_config(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def poll_timeout_s(self) -> float: ...


# -- consumer pool (one per Python worker process) -------------------------------------------

PoolKey = tuple[str, tuple[tuple[str, str], ...]]

# How long a task's consumer lets the broker wait per fetch (fetch.wait.max.ms), shortest
# first. A task reads a range that is already in the log, so it never waits for new records
# and the shortest wait is the fastest: with the tail reader's 100 ms, reading three ranges of
# a few records took ~210 ms on the dev broker; with 1 ms, ~7 ms (the fetch in flight at the
# end of a range delays the next range's first fetch by up to the wait). But the dev broker
# (Tansu 0.6, memory storage) spends the fetch's wait listing the partition's record batches
# from the first one and answers with no records when the wait runs out before it reaches the
# fetch offset, though the records are there (tests/unit/spark/test_rangeread.py): with 1 ms a
# partition of a few thousand small batches (a few minutes of the demo) is never read again,
# with 10 ms one of ~30,000. A consumer that gets nothing for ESCALATE_AFTER_S while its range
# is unread is replaced by one with the next wait, and the process keeps that wait from then on.
# The escalation is quick because the stall is dear: its task waits, and its consumer's empty
# fetches, hundreds a second, each have the dev broker list every batch again (reading 60,000
# invoices behind 5,000 one-record batches per partition: 1.4 s and 1.2 s of the broker's CPU
# from a 1 ms wait, 1 s of it stalled; 0.4 s and 0.2 s from 20 ms). Every new Python worker
# process meets it once; the point-of-sale pipeline starts several.
FETCH_WAITS_MS = (1, 20, 200, 1000)
ESCALATE_AFTER_S = 0.25

_POOL: dict[tuple[PoolKey, int], list[Consumer]] = {}
_WAIT_LEVEL: dict[PoolKey, int] = {}  # index into FETCH_WAITS_MS; only rises
_POOL_LOCK = threading.Lock()


def _pool_key(options: ReadOptions) -> PoolKey:
    return (options.bootstrap_servers, options.kafka_config)


def _fetch_wait_ms(options: ReadOptions) -> int:
    with _POOL_LOCK:
        return FETCH_WAITS_MS[_WAIT_LEVEL.get(_pool_key(options), 0)]


def _raise_fetch_wait(options: ReadOptions, beyond_ms: int) -> None:
    """Use a longer fetch wait than *beyond_ms* from now on (no-op if already longer)."""
    with _POOL_LOCK:
        key = _pool_key(options)
        level = _WAIT_LEVEL.get(key, 0)
        if FETCH_WAITS_MS[level] <= beyond_ms and level + 1 < len(FETCH_WAITS_MS):
            _WAIT_LEVEL[key] = level + 1


def _borrow(options: ReadOptions, wait_ms: int) -> Consumer:
    key = (_pool_key(options), wait_ms)
    with _POOL_LOCK:
        idle = _POOL.get(key)
        if idle:
            return idle.pop()
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": options.bootstrap_servers,
        # assign() mode: the group id is never used to join or commit.
        "group.id": "sparkiq-source",
    }
    conf.update(TUNED_READ_CONF)  # never commits, never joins a group
    conf["fetch.wait.max.ms"] = wait_ms  # see FETCH_WAITS_MS
    conf.update(dict(options.kafka_config))
    return Consumer({**conf, **LOG_CONF})


def _give_back(options: ReadOptions, wait_ms: int, consumer: Consumer) -> None:
    key = (_pool_key(options), wait_ms)
    with _POOL_LOCK:
        _POOL.setdefault(key, []).append(consumer)


def close_pooled_consumers() -> None:
    """Close the consumers this process keeps for reuse and forget raised fetch waits (tests,
    shutdown)."""
    with _POOL_LOCK:
        pools = list(_POOL.values())
        _POOL.clear()
        _WAIT_LEVEL.clear()
    for idle in pools:
        for consumer in idle:
            consumer.close()


def _to_record_batch(topic: str, partition: int, msgs: Sequence[Message]) -> pa.RecordBatch:
    """One Arrow record batch of records of one partition, in SCHEMA's column order."""
    n = len(msgs)
    fields = ARROW_SCHEMA
    # One comprehension per column: far cheaper than appending row by row.
    stamps = [m.timestamp() for m in msgs]
    arrays = [
        pa.array([m.key() for m in msgs], type=fields.field("key").type),
        pa.array([m.value() for m in msgs], type=fields.field("value").type),
        pa.repeat(pa.scalar(topic, type=fields.field("topic").type), n),
        pa.repeat(pa.scalar(partition, type=fields.field("partition").type), n),
        pa.array([m.offset() for m in msgs], type=fields.field("offset").type),
        # Kafka timestamps are milliseconds, Spark's TimestampType microseconds.
        pa.array(
            [None if kind == TIMESTAMP_NOT_AVAILABLE else ms * 1000 for kind, ms in stamps],
            type=fields.field("timestamp").type,
        ),
        # Kafka's own numbering (Spark's Kafka source gives it): -1 none, 0 the producer's
        # create time, 1 the broker's log append time; librdkafka counts from 0 = none.
        pa.array([kind - 1 for kind, _ms in stamps], type=fields.field("timestampType").type),
        pa.array([m.headers() for m in msgs], type=fields.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


# Errors after which waiting longer cannot help.
_FATAL_CODES = frozenset(
    {
        CKafkaError.UNKNOWN_TOPIC_OR_PART,
        CKafkaError._UNKNOWN_PARTITION,
        CKafkaError._UNKNOWN_TOPIC,
        CKafkaError.TOPIC_AUTHORIZATION_FAILED,
        CKafkaError._AUTHENTICATION,
    }
)


class _NoRecords(Exception):
    """A consumer got nothing for ESCALATE_AFTER_S short of its range's end."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


def read_range(options: ReadOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``[part.start, part.end)`` of one partition, as Arrow record batches."""
    position = part.start
    while True:
        wait_ms = _fetch_wait_ms(options)
        consumer = _borrow(options, wait_ms)
        healthy = False
        try:
            rest = OffsetRange(part.topic, part.partition, position, part.end)
            yield from _read_range(consumer, options, rest, wait_ms < FETCH_WAITS_MS[-1])
            healthy = True
            return
        except _NoRecords as stalled:
            # Records the broker holds but did not answer within the wait: a longer one.
            _raise_fetch_wait(options, wait_ms)
            _log.warning(
                "no records of %s[%d] from offset %d within %.2fs at a fetch wait of %d ms; "
                "this process reads with %d ms from now on",
                part.topic,
                part.partition,
                stalled.position,
                ESCALATE_AFTER_S,
                wait_ms,
                _fetch_wait_ms(options),
            )
            position = stalled.position
        finally:
            if healthy:
                try:
                    consumer.unassign()
                except KafkaException:
                    healthy = False
            if healthy:
                _give_back(options, wait_ms, consumer)
            else:
                # A consumer that failed, stalled or was abandoned mid-range is not worth
                # trusting again.
                consumer.close()


def _read_range(
    consumer: Consumer, options: ReadOptions, part: OffsetRange, may_escalate: bool
) -> Iterator[pa.RecordBatch]:
    topic, partition, end = part.topic, part.partition, part.end
    consumer.assign([TopicPartition(topic, partition, part.start)])
    pending: list[Message] = []
    position = part.start
    last_progress = time.monotonic()
    while position < end:
        with _gc_paused():
            batch, position, progressed = _consume_chunk(consumer, options, part, position, pending)
        if batch is not None:
            yield batch
            pending = []
        now = time.monotonic()
        if progressed:
            last_progress = now
        elif may_escalate and now - last_progress >= ESCALATE_AFTER_S:
            if pending:
                with _gc_paused():
                    partial = _to_record_batch(topic, partition, pending)
                yield partial
            raise _NoRecords(position)
        elif now - last_progress > options.poll_timeout_s:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), cached=True
            )
            raise KafkaError(
                f"no records of {topic}[{partition}] from offset {position} (reading up "
                f"to {end}; the broker's end offset is {high}) within "
                f"{options.poll_timeout_s:.0f}s; check that {options.bootstrap_servers} is "
                "up, or raise the pollTimeoutMs option"
            )
    if pending:
        with _gc_paused():
            last = _to_record_batch(topic, partition, pending)
        yield last


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    # Tens of thousands of short-lived, acyclic Message objects and tuples trigger collections
    # that scan them all; pausing the cyclic collector makes a range read ~1.5x faster.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _consume_chunk(
    consumer: Consumer,
    options: ReadOptions,
    part: OffsetRange,
    position: int,
    pending: list[Message],
) -> tuple[pa.RecordBatch | None, int, bool]:
    """Consume once into *pending*: (full batch or None, new position, whether it moved)."""
    topic, partition, end = part.topic, part.partition, part.end
    start = position
    # Ask for no more than the range still needs: consume() waits for num_messages or
    # the timeout, so asking for more would idle at the end of every range.
    messages = consumer.consume(num_messages=min(10_000, end - position), timeout=0.5)
    for msg in messages:
        err = msg.error()
        if err is not None:
            if err.fatal() or err.code() in _FATAL_CODES:
                raise KafkaError(
                    f"cannot read {topic}[{partition}] from {options.bootstrap_servers}: "
                    f"{err.str()}"
                )
            if err.code() == CKafkaError._PARTITION_EOF and msg.partition() == partition:
                # Nothing left to read: the rest of the range was compacted or deleted.
                eof_at = msg.offset()
                if eof_at is not None and eof_at >= end:
                    position = end
            continue  # transient (broker restart, leader move): librdkafka retries
        if msg.partition() != partition or msg.topic() != topic:
            continue  # left over from an earlier assignment of this pooled consumer
        offset = msg.offset()
        if offset is None or offset < position:
            continue
        if offset >= end:
            position = end
            break
        pending.append(msg)
        position = offset + 1
    batch = None
    if len(pending) >= _ARROW_ROWS_PER_BATCH:
        batch = _to_record_batch(topic, partition, pending)
    return batch, position, position > start
