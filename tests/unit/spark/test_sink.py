"""The `sparkiq-kafka` sink: rows written by Spark, read back with confluent-kafka."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F

from sparkiq.core.errors import ConfigError
from sparkiq.kafka.admin import create_topic
from sparkiq.spark.sink import SinkOptions
from tests.support.spark import read_topic

pytest_plugins = ["tests.support.spark"]


def _murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`, written out independently of the code under test."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _kafka_partition(key: bytes, partitions: int) -> int:
    return (_murmur2(key) & 0x7FFFFFFF) % partitions


def test_reference_murmur2_matches_kafkas_golden_vectors() -> None:
    # From Kafka's UtilsTest.testMurmur2.
    assert _murmur2(b"21") == -973932308
    assert _murmur2(b"foobar") == -790332482
    assert _murmur2(b"abc") == 479470107


@pytest.mark.spark
def test_stream_writes_every_row_where_kafka_would_put_it(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, sink = unique_name("sink-in"), unique_name("sink-out")
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 5)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(200):
        value = None if i % 10 == 0 else f"value-{i}".encode()  # every tenth is a tombstone
        producer.produce(source, key=f"key-{i}".encode(), value=value, partition=i % 2)
    producer.flush()

    query = (
        spark.readStream.format("sparkiq-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        # string columns on the way out: the sink writes their UTF-8 bytes
        .select(
            F.col("key").cast("string").alias("key"),
            F.upper(F.col("value").cast("string")).alias("value"),
        )
        .writeStream.format("sparkiq-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)

    written = read_topic(bootstrap, sink, 5)
    got = sorted((m.key(), m.value()) for m in written if m.value() is not None)
    tombstones = sorted(m.key() for m in written if m.value() is None)
    assert len(written) == 200
    assert got == sorted((f"key-{i}".encode(), f"VALUE-{i}".encode()) for i in range(200) if i % 10)
    assert tombstones == sorted(f"key-{i}".encode() for i in range(0, 200, 10))
    key_bytes = [m.key() for m in written]
    assert all(isinstance(k, bytes) for k in key_bytes)
    assert [m.partition() for m in written] == [
        _kafka_partition(k, 5)  # type: ignore[arg-type]
        for k in key_bytes
    ]
    assert len({m.partition() for m in written}) == 5


@pytest.mark.spark
def test_batch_write_honours_explicit_partitions_and_topic_columns(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    first, second = unique_name("sink-a"), unique_name("sink-b")
    create_topic(bootstrap, first, 4)
    create_topic(bootstrap, second, 4)
    # A windowed changelog picks the partition from the key part only; here it is given.
    rows = [
        (b"user-1\x00\x00\x00\x00\x00\x00\x00\x01", b"a", first, 3),
        (b"user-1\x00\x00\x00\x00\x00\x00\x00\x02", b"b", first, 3),
        (b"user-2", None, first, 0),
        (b"user-3", b"c", second, None),  # no partition: the partitioner decides
    ]
    df = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int"
    ).repartition(2)

    df.write.format("sparkiq-kafka").option("bootstrap.servers", bootstrap).mode("append").save()

    on_first = read_topic(bootstrap, first, 4)
    on_second = read_topic(bootstrap, second, 4)
    assert sorted((m.key(), m.value(), m.partition()) for m in on_first) == sorted(  # type: ignore[type-var]
        [(k, v, p) for k, v, t, p in rows if t == first]
    )
    assert [(m.key(), m.value(), m.partition()) for m in on_second] == [
        (b"user-3", b"c", _kafka_partition(b"user-3", 4))
    ]


@pytest.mark.spark
def test_windowed_topics_partition_their_records_by_the_key_part_only(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    windowed, plain = unique_name("sink-windows"), unique_name("sink-plain")
    create_topic(bootstrap, windowed, 6)
    create_topic(bootstrap, plain, 6)
    starts = [(60_000 * i).to_bytes(8, "big") for i in range(4)]
    rows = [(f"store-{s}".encode() + start, b"w", windowed) for s in range(5) for start in starts]
    # Keys that end in 8 bytes as well, to a topic that is not windowed: hashed whole.
    rows += [(f"customer-{c}".encode() + starts[1], b"p", plain) for c in range(5)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string")

    (
        df.write.format("sparkiq-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("windowedTopics", windowed)
        .mode("append")
        .save()
    )

    on_windowed = read_topic(bootstrap, windowed, 6)
    assert len(on_windowed) == 20
    for m in on_windowed:
        key: bytes = m.key()  # type: ignore[assignment]
        assert m.partition() == _kafka_partition(key[:-8], 6), key
    on_plain = read_topic(bootstrap, plain, 6)
    assert len(on_plain) == 5
    assert [m.partition() for m in on_plain] == [
        _kafka_partition(m.key(), 6)  # type: ignore[arg-type]
        for m in on_plain
    ]
    # The test means something: some store's key part and whole key hash apart.
    assert any(
        _kafka_partition(k[:-8], 6) != _kafka_partition(k, 6) for k, _, t in rows if t == windowed
    )


@pytest.mark.spark
def test_undeliverable_records_fail_the_write(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("sink-fail")
    create_topic(bootstrap, topic, 2)
    df = spark.createDataFrame([("k", "v", 7)], "key string, value string, partition int")

    with pytest.raises(Exception, match=r"KafkaError") as failure:
        df.write.format("sparkiq-kafka").option("bootstrap.servers", bootstrap).option(
            "topic", topic
        ).mode("append").save()
    assert topic in str(failure.value)
    assert read_topic(bootstrap, topic, 2) == []


def test_a_topic_is_required_and_columns_are_checked() -> None:
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    def schema(*fields: tuple[str, Any]) -> StructType:
        return StructType([StructField(name, dtype) for name, dtype in fields])

    with pytest.raises(ConfigError, match="needs a topic"):
        SinkOptions.parse({"bootstrap.servers": "x:1"}, schema(("value", BinaryType())))
    with pytest.raises(ConfigError, match="column 'value'"):
        SinkOptions.parse({"bootstrap.servers": "x:1", "topic": "t"}, schema(("key", BinaryType())))
    with pytest.raises(ConfigError, match="must be binary or string"):
        SinkOptions.parse(
            {"bootstrap.servers": "x:1", "topic": "t"},
            schema(("key", IntegerType()), ("value", BinaryType())),
        )
    parsed = SinkOptions.parse(
        {"bootstrap.servers": "x:1", "topic": "t", "kafka.linger.ms": "1"},
        schema(("value", BinaryType()), ("partition", IntegerType())),
    )
    assert parsed.has_partition_column
    assert not parsed.has_key
    assert parsed.kafka_config == (("linger.ms", "1"),)


def test_windowed_keys_option_is_checked() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    kv = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    base = {"bootstrap.servers": "x:1", "topic": "t"}
    assert SinkOptions.parse({**base, "windowedKeys": "true"}, kv).windowed_keys
    assert not SinkOptions.parse(base, kv).windowed_keys
    with pytest.raises(ConfigError, match="true or false"):
        SinkOptions.parse({**base, "windowedKeys": "yes"}, kv)
    value_only = StructType([StructField("value", BinaryType())])
    with pytest.raises(ConfigError, match="needs a key column"):
        SinkOptions.parse({**base, "windowedKeys": "true"}, value_only)
    topics = SinkOptions.parse({**base, "windowedTopics": " a, b ,"}, kv).windowed_topics
    assert topics == frozenset({"a", "b"})
    assert SinkOptions.parse(base, kv).windowed_topics == frozenset()
    with pytest.raises(ConfigError, match="needs a key column"):
        SinkOptions.parse({**base, "windowedTopics": "a"}, value_only)
