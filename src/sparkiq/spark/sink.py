"""Writes Spark rows to Kafka (the write side of `sparkiq-kafka`, streaming and batch).

Input columns: `key` (binary or string, optional: a null key is spread by the partitioner),
`value` (binary or string; null writes a tombstone), optional `topic` (else the `topic`
option), optional `partition` (an explicit partition wins over the partitioner: windowed
changelogs pick the partition from the key part alone), optional `headers`
(array<struct<key string, value binary>>). Records without an explicit partition go where
Kafka's Java client would put them: librdkafka's `murmur2_random` partitioner. With the
option `windowedKeys=true` the last 8 bytes of every key are a window start and records are
partitioned by the bytes before them (murmur2 of the key part), so all windows of one key
land in the partition a lookup of that key goes to; `windowedTopics=a,b` does the same for the
records to those topics only (a query writing a windowed changelog beside other topics).

Delivery is at least once: a task flushes its producer and returns its commit message only
when every record is acknowledged, and raises if any delivery failed, so Spark retries the
task (or fails the query) instead of dropping records. Producers are kept per Python worker
process and reused by later tasks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import KafkaException, Message, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from sparkiq.core.errors import ConfigError, KafkaError
from sparkiq.core.partitioner import partition_for
from sparkiq.kafka.admin import count_partitions
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.spark.options import (
    FORMAT_NAME,
    bootstrap_servers,
    librdkafka_settings,
    lower_keys,
    milliseconds_as_s,
)

_QUEUE_MAX = 500_000

# Kafka's Java default partitioner, bit for bit, for records without an explicit partition.
_PRODUCER_CONF: Mapping[str, str | int | float | bool] = {
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": _QUEUE_MAX,
    "acks": "all",
    # A task counts what it produced and learns of failures only: no Python callback per
    # record delivered (a sixth of the sink's CPU, 200,000 small records).
    "delivery.report.only.error": True,
}

_MAX_ERRORS_SHOWN = 3


@dataclass(frozen=True)
class SinkOptions:
    """The write options of `sparkiq-kafka` and the input columns present, validated."""

    bootstrap_servers: str
    topic: str | None
    has_key: bool
    has_topic_column: bool
    has_partition_column: bool
    has_headers: bool
    windowed_keys: bool = False
    # Topics whose records are window-keyed (all of them when windowed_keys): a query that
    # writes a windowed changelog beside others.
    windowed_topics: frozenset[str] = frozenset()
    flush_timeout_s: float = 120.0
    # Options named `kafka.<setting>` (librdkafka settings); out of the repr, since they may
    # hold passwords.
    kafka_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        opts = lower_keys(options)
        bootstrap = bootstrap_servers(opts, f"writing to {FORMAT_NAME}")
        columns = {f.name.lower(): f.dataType for f in schema.fields}
        _check_column(columns, "key", (BinaryType, StringType), required=False)
        _check_column(columns, "value", (BinaryType, StringType), required=True)
        _check_column(columns, "topic", (StringType,), required=False)
        _check_column(columns, "partition", (IntegerType, LongType, ShortType), required=False)
        headers = columns.get("headers")
        if headers is not None and not isinstance(headers, ArrayType):
            raise ConfigError(
                "the headers column must be array<struct<key: string, value: binary>>"
            )
        topic = opts.get("topic") or None
        if topic is None and "topic" not in columns:
            raise ConfigError(
                f"writing to {FORMAT_NAME} needs a topic: add a string column 'topic' or "
                "set .option('topic', 'name')"
            )
        windowed = opts.get("windowedkeys", "false").strip().lower()
        if windowed not in ("true", "false"):
            raise ConfigError(f"windowedKeys must be true or false, got {windowed!r}")
        if windowed == "true" and "key" not in columns:
            raise ConfigError("windowedKeys=true needs a key column (key bytes + 8-byte start)")
        windowed_topics = frozenset(
            t.strip() for t in opts.get("windowedtopics", "").split(",") if t.strip()
        )
        if windowed_topics and "key" not in columns:
            raise ConfigError("windowedTopics needs a key column (key bytes + 8-byte start)")
        flush_timeout_s = milliseconds_as_s(opts, "flushTimeoutMs", 120_000)
        return cls(
            bootstrap_servers=bootstrap,
            topic=topic,
            has_key="key" in columns,
            has_topic_column="topic" in columns,
            has_partition_column="partition" in columns,
            has_headers=headers is not None,
            windowed_keys=windowed == "true",
            windowed_topics=windowed_topics,
            flush_timeout_s=flush_timeout_s,
            kafka_config=librdkafka_settings(opts),
        )


def _check_column(
    columns: Mapping[str, DataType],
    name: str,
    allowed: tuple[type[DataType], ...],
    *,
    required: bool,
) -> None:
    kinds = " or ".join(t.__name__.removesuffix("Type").lower() for t in allowed)
    dtype = columns.get(name)
    if dtype is None:
        if required:
            raise ConfigError(
                f"writing to {FORMAT_NAME} needs a column {name!r} of type {kinds}; "
                f"select or alias one (the columns are {sorted(columns)})"
            )
        return
    if not isinstance(dtype, allowed):
        raise ConfigError(
            f"column {name!r} must be {kinds} to be written to Kafka, not "
            f"{dtype.simpleString()}; cast it first"
        )


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """What one write task delivered."""

    records: int


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write: each task produces its rows and returns once all are acknowledged."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return KafkaCommitMessage(records=produce_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Every record is acknowledged before its task returns; Kafka has nothing to commit.
        return None

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Records of the tasks that succeeded stay written; the retried batch writes them
        # again, which tables tolerate (values are full upserts, not deltas).
        return None


class KafkaBatchWriter(DataSourceArrowWriter):
    """Batch write (`df.write.format("sparkiq-kafka")`): same delivery rules as streaming."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return KafkaCommitMessage(records=produce_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        return None


