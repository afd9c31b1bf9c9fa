"""Which queries of a pipeline run in Spark's Real-Time Mode, and why the others do not.

Real-Time Mode (Spark 4.1 and later, ``writeStream.trigger(realTime=...)``) runs a query as
long-running batches: a task per source partition reads each record as it arrives,
transforms it and hands it to the sink at once, so a record is through the query in
milliseconds rather than a micro-batch's second. A batch lasts `REALTIME_BATCH`: that is
how often the query checkpoints its offsets and reports progress (a read with
``after_source`` of a table such a query writes waits for that), not a delay of records.

What it takes, as of Spark 4.2 (`realtime_refusal` checks each before a query starts):

- Spark's own Kafka source and sink (`KafkaConnector.BUILTIN`): sparkiq's Python ones are
  neither a Real-Time source nor sink;
- no ``foreachBatch``, so no finishing step on the driver (``ctx.write(finish=...)``);
- only stateless operators (projections, filters, generators such as ``explode``, unions,
  broadcast stream-static joins, observed metrics): aggregations, deduplication and the
  other stateful operators run in it from Spark 4.3 on (`STATEFUL_SINCE`);
- no cap on the records per micro-batch (``maxOffsetsPerTrigger``): Spark's Kafka source
  refuses one in Real-Time Mode;
- a task slot for every source partition, held as long as the query runs, beside the slots
  the micro-batch queries need (`MICROBATCH_SLOTS`);
- output mode ``update`` (the same rows as ``append`` for a stateless query).

A query that cannot run in it runs in micro-batches, and the pipeline says which and why
once, at start. What Spark itself refuses when the query starts (its
``STREAMING_REAL_TIME_MODE`` errors, `is_realtime_refusal`) is handled the same way by the
pipeline context. Real-Time Mode's Kafka sink is at least once, like the micro-batch one:
a failed query starts again from its last checkpointed offsets and writes some records a
second time, which a changelog of full values (an upsert per key) absorbs.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkiq.core.durations import parse_duration_ms
from sparkiq.core.triggers import TriggerMode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "MICROBATCH_SLOTS",
    "REALTIME_BATCH",
    "REALTIME_EXTRA_SLOTS",
    "STATEFUL_SINCE",
    "KafkaRead",
    "PlanFacts",
    "TriggerMode",
    "is_realtime_refusal",
    "parse_trigger",
    "plan_facts",
    "realtime_refusal",
    "spark_has_realtime_mode",
]


# A Real-Time batch's duration: Spark's smallest by default
# (spark.sql.streaming.realTimeMode.minBatchDuration). Offsets are checkpointed and progress
# reported once per batch; between two batches Spark starts the tasks anew (tens of ms).
REALTIME_BATCH = "5 seconds"
# The first Spark release whose Real-Time Mode runs stateful operators.
STATEFUL_SINCE = (4, 3)
# Task slots a Real-Time query may not take: left for the pipeline's micro-batch queries.
MICROBATCH_SLOTS = 2
# Task slots a local run in Real-Time Mode gets beyond its usual ones (two per core): room
# for Real-Time queries reading up to this many source partitions in all.
REALTIME_EXTRA_SLOTS = 8

# Logical plan nodes that keep state between records (Spark's names).
STATEFUL_NODES = frozenset(
    {
        "Aggregate",
        "Deduplicate",
        "DeduplicateWithinWatermark",
        "FlatMapGroupsWithState",
        "FlatMapGroupsInPandasWithState",
        "TransformWithState",
        "TransformWithStateInPySpark",
    }
)
_STREAMING_SOURCE_NODES = frozenset({"StreamingRelationV2", "StreamingRelation"})
_KAFKA_SOURCE = "kafka"


def parse_trigger(text: str) -> tuple[TriggerMode, str | None]:
    """``sparkiq run --trigger``: ``realtime``, ``microbatch`` (micro-batches every second) or
    a micro-batch interval such as ``"1 second"`` (``"0 seconds"``: back to back).

    Returns the mode and the micro-batch interval (None: back to back); with ``realtime`` the
    interval is the one queries that cannot run in Real-Time Mode use.
    """
    word = text.strip().lower().replace("-", "")
    if word in (TriggerMode.REALTIME.value, "realtimemode"):
        return TriggerMode.REALTIME, "1 second"
    if word == TriggerMode.MICROBATCH.value:
        return TriggerMode.MICROBATCH, "1 second"
    if word in ("", "0", "0 seconds", "0 second", "0s", "0 ms"):
        return TriggerMode.MICROBATCH, None
    parse_duration_ms(text)  # a ConfigError naming the text when it is no duration
    return TriggerMode.MICROBATCH, text.strip()


def spark_has_realtime_mode() -> bool:
    """Whether the installed PySpark can start a query in Real-Time Mode (4.1 and later)."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    return "realTime" in inspect.signature(DataStreamWriter.trigger).parameters


