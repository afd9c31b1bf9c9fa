"""The Kafka connector choice: built-in where its classes are on the classpath, else sparkiq's.

The set-up installs Spark's Kafka connector (`sparkiq install spark-kafka`), and the tests'
session has it on its class path: the classpath check and ``auto`` find it, both connectors
give the columns of Spark's Kafka source, and its sink places keyed records, windowed ones
too, where sparkiq's nodes look for them (murmur2). A session without it (a process whose
``SPARKIQ_JARS_DIR`` holds no connector) falls back to sparkiq's, and ``builtin`` there
stops naming the package. Nothing stands in for the connector.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
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

from sparkiq.cli.main import KAFKA_CONNECTORS
from sparkiq.core.errors import ConfigError
from sparkiq.core.jarsets import installed_jars, spark_kafka_connector
from sparkiq.core.partitioner import partition_for
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.security import KafkaSecurity
from sparkiq.spark.connector import (
    BUILTIN_PROVIDER,
    KAFKA_COLUMNS,
    KafkaConnector,
    choose_connector,
    class_on_classpath,
    java_security,
    sink_options,
    source_options,
)
from sparkiq.spark.kafkawrite import write_kafka_once
from sparkiq.spark.materialize import with_key_part_partition, with_window_partitions
from sparkiq.spark.murmur2col import murmur2_partition
from sparkiq.spark.pipeline import PipelineContext
from sparkiq.spark.runner import RunSettings, spark_conf
from sparkiq.spark.session import kafka_connector_jars
from tests.support.spark import read_topic

pytest_plugins = ["tests.support.spark"]

# Spark's Kafka source schema with includeHeaders=true, as the Structured Streaming + Kafka
# Integration Guide lists it (KafkaRecordToRowConverter): every field nullable.
SPARK_KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)


def _scala_binary_version() -> str:
    """The Scala version of the installed PySpark's jars (from the scala-library jar name)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    (library,) = jars.glob("scala-library-*.jar")
    return ".".join(library.stem.removeprefix("scala-library-").split(".")[:2])


# -- the choice, against the real JVM -----------------------------------------------------


needs_connector = pytest.mark.skipif(
    not kafka_connector_jars(),
    reason="Spark's Kafka connector is not installed (`sparkiq install spark-kafka`)",
)


@pytest.mark.spark
@needs_connector
def test_the_installed_connector_is_on_the_sessions_classpath(spark: Any) -> None:
    assert class_on_classpath(spark, "org.apache.spark.sql.SparkSession")
    assert class_on_classpath(spark, BUILTIN_PROVIDER)
    assert not class_on_classpath(spark, "org.sparkiq.NoSuchClass")
    jars = spark.conf.get("spark.jars").split(",")
    assert sorted(jars) == sorted(str(j) for j in kafka_connector_jars())
    assert any("spark-sql-kafka-0-10_" in j for j in jars)


@pytest.mark.spark
@needs_connector
def test_auto_chooses_the_builtin_connector_where_installed(spark: Any) -> None:
    assert choose_connector(spark, KafkaConnector.AUTO) is KafkaConnector.BUILTIN
    assert choose_connector(spark, KafkaConnector.BUILTIN) is KafkaConnector.BUILTIN
    assert choose_connector(spark, KafkaConnector.PYTHON) is KafkaConnector.PYTHON


def test_the_connector_installed_is_the_one_of_the_installed_pyspark() -> None:
    import pyspark

    jar_set = spark_kafka_connector(pyspark.__version__, _scala_binary_version())
    assert jar_set.artifacts == (
        f"org.apache.spark:spark-sql-kafka-0-10_{_scala_binary_version()}:{pyspark.__version__}",
    )
    assert installed_jars(jar_set) == (kafka_connector_jars() or None)