# -- producer cache (one per Python worker process and configuration) ------------------------

_PRODUCERS: dict[tuple[str, tuple[tuple[str, str], ...]], Producer] = {}
_PRODUCERS_LOCK = threading.Lock()


def new_producer(options: SinkOptions) -> Producer:
    """A producer with the sink's settings, for a caller that keeps its own."""
    conf: dict[str, str | int | float | bool] = {"bootstrap.servers": options.bootstrap_servers}
    conf.update(_PRODUCER_CONF)
    conf.update(dict(options.kafka_config))
    return Producer({**conf, **LOG_CONF})


def _producer(options: SinkOptions) -> Producer:
    key = (options.bootstrap_servers, options.kafka_config)
    with _PRODUCERS_LOCK:
        producer = _PRODUCERS.get(key)
        if producer is None:
            producer = new_producer(options)
            _PRODUCERS[key] = producer
        return producer


def _drop_producer(options: SinkOptions, producer: Producer) -> None:
    key = (options.bootstrap_servers, options.kafka_config)
    with _PRODUCERS_LOCK:
        if _PRODUCERS.get(key) is producer:
            del _PRODUCERS[key]


def close_cached_producers(timeout_s: float = 10.0) -> None:
    """Flush and forget the producers this process keeps for reuse (tests, shutdown)."""
    with _PRODUCERS_LOCK:
        producers = list(_PRODUCERS.values())
        _PRODUCERS.clear()
    for producer in producers:
        producer.flush(timeout_s)


def _bytes_column(batch: pa.RecordBatch, name: str) -> list[bytes | None]:
    column = batch.column(name)
    # Strings go out as their UTF-8 bytes; the cast reuses the buffers, it does not copy.
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _headers_column(batch: pa.RecordBatch) -> list[list[tuple[str, str | bytes | None]] | None]:
    rows: list[list[dict[str, Any]] | None] = batch.column("headers").to_pylist()
    return [
        None if row is None else [(h["key"], h["value"]) for h in row if h is not None]
        for row in rows
    ]


def produce_batches(
    options: SinkOptions, batches: Iterable[pa.RecordBatch], producer: Producer | None = None
) -> int:
    """Produce every row of *batches*; return the count once all are acknowledged.

    With *producer* None, through this process's shared producer for *options* (a task's
    Python worker keeps it from one micro-batch to the next). Raises KafkaError if any
    record was not delivered: the task must fail rather than let Spark believe the rows
    were written.
    """
    if producer is None:
        producer = _producer(options)
    failures: list[str] = []
    failed = 0

    # A callback per task, so a failure of a record left over from an earlier (failed) task
    # on this reused producer is never blamed on this one.
    def on_delivery(err: CKafkaError | None, msg: Message) -> None:
        nonlocal failed
        if err is not None:
            failed += 1
            if len(failures) < _MAX_ERRORS_SHOWN:
                failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    count = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        keys: list[bytes | None] = _bytes_column(batch, "key") if options.has_key else [None] * n
        values = _bytes_column(batch, "value")
        topics: list[str | None] = (
            batch.column("topic").to_pylist() if options.has_topic_column else [None] * n
        )
        partitions: list[int | None] = (
            batch.column("partition").to_pylist() if options.has_partition_column else [None] * n
        )
        headers = _headers_column(batch) if options.has_headers else [None] * n
        if options.windowed_keys or options.windowed_topics:
            partitions = _window_partitions(producer, options, topics, keys, partitions)
        # One call per topic where the partitioner places every record (the routes, most
        # changelogs); produce_batch leaves records' own partitions unhonoured when a call
        # mixes them with unplaced ones (confluent-kafka 2.16), so placed ones go one by one.
        one_by_one = options.has_headers or any(p is not None for p in partitions)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for i in range(n):
            topic = topics[i] or options.topic
            if topic is None:
                raise ConfigError(
                    f"row {count + i} has a null topic and no topic option is set; "
                    "fill the topic column or set .option('topic', 'name')"
                )
            partition = partitions[i]
            if one_by_one:
                _produce(
                    producer,
                    topic,
                    keys[i],
                    values[i],
                    -1 if partition is None else partition,  # -1: the partitioner chooses
                    headers[i],
                    on_delivery,
                )
                continue
            by_topic.setdefault(topic, []).append({"key": keys[i], "value": values[i]})
        for topic, messages in by_topic.items():
            _produce_many(producer, topic, messages, on_delivery)
        count += n
        producer.poll(0)
        if failed:
            break  # no point producing more: the task fails below
    _flush(producer, options, count)
    if failed:
        raise KafkaError(
            f"{failed} of {count} records were not delivered to "
            f"{options.bootstrap_servers} ({'; '.join(failures)}); the task fails so Spark "
            "retries it — check the topic exists and the broker is healthy"
        )
    return count