def _version(text: str) -> tuple[int, int]:
    parts = [*text.split("."), "0", "0"][:2]
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


@dataclass(frozen=True)
class KafkaRead:
    """A Kafka source in a query's plan: its subscribed topics and whether it has a cap."""

    topics: tuple[str, ...]
    capped: bool


@dataclass(frozen=True)
class PlanFacts:
    """What decides whether a query can run in Real-Time Mode, read from its plan."""

    stateful: tuple[str, ...] = ()  # stateful operators, by Spark's name, in plan order
    kafka_reads: tuple[KafkaRead, ...] = ()  # Spark's Kafka sources
    other_sources: tuple[str, ...] = ()  # streaming sources that are not Spark's Kafka

    @property
    def topics(self) -> tuple[str, ...]:
        """Every topic the query's Kafka sources subscribe to, once each."""
        return tuple(dict.fromkeys(t for read in self.kafka_reads for t in read.topics))


def _children(node: Any) -> Iterator[Any]:
    children = node.children()
    for i in range(children.size()):
        yield children.apply(i)


def plan_facts(df: DataFrame) -> PlanFacts:
    """`PlanFacts` of the streaming DataFrame *df*, from its analyzed plan in the JVM (a few
    py4j calls per plan node, once per query start). Analysis plans sparkiq's Python source
    in a Python worker: ask this of queries on Spark's Kafka connector only."""
    stateful: list[str] = []
    reads: list[KafkaRead] = []
    others: list[str] = []
    pending = [df._jdf.queryExecution().analyzed()]
    while pending:
        node = pending.pop()
        name = str(node.nodeName())
        if name in STATEFUL_NODES:
            stateful.append(name)
        if name in _STREAMING_SOURCE_NODES:
            source = str(node.sourceName())
            if source == _KAFKA_SOURCE and name == "StreamingRelationV2":
                options = node.extraOptions()
                subscribed = str(options.get("subscribe") or "")
                topics = tuple(t.strip() for t in subscribed.split(",") if t.strip())
                capped = options.get("maxOffsetsPerTrigger") is not None
                reads.append(KafkaRead(topics, capped))
            else:
                others.append(source)
        pending.extend(reversed(list(_children(node))))
    return PlanFacts(tuple(stateful), tuple(reads), tuple(others))


def realtime_refusal(
    facts: PlanFacts,
    *,
    spark_version: str,
    has_realtime_api: bool,
    builtin_connector: bool,
    finishes_on_driver: bool,
    source_partitions: int,
    total_slots: int,
    held_slots: int = 0,
) -> str | None:
    """Why a query cannot run in Real-Time Mode (None: it can), in words for its start-up
    message. *source_partitions* is how many partitions its sources have in all (a task
    slot each, for as long as it runs); *total_slots* how many task slots Spark has
    (``defaultParallelism``) and *held_slots* how many of them Real-Time queries hold."""
    if not has_realtime_api:
        return f"Spark {spark_version} has no Real-Time Mode (it came with Spark 4.1)"
    if not builtin_connector:
        return (
            "it reads or writes Kafka through sparkiq's Python connector, which is no "
            "Real-Time source or sink (Spark's is: --kafka-connector builtin)"
        )
    if finishes_on_driver:
        return (
            "its finishing step runs on the driver once per micro-batch (foreachBatch), "
            "which Real-Time Mode does not run"
        )
    if facts.stateful and _version(spark_version) < STATEFUL_SINCE:
        names = ", ".join(dict.fromkeys(facts.stateful))
        since = ".".join(map(str, STATEFUL_SINCE))
        return (
            f"it keeps state ({names}), which Spark's Real-Time Mode runs from Spark {since} "
            f"on (this is Spark {spark_version})"
        )
    if facts.other_sources:
        names = ", ".join(dict.fromkeys(facts.other_sources))
        return f"it reads {names}, which is no Real-Time source (Spark's Kafka source is)"
    if any(read.capped for read in facts.kafka_reads):
        return (
            "its source reads at most max_offsets_per_trigger records per micro-batch, a cap "
            "Spark's Kafka source refuses in Real-Time Mode"
        )
    if source_partitions > total_slots - held_slots - MICROBATCH_SLOTS:
        wanted = held_slots + source_partitions + MICROBATCH_SLOTS
        return (
            f"it needs {source_partitions} task slots at once (one per source partition) and "
            f"Spark has {total_slots} ({held_slots} held by Real-Time queries, "
            f"{MICROBATCH_SLOTS} kept for micro-batches); give it {wanted} or more, e.g. "
            f"--master local[{wanted}]"
        )
    return None


def is_realtime_refusal(error: str) -> bool:
    """Whether a query's failure (its exception's text) is Spark refusing to run it in
    Real-Time Mode, as opposed to a failure while it ran."""
    lowered = error.lower()
    return "streaming_real_time_mode" in lowered or "real time mode" in lowered