# A session without the connector: its own process, whose jars directory holds none.
_WITHOUT_CONNECTOR = """
from pyspark.errors import AnalysisException
from sparkiq.spark.connector import (
    BUILTIN_PROVIDER, ConnectorMissingError, KafkaConnector, choose_connector,
    class_on_classpath,
)
from sparkiq.spark.session import local_session

spark = local_session("no-connector", master="local[1]")
assert not spark.conf.get("spark.jars", "")
assert class_on_classpath(spark, "org.apache.spark.sql.SparkSession")
assert not class_on_classpath(spark, BUILTIN_PROVIDER)
assert choose_connector(spark, KafkaConnector.AUTO) is KafkaConnector.PYTHON
assert choose_connector(spark, KafkaConnector.PYTHON) is KafkaConnector.PYTHON
try:
    choose_connector(spark, KafkaConnector.BUILTIN)
except ConnectorMissingError as e:
    print("MISSING", e)
try:  # Spark itself agrees: its `kafka` format is missing too.
    spark.readStream.format("kafka").option("subscribe", "t").load()
except AnalysisException as e:
    print("SPARK", e.getCondition(), e)
spark.stop()
"""


@pytest.mark.spark
def test_without_the_connector_auto_falls_back_and_builtin_names_the_package(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "SPARKIQ_JARS_DIR": str(tmp_path / "no-jars")}
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_CONNECTOR],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import pyspark

    package = (
        f"org.apache.spark:spark-sql-kafka-0-10_{_scala_binary_version()}:{pyspark.__version__}"
    )
    missing = next(line for line in done.stdout.splitlines() if line.startswith("MISSING"))
    assert f"--packages {package}" in missing
    assert BUILTIN_PROVIDER in missing
    spark_says = next(line for line in done.stdout.splitlines() if line.startswith("SPARK"))
    assert "data source: kafka" in spark_says


@pytest.mark.spark
@needs_connector
def test_both_connectors_read_the_columns_of_sparks_kafka_source(
    spark: Any, tmp_path: Path
) -> None:
    def context(connector: KafkaConnector) -> PipelineContext:
        return PipelineContext(
            spark=spark,
            bootstrap_servers="127.0.0.1:1",
            checkpoint_dir=tmp_path,
            kafka_connector=connector,
        )

    for connector in (KafkaConnector.PYTHON, KafkaConnector.BUILTIN):
        df = context(connector).read("t")
        assert df.schema == SPARK_KAFKA_SCHEMA, connector
        assert tuple(df.columns) == KAFKA_COLUMNS


def test_the_command_line_offers_every_connector() -> None:
    assert tuple(c.value for c in KafkaConnector) == KAFKA_CONNECTORS


