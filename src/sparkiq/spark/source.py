"""Reads Kafka topics into Spark Structured Streaming (the read side of `sparkiq-kafka`).

Offsets are JSON ``{topic: {"partition": next_offset}}``, the same shape as Spark's own Kafka
source; Spark keeps them in the query's checkpoint, so a restarted query resumes exactly where
it stopped. The planning side (`KafkaStreamReader` on the driver) asks for the *true* end of
every partition (`sparkiq.kafka.offsets.true_end_offsets`): the dev broker under-reports the
high watermark, and a source that trusted it would leave the tail of a finished input unread.

Each micro-batch reads, per Kafka partition with new records, the offset range
``[start, end)``. A range of at least ``minRecordsPerTask`` records (10,000) is a Spark task
of its own; smaller ranges are read one after another by a shared task, so a micro-batch of a
few records per partition is one task, not one per partition (every task costs a round trip
to a Python worker, tens to hundreds of milliseconds on a busy small machine). Tasks return
Arrow record batches (not Python tuples, which Spark would convert row by row) and borrow
their consumer from a per-process pool, so a reused Python worker keeps its broker
connections from one micro-batch to the next.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka import KafkaError as CKafkaError
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
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

from sparkiq.core.errors import ConfigError, KafkaError, TopicNotFoundError
from sparkiq.kafka.consumers import TUNED_READ_CONF
from sparkiq.kafka.offsets import true_end_offsets, watermarks
from sparkiq.spark.options import (
    FORMAT_NAME,
    bootstrap_servers,
    librdkafka_settings,
    lower_keys,
    milliseconds_as_s,
    positive_int,
)

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
        StructField("headers", ArrayType(HEADER_TYPE, True), True),
    ]
)

# Spark compares the Arrow schema of returned batches with this one, field names and
# nullability included, so it is derived from SCHEMA by Spark's own conversion.
ARROW_SCHEMA: pa.Schema = to_arrow_schema(SCHEMA, timezone="UTC")

Offsets = dict[str, dict[str, int]]
"""topic -> partition number (as a string, JSON keys are strings) -> next offset to read."""

TP = tuple[str, int]

_EARLIEST = -2  # the markers Spark's Kafka source accepts in startingOffsets JSON
_LATEST = -1

_ARROW_ROWS_PER_BATCH = 50_000
DEFAULT_MIN_RECORDS_PER_TASK = 10_000


@dataclass(frozen=True)
class SourceOptions:
    """The read options of `sparkiq-kafka`, validated."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: str = "latest"
    max_offsets_per_trigger: int | None = None
    poll_timeout_s: float = 60.0
    min_records_per_task: int = DEFAULT_MIN_RECORDS_PER_TASK
    # Options named `kafka.<setting>` are passed to librdkafka as `<setting>` (as in Spark);
    # out of the repr, since they may hold passwords.
    kafka_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = lower_keys(options)
        bootstrap = bootstrap_servers(opts, FORMAT_NAME)
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        if not topics:
            raise ConfigError(
                f"{FORMAT_NAME} needs the option subscribe: a comma-separated list of topics"
            )
        starting = opts.get("startingoffsets", "latest").strip()
        if starting not in ("earliest", "latest"):
            _parse_offsets_json(starting)  # fail at query start, not at the first batch
        max_per_trigger: int | None = None
        if "maxoffsetspertrigger" in opts:
            max_per_trigger = positive_int(opts, "maxOffsetsPerTrigger", 0)
        poll_timeout_s = milliseconds_as_s(opts, "pollTimeoutMs", 60_000)
        min_records_per_task = positive_int(
            opts,
            "minRecordsPerTask",
            DEFAULT_MIN_RECORDS_PER_TASK,
            " (1 = a task per Kafka partition)",
        )
        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            starting_offsets=starting,
            max_offsets_per_trigger=max_per_trigger,
            poll_timeout_s=poll_timeout_s,
            min_records_per_task=min_records_per_task,
            kafka_config=librdkafka_settings(opts),
        )


def _parse_offsets_json(text: str) -> dict[str, dict[int, int]]:
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            "startingOffsets must be 'earliest', 'latest' or JSON such as "
            f'{{"topic": {{"0": 23, "1": -2}}}}; got {text!r}'
        ) from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"startingOffsets JSON must be an object of topics, got {text!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise ConfigError(
                f"startingOffsets for topic {topic!r} must be an object of partition: offset"
            )
        try:
            out[topic] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"startingOffsets for topic {topic!r} must map partition numbers to offsets "
                "(-2 = earliest, -1 = latest)"
            ) from exc
    return out


