"""The `sparkiq-kafka` streaming source against Apache Kafka and Spark in local mode."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from sparkiq.core.errors import ConfigError
from sparkiq.kafka.admin import create_topic, partition_count
from sparkiq.spark.connector import KAFKA_COLUMNS
from sparkiq.spark.rangeread import OffsetRange
from sparkiq.spark.source import KafkaStreamReader, SourceOptions, cap_offsets, group_ranges

pytest_plugins = ["tests.support.spark"]

Record = tuple[bytes | None, bytes | None, str, int, int, tuple[tuple[str, bytes], ...] | None]


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})


def _produce_batches(
    producer: Producer, topic: str, partition: int, batches: int, size: int, tag: str
) -> None:
    """*batches* flushed record batches of *size* records each on one partition."""
    for b in range(batches):
        for i in range(size):
            producer.produce(
                topic,
                key=f"{tag}-{b}-{i}".encode(),
                value=f"v{b}.{i}".encode(),
                partition=partition,
            )
        producer.flush()


def _run_available_now(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path, **options: str
) -> tuple[list[Any], Any]:
    """Run one Trigger.AvailableNow query; the rows it saw and the query.

    foreachBatch rather than the memory sink: the memory sink refuses to restart from a
    checkpoint, which is what some tests are about.
    """
    collected: list[Any] = []
    reader = (
        spark.readStream.format("sparkiq-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda df, _batch_id: collected.extend(df.collect()))
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    assert query.awaitTermination(180), "the AvailableNow query did not finish"
    return collected, query


def _by_position(record: Record) -> tuple[int, int]:
    return record[3], record[4]


def _as_records(rows: list[Any]) -> list[Record]:
    return sorted(
        (
            (
                None if r.key is None else bytes(r.key),
                None if r.value is None else bytes(r.value),
                r.topic,
                r.partition,
                r.offset,
                None if r.headers is None else tuple((h.key, bytes(h.value)) for h in r.headers),
            )
            for r in rows
        ),
        key=_by_position,
    )


@pytest.mark.spark
def test_reads_every_record_including_the_unreported_tail(
    spark: Any, any_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bootstrap = any_bootstrap
    topic = unique_name("src-all")
    create_topic(bootstrap, topic, 3)
    producer = _producer(bootstrap)
    # Partition 1: three flushed batches, so the dev broker reports an end of 21, not 30.
    _produce_batches(producer, topic, 1, batches=3, size=10, tag="p1")
    producer.produce(topic, key=b"h", value=b"with-headers", partition=0, headers=[("a", b"1")])
    producer.produce(topic, key=b"dead", value=None, partition=0)
    producer.produce(topic, key=None, value=b"no-key", partition=0)
    producer.flush()
    started_ms = time.time() * 1000 - 60_000

    rows, query = _run_available_now(
        spark, bootstrap, topic, tmp_path / "cp", startingOffsets="earliest"
    )

    expected: list[Record] = [
        (f"p1-{b}-{i}".encode(), f"v{b}.{i}".encode(), topic, 1, b * 10 + i, None)
        for b in range(3)
        for i in range(10)
    ]
    expected += [
        (b"h", b"with-headers", topic, 0, 0, (("a", b"1"),)),
        (b"dead", None, topic, 0, 1, None),
        (None, b"no-key", topic, 0, 2, None),
    ]
    assert _as_records(rows) == sorted(expected, key=_by_position)
    assert all(
        r.timestamp is not None and r.timestamp.timestamp() * 1000 > started_ms for r in rows
    )
    # Kafka's numbering, as Spark's Kafka source gives it: 0 = the producer's create time.
    assert {r.timestampType for r in rows} == {0}
    assert sum(p["numInputRows"] for p in query.recentProgress) == 33


@pytest.mark.spark
def test_restart_from_checkpoint_reads_only_new_records(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_name("src-restart")
    create_topic(bootstrap, topic, 2)
    producer = _producer(bootstrap)
    checkpoint = tmp_path / "cp"
    _produce_batches(producer, topic, 0, batches=2, size=7, tag="a0")
    _produce_batches(producer, topic, 1, batches=1, size=5, tag="a1")

    first, _ = _run_available_now(spark, bootstrap, topic, checkpoint, startingOffsets="earliest")
    _produce_batches(producer, topic, 0, batches=2, size=4, tag="b0")
    _produce_batches(producer, topic, 1, batches=1, size=3, tag="b1")
    second, _ = _run_available_now(spark, bootstrap, topic, checkpoint, startingOffsets="earliest")
    third, _ = _run_available_now(spark, bootstrap, topic, checkpoint, startingOffsets="earliest")

    assert len(first) == 19
    assert sorted((r.partition, r.offset) for r in second) == [(0, o) for o in range(14, 22)] + [
        (1, o) for o in range(5, 8)
    ]
    assert all(bytes(r.key).startswith(b"b") for r in second)
    assert third == []


@pytest.mark.spark
def test_running_query_reads_each_tail_as_it_arrives(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_name("src-live")
    create_topic(bootstrap, topic, 2)
    name = f"live_{uuid.uuid4().hex[:10]}"
    query = (
        spark.readStream.format("sparkiq-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        producer = _producer(bootstrap)
        _produce_batches(producer, topic, 0, batches=3, size=10, tag="x")
        query.processAllAvailable()
        after_first = spark.table(name).count()
        _produce_batches(producer, topic, 1, batches=2, size=5, tag="y")
        query.processAllAvailable()
        offsets = sorted((r.partition, r.offset) for r in spark.table(name).collect())
    finally:
        query.stop()
        spark.catalog.dropTempView(name)

    assert after_first == 30
    assert offsets == [(0, o) for o in range(30)] + [(1, o) for o in range(10)]


@pytest.mark.spark
def test_max_offsets_per_trigger_caps_each_batch(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_name("src-cap")
    create_topic(bootstrap, topic, 2)
    producer = _producer(bootstrap)
    _produce_batches(producer, topic, 0, batches=2, size=35, tag="a")
    _produce_batches(producer, topic, 1, batches=1, size=30, tag="b")

    rows, query = _run_available_now(
        spark,
        bootstrap,
        topic,
        tmp_path / "cp",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="30",
    )

    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [30, 30, 30, 10]
    assert len({(r.partition, r.offset) for r in rows}) == 100


@pytest.mark.spark
def test_starting_offsets_json_per_partition(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_name("src-json")
    create_topic(bootstrap, topic, 3)
    producer = _producer(bootstrap)
    for partition in range(3):
        _produce_batches(producer, topic, partition, batches=2, size=5, tag=f"p{partition}")

    rows, _ = _run_available_now(
        spark,
        bootstrap,
        topic,
        tmp_path / "cp",
        startingOffsets=f'{{"{topic}": {{"0": 7, "1": -2, "2": -1}}}}',
    )

    assert sorted((r.partition, r.offset) for r in rows) == [(0, 7), (0, 8), (0, 9)] + [
        (1, o) for o in range(10)
    ]


@pytest.mark.spark
def test_missing_topic_fails_the_query_naming_the_topic(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_name("src-missing")
    with pytest.raises(StreamingQueryException) as failure:
        _run_available_now(spark, bootstrap, topic, tmp_path / "cp")
    assert "TopicNotFoundError" in str(failure.value)
    assert f"topic '{topic}' does not exist" in str(failure.value)


# -- planning on the driver, without Spark ------------------------------------------------


def test_partitions_missing_from_the_checkpoint_start_at_zero(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    # A checkpoint written while the topic had one partition; then the topic grows to three
    # (Apache Kafka adds partitions; the dev broker cannot).
    topic = unique_name("src-grow")
    create_topic(bootstrap, topic, 1)
    producer = _producer(bootstrap)
    _produce_batches(producer, topic, 0, batches=2, size=3, tag="g")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(10)
    deadline = time.monotonic() + 10
    while partition_count(bootstrap, topic) < 3:
        assert time.monotonic() < deadline, "the new partitions never showed"
        time.sleep(0.1)
    producer = _producer(bootstrap)  # one that knows the new partitions from the start
    for partition in (1, 2):
        _produce_batches(producer, topic, partition, batches=2, size=3, tag="g")
    reader = KafkaStreamReader(
        SourceOptions.parse({"bootstrap.servers": bootstrap, "subscribe": topic})
    )
    try:
        start = {topic: {"0": 4}}
        end = reader.latestOffset(start, ReadAllAvailable())
        tasks = reader.partitions(start, end)
        planned = [(r.partition, r.start, r.end) for t in tasks for r in t.ranges]  # type: ignore[attr-defined]
        capped = reader.latestOffset(start, ReadMaxRows(5))
    finally:
        reader.stop()

    assert end == {topic: {"0": 6, "1": 6, "2": 6}}
    assert planned == [(0, 4, 6), (1, 0, 6), (2, 0, 6)]
    assert len(tasks) == 1  # three small ranges, one task
    assert sum(capped[topic].values()) - 4 == 5


def test_small_ranges_share_a_task_and_large_ones_get_their_own() -> None:
    ranges = [
        OffsetRange("t", 0, 0, 5),
        OffsetRange("t", 1, 10, 40),  # 30 records: large enough alone
        OffsetRange("t", 2, 0, 3),
        OffsetRange("t", 3, 7, 9),
        OffsetRange("u", 0, 0, 4),
    ]
    tasks = group_ranges(ranges, 10)
    assert [[(r.topic, r.partition) for r in task] for task in tasks] == [
        [("t", 1)],
        [("t", 0), ("t", 2), ("t", 3)],  # 5 + 3 + 2 = 10
        [("u", 0)],
    ]
    # One task per Kafka partition, as without grouping.
    assert [len(task) for task in group_ranges(ranges, 1)] == [1] * 5
    assert group_ranges([], 10) == []


def test_the_records_per_task_option_must_be_a_positive_number() -> None:
    base = {"bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    assert SourceOptions.parse(base).min_records_per_task == 10_000
    assert SourceOptions.parse({**base, "minRecordsPerTask": "1"}).min_records_per_task == 1
    for bad in ("0", "-3", "many"):
        with pytest.raises(ConfigError, match="minRecordsPerTask"):
            SourceOptions.parse({**base, "minRecordsPerTask": bad})


def test_latest_start_and_json_must_name_every_partition(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("src-start")
    create_topic(bootstrap, topic, 2)
    _produce_batches(_producer(bootstrap), topic, 1, batches=3, size=4, tag="s")

    def initial(starting: str) -> dict[str, Any]:
        options = {"bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": starting}
        reader = KafkaStreamReader(SourceOptions.parse(options))
        try:
            return reader.initialOffset()
        finally:
            reader.stop()

    assert initial("latest") == {topic: {"0": 0, "1": 12}}
    assert initial("earliest") == {topic: {"0": 0, "1": 0}}
    with pytest.raises(ConfigError, match="every partition"):
        initial(f'{{"{topic}": {{"0": 0}}}}')


def test_latest_offsets_follow_each_partitions_tail_as_it_moves(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    # After its first micro-batch the planner asks each partition for its end with one
    # fetch from the end it found before: a partition that moved gives its new end, the
    # unreported tail of its last batch included, and the others keep theirs.
    topic = unique_name("src-latest")
    create_topic(bootstrap, topic, 3)
    producer = _producer(bootstrap)
    _produce_batches(producer, topic, 0, batches=2, size=6, tag="a")
    _produce_batches(producer, topic, 2, batches=1, size=9, tag="b")
    options = {"bootstrap.servers": bootstrap, "subscribe": topic}
    reader = KafkaStreamReader(SourceOptions.parse(options))
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 12, "1": 0, "2": 9}}
        _produce_batches(producer, topic, 1, batches=2, size=5, tag="c")
        moved_one = reader.latestOffset(start, ReadAllAvailable())
        _produce_batches(producer, topic, 2, batches=1, size=3, tag="d")
        moved_other = reader.latestOffset(moved_one, ReadAllAvailable())
        unmoved = reader.latestOffset(moved_other, ReadAllAvailable())
    finally:
        reader.stop()

    assert moved_one == {topic: {"0": 12, "1": 10, "2": 9}}
    assert moved_other == unmoved == {topic: {"0": 12, "1": 10, "2": 12}}


def test_cap_offsets_shares_the_allowance_by_backlog() -> None:
    begin = {("t", 0): 0, ("t", 1): 10}
    end = {("t", 0): 90, ("t", 1): 20, ("t", 2): 5}  # backlogs 90, 10, 5 (partition 2 is new)

    capped = cap_offsets(begin, end, 21)

    advanced = {tp: capped[tp] - begin.get(tp, 0) for tp in end}
    assert sum(advanced.values()) == 21
    assert advanced[("t", 0)] == 18
    assert all(0 <= capped[tp] <= end[tp] for tp in end)
    assert cap_offsets(begin, end, 1000) == end
    # A tiny allowance still moves the query forward.
    assert sum(cap_offsets(begin, end, 1)[tp] - begin.get(tp, 0) for tp in end) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "bootstrap.servers"),
        ({"bootstrap.servers": "x:1"}, "subscribe"),
        ({"bootstrap.servers": "x:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "positive"),
        ({"bootstrap.servers": "x:1", "subscribe": "t", "startingOffsets": "{oops"}, "JSON"),
    ],
)
def test_bad_options_say_what_to_fix(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SourceOptions.parse(options)


@pytest.mark.spark
def test_session_is_loopback_only_with_the_format_registered(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"
    # The format resolves (a missing one fails in load() with DATA_SOURCE_NOT_FOUND).
    df = (
        spark.readStream.format("sparkiq-kafka")
        .option("bootstrap.servers", "127.0.0.1:1")
        .option("subscribe", "t")
        .load()
    )
    assert tuple(df.columns) == KAFKA_COLUMNS