@pytest.mark.spark
def test_sparkiq_run_builtin_without_the_connector_fails_at_start_naming_it(
    tmp_path: Path, bootstrap: str
) -> None:
    env = {**os.environ, "SPARKIQ_JARS_DIR": str(tmp_path / "no-jars")}
    pipeline = tmp_path / "p.py"
    pipeline.write_text("def pipeline(ctx):\n    raise AssertionError('not reached')\n")
    args = ["run", str(pipeline), "--bootstrap-servers", bootstrap]
    args += ["--checkpoint-dir", str(tmp_path / "ckpt"), "--kafka-connector", "builtin"]
    done = subprocess.run(
        [sys.executable, "-m", "sparkiq", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode != 0
    assert "not reached" not in done.stdout + done.stderr
    assert "--packages org.apache.spark:spark-sql-kafka-0-10_" in done.stderr


# -- the options each connector gets --------------------------------------------------------


def test_builtin_source_options() -> None:
    io = source_options(
        KafkaConnector.BUILTIN,
        bootstrap_servers="b:9092",
        topics=("a", "b"),
        starting_offsets="earliest",
        max_offsets_per_trigger=500,
    )
    assert io.format == "kafka"
    assert dict(io.options) == {
        "kafka.bootstrap.servers": "b:9092",
        "subscribe": "a,b",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "500",
        "includeHeaders": "true",
        "failOnDataLoss": "false",
        "kafka.fetch.max.wait.ms": "10",
    }


def test_a_builtin_read_that_may_run_in_real_time_keeps_kafka_s_fetch_wait() -> None:
    # A Real-Time query polls for new records: a 10-ms wait would have it fetch 100 times a
    # second per idle partition.
    io = source_options(
        KafkaConnector.BUILTIN, bootstrap_servers="b:9092", topics=("a",), micro_batches=False
    )
    assert "kafka.fetch.max.wait.ms" not in io.options
    assert "maxOffsetsPerTrigger" not in io.options


def test_python_source_options() -> None:
    security = KafkaSecurity.from_pairs(["security.protocol=SSL"])
    io = source_options(
        KafkaConnector.PYTHON, bootstrap_servers="b:9092", topics=("a",), security=security
    )
    assert io.format == "sparkiq-kafka"
    assert dict(io.options) == {
        "bootstrap.servers": "b:9092",
        "subscribe": "a",
        "startingOffsets": "earliest",
        "kafka.security.protocol": "SSL",
    }


def test_sink_options_of_each_connector() -> None:
    builtin = sink_options(KafkaConnector.BUILTIN, bootstrap_servers="b:1", topic="t")
    assert builtin.format == "kafka"
    assert dict(builtin.options) == {
        "topic": "t",
        "kafka.bootstrap.servers": "b:1",
        "kafka.acks": "all",
        "kafka.linger.ms": "20",
        "kafka.batch.size": "262144",
    }
    # A write in Real-Time Mode sends each record at once: Kafka's own linger and batches.
    realtime = sink_options(
        KafkaConnector.BUILTIN, bootstrap_servers="b:1", topic="t", micro_batches=False
    )
    assert dict(realtime.options) == {
        "topic": "t",
        "kafka.bootstrap.servers": "b:1",
        "kafka.acks": "all",
    }
    python = sink_options(KafkaConnector.PYTHON, bootstrap_servers="b:1", windowed_keys=True)
    assert python.format == "sparkiq-kafka"
    assert dict(python.options) == {"bootstrap.servers": "b:1", "windowedKeys": "true"}
    some = sink_options(KafkaConnector.PYTHON, bootstrap_servers="b:1", windowed_topics=["w", "x"])
    assert dict(some.options) == {
        "bootstrap.servers": "b:1",
        "windowedKeys": "false",
        "windowedTopics": "w,x",
    }


def test_auto_must_be_resolved_before_options_are_made() -> None:
    with pytest.raises(ConfigError, match="choose_connector"):
        sink_options(KafkaConnector.AUTO, bootstrap_servers="b:1")


def test_librdkafka_security_becomes_java_client_settings() -> None:
    security = KafkaSecurity.from_pairs(
        [
            "security.protocol=SASL_SSL",
            "sasl.mechanisms=SCRAM-SHA-512",
            "sasl.username=app",
            'sasl.password=p"w',
            "ssl.ca.location=/etc/ca.pem",
        ]
    )
    assert java_security(security) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="app" password="p\\"w";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
    }
    io = source_options(
        KafkaConnector.BUILTIN, bootstrap_servers="b", topics=("t",), security=security
    )
    assert io.options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"


def test_security_the_java_client_cannot_take_is_a_clear_error() -> None:
    security = KafkaSecurity.from_pairs(["security.protocol=SSL", "ssl.key.location=/k.pem"])
    with pytest.raises(ConfigError, match=r"ssl.key.location.*--kafka-connector python"):
        java_security(security)


def test_packages_reach_spark_and_conf_wins(tmp_path: Path) -> None:
    settings = RunSettings(
        bootstrap_servers="b",
        checkpoint_dir=tmp_path,
        packages=("g:a:1", "g:b:2"),
        spark_conf={"spark.x": "1"},
    )
    assert spark_conf(settings, tmp_path / "s") == {
        "spark.local.dir": str(tmp_path / "s"),
        "spark.jars.packages": "g:a:1,g:b:2",
        "spark.x": "1",
    }


# -- murmur2 placement with the built-in sink -----------------------------------------------


@pytest.mark.spark
def test_the_jvm_murmur2_partition_equals_kafkas(spark: Any) -> None:
    rnd = random.Random(7)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"\xff\xfe\x80\x00\x01", b"C00042"]
    keys += [bytes(rnd.randrange(256) for _ in range(rnd.randrange(40))) for _ in range(300)]
    df = spark.createDataFrame([(k,) for k in keys], "k binary")
    counts = (1, 6, 7)
    rows = df.select(*[murmur2_partition("k", n).alias(f"p{n}") for n in counts]).collect()
    assert [tuple(row) for row in rows] == [
        tuple(partition_for(k, n) for n in counts) for k in keys
    ]