def _to_offsets(positions: Mapping[TP, int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def _from_offsets(offsets: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def cap_offsets(begin: Mapping[TP, int], end: Mapping[TP, int], max_rows: int) -> dict[TP, int]:
    """End offsets that advance at most *max_rows* past *begin* in total.

    The allowance is shared in proportion to each partition's backlog (as Spark's Kafka source
    does), and the rounding remainder goes to the largest backlogs, so a batch holds exactly
    `min(max_rows, backlog)` offsets and every call makes progress when there is a backlog.
    """
    backlog = {tp: end[tp] - begin.get(tp, 0) for tp in end if end[tp] > begin.get(tp, 0)}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    shares = {tp: b * max_rows // total for tp, b in backlog.items()}
    rest = max_rows - sum(shares.values())
    by_unserved = sorted(backlog, key=lambda tp: (shares[tp] - backlog[tp], tp))
    for tp in by_unserved[:rest]:
        shares[tp] += 1
    return {
        tp: begin.get(tp, 0) + shares[tp] if tp in backlog else stop for tp, stop in end.items()
    }


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


class KafkaInputPartition(InputPartition):
    """The offset ranges one Spark task reads in one micro-batch, in order."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


def group_ranges(ranges: Sequence[OffsetRange], min_records: int) -> list[list[OffsetRange]]:
    """*ranges* as tasks: a range of *min_records* or more alone, smaller ones together.

    Small ranges are gathered in the given order until a group holds *min_records*; the
    last group may hold fewer. The result covers every range exactly once.
    """
    tasks: list[list[OffsetRange]] = []
    group: list[OffsetRange] = []
    held = 0
    for r in ranges:
        if r.count >= min_records:
            tasks.append([r])
            continue
        group.append(r)
        held += r.count
        if held >= min_records:
            tasks.append(group)
            group, held = [], 0
    if group:
        tasks.append(group)
    return tasks


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over Kafka offsets on the driver; reads them in the tasks."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._probe: Consumer | None = None
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow: end fixed at start
        self._last_ends: dict[TP, int] | None = None
        self._last_marks: dict[TP, tuple[int, int]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The reader travels to the tasks inside the read function; its driver-side consumer
        # does not (and cannot) travel with it.
        state = dict(self.__dict__)
        state["_probe"] = None
        return state

    # -- driver side -------------------------------------------------------------------

    def _consumer(self) -> Consumer:
        if self._probe is None:
            conf: dict[str, str | int | float | bool] = {
                "bootstrap.servers": self.options.bootstrap_servers,
                "group.id": f"sparkiq-source-plan-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
                "auto.offset.reset": "latest",
            }
            conf.update(dict(self.options.kafka_config))
            self._probe = Consumer(conf)
        return self._probe

    def _partitions_now(self) -> list[TP]:
        """Every partition of the subscribed topics, as the cluster has them now."""
        consumer = self._consumer()
        out: list[TP] = []
        for topic in self.options.topics:
            try:
                md = consumer.list_topics(topic=topic, timeout=10.0)
            except KafkaException as exc:
                raise KafkaError(
                    f"cannot read metadata of topic {topic!r} from "
                    f"{self.options.bootstrap_servers}: {exc}; is the broker up?"
                ) from exc
            info = md.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                raise TopicNotFoundError(
                    f"topic {topic!r} does not exist on {self.options.bootstrap_servers}; "
                    "create it before starting the query, or fix the subscribe option"
                )
            out.extend((topic, p) for p in sorted(info.partitions))
        return out

    def _true_ends(self, tps: Sequence[TP]) -> dict[TP, int]:
        consumer = self._consumer()
        marks = watermarks(consumer, tps)
        last = self._last_ends
        if last is not None and marks == self._last_marks and all(tp in last for tp in tps):
            # The reported watermark moves whenever a record batch is appended, so while it
            # stands still the true end does too: skip the tail read (~0.2 s per call).
            return {tp: last[tp] for tp in tps}
        ends = true_end_offsets(self.options.bootstrap_servers, tps, consumer=consumer)
        self._last_marks = marks
        self._last_ends = ends
        return ends

    def _earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        consumer = self._consumer()
        out: dict[TP, int] = {}
        for topic, partition in tps:
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10.0
            )
            out[(topic, partition)] = int(low)
        return out

    def initialOffset(self) -> dict[str, Any]:
        tps = self._partitions_now()
        starting = self.options.starting_offsets
        if starting == "earliest":
            return _to_offsets(self._earliest(tps))
        if starting == "latest":
            return _to_offsets(self._true_ends(tps))
        wanted = _parse_offsets_json(starting)
        missing_topics = set(self.options.topics) - set(wanted)
        extra_topics = set(wanted) - set(self.options.topics)
        if missing_topics or extra_topics:
            raise ConfigError(
                f"startingOffsets must name exactly the subscribed topics "
                f"{sorted(self.options.topics)}; it names {sorted(wanted)}"
            )
        have = set(tps)
        named = {(t, p) for t, parts in wanted.items() for p in parts}
        if named != have:
            raise ConfigError(
                "startingOffsets must give an offset for every partition of the subscribed "
                f"topics (use -2 for earliest, -1 for latest); missing "
                f"{sorted(have - named)}, unknown {sorted(named - have)}"
            )
        earliest = self._earliest(tps)
        latest = self._true_ends(tps)
        resolved: dict[TP, int] = {}
        for tp in tps:
            offset = wanted[tp[0]][tp[1]]
            resolved[tp] = (
                earliest[tp] if offset == _EARLIEST else latest[tp] if offset == _LATEST else offset
            )
        return _to_offsets(resolved)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._true_ends(self._partitions_now())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = _from_offsets(start)
        if self._target is not None:
            # Trigger.AvailableNow: what existed when the query started, and nothing after.
            ends = dict(self._target)
            current = self._true_ends(list(ends))
            ends = {tp: min(e, current[tp]) for tp, e in ends.items()}
        else:
            # New partitions are absent from `begin` and start at 0.
            ends = self._true_ends(self._partitions_now())
        # Never step back: a partition whose end reads lower than its position (a probe that
        # timed out, a truncated topic) stays where it is.
        ends = {tp: max(e, begin.get(tp, 0)) for tp, e in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = cap_offsets(begin, ends, limit.max_rows)
        for tp, offset in begin.items():
            ends.setdefault(tp, offset)  # partitions that vanished keep their position
        return _to_offsets(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return _to_offsets(self._last_ends) if self._last_ends is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = _from_offsets(start)
        ranges = [
            OffsetRange(topic, partition, begin.get((topic, partition), 0), stop)
            for (topic, partition), stop in sorted(_from_offsets(end).items())
            if stop > begin.get((topic, partition), 0)
        ]
        return [
            KafkaInputPartition(group)
            for group in group_ranges(ranges, self.options.min_records_per_task)
        ]

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to commit: the position lives in Spark's checkpoint, not in Kafka.
        return None

    def stop(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()

    # -- task side ---------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):
            raise KafkaError(f"{FORMAT_NAME} cannot read partition {partition!r}")
        for offsets in partition.ranges:
            yield from read_range(self.options, offsets)


# -- consumer pool (one per Python worker process) -------------------------------------------

PoolKey = tuple[str, tuple[tuple[str, str], ...]]

# How long a task's consumer lets the broker wait per fetch (fetch.wait.max.ms), shortest
# first. A task reads a range that is already in the log, so it never waits for new records
# and the shortest wait is the fastest: with the tail reader's 100 ms, reading three ranges of
# a few records took ~210 ms on the dev broker; with 1 ms, ~7 ms (the fetch in flight at the
# end of a range delays the next range's first fetch by up to the wait). But the dev broker
# (Tansu 0.6, memory storage) spends the fetch's wait listing the partition's record batches
# from the first one and answers with no records when the wait runs out before it reaches the
# fetch offset, though the records are there (tests/unit/spark/test_source.py): with 1 ms a
# partition of a few thousand small batches (a few minutes of the demo) is never read again,
# with 10 ms one of ~30,000. A consumer that gets nothing for ESCALATE_AFTER_S while its range
# is unread is replaced by one with the next wait, and the process keeps that wait from then on.
FETCH_WAITS_MS = (1, 20, 200, 1000)
ESCALATE_AFTER_S = 1.0

_POOL: dict[tuple[PoolKey, int], list[Consumer]] = {}
_WAIT_LEVEL: dict[PoolKey, int] = {}  # index into FETCH_WAITS_MS; only rises
_POOL_LOCK = threading.Lock()


def _pool_key(options: SourceOptions) -> PoolKey:
    return (options.bootstrap_servers, options.kafka_config)


def _fetch_wait_ms(options: SourceOptions) -> int:
    with _POOL_LOCK:
        return FETCH_WAITS_MS[_WAIT_LEVEL.get(_pool_key(options), 0)]


def _raise_fetch_wait(options: SourceOptions, beyond_ms: int) -> None:
    """Use a longer fetch wait than *beyond_ms* from now on (no-op if already longer)."""
    with _POOL_LOCK:
        key = _pool_key(options)
        level = _WAIT_LEVEL.get(key, 0)
        if FETCH_WAITS_MS[level] <= beyond_ms and level + 1 < len(FETCH_WAITS_MS):
            _WAIT_LEVEL[key] = level + 1


def _borrow(options: SourceOptions, wait_ms: int) -> Consumer:
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
    return Consumer(conf)


def _give_back(options: SourceOptions, wait_ms: int, consumer: Consumer) -> None:
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


def read_range(options: SourceOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
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
    consumer: Consumer, options: SourceOptions, part: OffsetRange, may_escalate: bool
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
    options: SourceOptions,
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
