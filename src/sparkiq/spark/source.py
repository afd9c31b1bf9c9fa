"""Reads Kafka topics into Spark Structured Streaming (the read side of `sparkiq-kafka`).

Offsets are JSON ``{topic: {"partition": next_offset}}``, the same shape as Spark's own Kafka
source; Spark keeps them in the query's checkpoint, so a restarted query resumes exactly where
it stopped. The planning side (`KafkaStreamReader` on the driver) asks for the *true* end of
every partition (`sparkiq.kafka.offsets.ends_from`): on Apache Kafka one ListOffsets. The dev
broker under-reports the high watermark in ListOffsets, and a source that trusted it would
leave the tail of a finished input unread; there, after its first micro-batch, the reader
asks with one fetch per partition from the end it found last (`ends_after`), no ListOffsets:
on the dev broker each ListOffsets and each fetch below the end lists every record batch of
the partition, and this is asked every trigger.

Each micro-batch reads, per Kafka partition with new records, the offset range
``[start, end)``. A range of at least ``minRecordsPerTask`` records (10,000) is a Spark task
of its own; smaller ranges are read one after another by a shared task, so a micro-batch of a
few records per partition is one task, not one per partition (every task costs a round trip
to a Python worker, tens to hundreds of milliseconds on a busy small machine). The tasks
read their ranges with `sparkiq.spark.rangeread` (Arrow record batches, pooled consumers).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from sparkiq.core.errors import ConfigError, KafkaError, TopicNotFoundError
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.offsets import FOLLOWING_FETCH_BYTES, ends_from, watermarks
from sparkiq.kafka.security import KafkaSecurity, is_security_setting
from sparkiq.spark.options import (
    FORMAT_NAME,
    bootstrap_servers,
    librdkafka_settings,
    lower_keys,
    milliseconds_as_s,
    positive_int,
)
from sparkiq.spark.rangeread import OffsetRange, read_range

Offsets = dict[str, dict[str, int]]
"""topic -> partition number (as a string, JSON keys are strings) -> next offset to read."""

TP = tuple[str, int]

_EARLIEST = -2  # the markers Spark's Kafka source accepts in startingOffsets JSON
_LATEST = -1

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
                # A probe needs a fetch response's watermark, not its records: a backlog
                # costs it a few batches per partition, not megabytes.
                "max.partition.fetch.bytes": FOLLOWING_FETCH_BYTES,
            }
            conf.update(dict(self.options.kafka_config))
            self._probe = Consumer({**conf, **LOG_CONF})
        return self._probe

    def _security(self) -> KafkaSecurity:
        """The security settings among the `kafka.*` options."""
        return KafkaSecurity.from_mapping(
            {k: v for k, v in self.options.kafka_config if is_security_setting(k)}
        )

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
        last = self._last_ends or {}
        # From the ends found for the last micro-batch, one fetch each tells the end now
        # (`ends_after`); a partition new to this reader, or one that does not answer, has
        # its end read from the watermarks and its last batch (`true_end_offsets`).
        ends = ends_from(
            consumer, self.options.bootstrap_servers, tps, last, security=self._security()
        )
        self._last_ends = ends
        return ends

    def _earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        marks = watermarks(self._consumer(), tps, timeout_s=10.0)
        return {tp: int(low) for tp, (low, _high) in marks.items()}

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