@pytest.mark.spark
def test_windowed_records_go_to_the_partition_of_their_key_part(spark: Any) -> None:
    keys = [f"store-{i}".encode() for i in range(40)]
    rows = [
        (k + (1_763_000_000_000 + w * 60_000).to_bytes(8, "big"), b"v")
        for k in keys
        for w in range(3)
    ]
    records = spark.createDataFrame(rows, "key binary, value binary")
    placed = with_key_part_partition(records, 6).collect()
    assert placed[0].asDict().keys() == {"key", "value", "partition"}
    assert {bytes(r.key): r.partition for r in placed} == {
        key: partition_for(key[:-8], 6) for key, _ in rows
    }


@pytest.mark.spark
def test_only_the_windowed_topics_records_get_their_key_parts_partition(spark: Any) -> None:
    start = (1_763_000_000_000).to_bytes(8, "big")
    rows = [(f"store-{i}".encode() + start, "windows", None) for i in range(20)]
    rows += [(f"card-{i}".encode(), "plain", None) for i in range(20)]
    rows += [(b"given" + start, "windows", 5)]  # an explicit partition stays
    records = spark.createDataFrame(rows, "key binary, topic string, partition int")
    placed = with_window_partitions(records, {"windows": 6}).collect()
    assert {bytes(r.key): r.partition for r in placed} == {
        key: (partition if partition is not None else partition_for(key[:-8], 6))
        if topic == "windows"
        else None
        for key, topic, partition in rows
    }
    # Without a topic column, the sink's topic decides for every row.
    alone = records.where("topic = 'windows' AND partition IS NULL").drop("topic", "partition")
    placed = with_window_partitions(alone, {"windows": 6}, "windows").collect()
    assert {bytes(r.key): r.partition for r in placed} == {
        key: partition_for(key[:-8], 6)
        for key, topic, p in rows
        if topic == "windows" and p is None
    }


@pytest.mark.spark
@needs_connector
def test_the_builtin_sink_places_keys_where_nodes_look_for_them(spark: Any, bootstrap: str) -> None:
    """Plain keys by Kafka's producer (its default partitioner: murmur2 of the key bytes),
    windowed ones by the partition column of their key part: `partition_for` either way."""
    topic = f"builtin-placement-{random.randrange(1 << 30)}"
    create_topic(bootstrap, topic, 6)
    start = (1_763_000_000_000).to_bytes(8, "big")
    plain = [f"card-{i}".encode() for i in range(60)]
    windowed = [f"store-{i}".encode() + start for i in range(60)]
    sink = sink_options(KafkaConnector.BUILTIN, bootstrap_servers=bootstrap, topic=topic)
    write_kafka_once(
        spark.createDataFrame([(k, b"p") for k in plain], "key binary, value binary"), sink
    )
    records = spark.createDataFrame([(k, b"w") for k in windowed], "key binary, value binary")
    write_kafka_once(with_key_part_partition(records, 6), sink)
    placed = {
        (bytes(m.key() or b""), m.value()): m.partition() for m in read_topic(bootstrap, topic, 6)
    }
    assert placed == {(k, b"p"): partition_for(k, 6) for k in plain} | {
        (k, b"w"): partition_for(k[:-8], 6) for k in windowed
    }