_PARTITION_COUNTS: dict[tuple[str, str], int] = {}


def _partition_count(producer: Producer, options: SinkOptions, topic: str) -> int:
    cache_key = (options.bootstrap_servers, topic)
    count = _PARTITION_COUNTS.get(cache_key)
    if count is None:
        count = count_partitions(producer, topic, options.bootstrap_servers, 30.0)
        _PARTITION_COUNTS[cache_key] = count
    return count


def _window_partitions(
    producer: Producer,
    options: SinkOptions,
    topics: list[str | None],
    keys: list[bytes | None],
    explicit: list[int | None],
) -> list[int | None]:
    """The partition of each windowed record: murmur2 of its key without the 8-byte start
    (every record with ``windowedKeys``, else those to the ``windowedTopics``)."""
    out: list[int | None] = []
    for topic, key, partition in zip(topics, keys, explicit, strict=True):
        name = topic or options.topic or ""
        windowed = options.windowed_keys or name in options.windowed_topics
        if partition is not None or not windowed:
            out.append(partition)
            continue
        if key is None or len(key) < 8:
            raise ConfigError(
                f"records to windowed topic {name!r} need a key of the key bytes followed by an "
                f"8-byte window start; got {key!r}"
            )
        n = _partition_count(producer, options, name)
        out.append(partition_for(key[:-8], n))
    return out


def _produce(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    partition: int,
    headers: list[tuple[str, str | bytes | None]] | None,
    on_delivery: Any,
) -> None:
    while True:
        try:
            if headers:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=on_delivery,
                )
            else:
                producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=on_delivery
                )
            return
        except BufferError:
            # The local queue is full: let deliveries drain it, then try again.
            producer.poll(0.05)
        except KafkaException as exc:
            raise KafkaError(f"cannot produce to topic {topic!r}: {exc}") from exc


def _produce_many(
    producer: Producer, topic: str, messages: list[dict[str, Any]], on_delivery: Any
) -> None:
    """Queue *messages* (key and value each) for *topic*, placed by the partitioner, in one
    call (`Producer.produce_batch`).

    The queue is given room first: a message the batch could not queue would be queued after
    later ones that it did, out of their order in the partition (a changelog's last value
    for a key would not be the last written).
    """
    for start in range(0, len(messages), _BATCH_CALL_MAX):
        chunk = messages[start : start + _BATCH_CALL_MAX]
        while len(producer) + len(chunk) > _QUEUE_MAX:
            producer.poll(0.05)  # deliveries make room
        queued = producer.produce_batch(topic, chunk, on_delivery=on_delivery)
        if queued != len(chunk):
            error = next((m["_error"] for m in chunk if "_error" in m), None)
            raise KafkaError(
                f"cannot produce {len(chunk) - queued} of {len(chunk)} records to topic "
                f"{topic!r}: {error}"
            )


_BATCH_CALL_MAX = 50_000


def _flush(producer: Producer, options: SinkOptions, count: int) -> None:
    deadline = time.monotonic() + options.flush_timeout_s
    remaining = producer.flush(min(1.0, options.flush_timeout_s))
    while remaining > 0 and time.monotonic() < deadline:
        remaining = producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    if remaining > 0:
        # Undelivered records would otherwise be delivered (or fail) during a later task.
        producer.purge()
        producer.flush(0)
        _drop_producer(options, producer)
        raise KafkaError(
            f"{remaining} of {count} records were still undelivered to "
            f"{options.bootstrap_servers} after {options.flush_timeout_s:.0f}s; the task "
            "fails so Spark retries it — check the broker, or raise flushTimeoutMs"
        )
