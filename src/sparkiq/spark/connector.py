"""Which Kafka connector a pipeline reads and writes with: Spark's built-in one, or sparkiq's.

Spark's Kafka connector (``spark-sql-kafka-0-10``, format ``kafka``) is a JVM package: the
set-up installs it at PySpark's version (``sparkiq install spark-kafka``) and sparkiq's
sessions put it on their class path (`sparkiq.spark.session`); a cluster can add it with
``spark-submit --packages`` (or ``sparkiq run --packages``). It reads and writes without
Python workers and is what Spark's faster trigger modes need. sparkiq's own
source and sink (format ``sparkiq-kafka``, on the Python Data Source API) need nothing
installed. `choose_connector` picks one for a session: ``auto`` takes the built-in connector
when its classes are on the JVM's classpath (asked through py4j, without loading anything),
else sparkiq's; ``builtin`` without the connector is a `ConnectorMissingError` that names the
package for the running Spark and Scala versions.

Both give a pipeline the same columns (`KAFKA_COLUMNS`: Spark's Kafka source schema with its
headers), so a pipeline file does not change with the connector. `source_options` and
`sink_options` turn sparkiq's settings into each connector's options: the built-in one is a
Java Kafka client, so librdkafka's security settings are translated (`java_security`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from sparkiq.core.errors import ConfigError
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.spark.options import FORMAT_NAME

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BUILTIN_FORMAT",
    "BUILTIN_PROVIDER",
    "KAFKA_COLUMNS",
    "ConnectorMissingError",
    "KafkaConnector",
    "KafkaIO",
    "choose_connector",
    "class_on_classpath",
    "connector_package",
    "java_security",
    "sink_options",
    "source_options",
]

BUILTIN_FORMAT = "kafka"
# The class Spark's `kafka` format resolves to; present only with the connector's jar.
BUILTIN_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
# The broker's longest wait per fetch of a micro-batch query's consumers (see `source_options`).
MICRO_BATCH_FETCH_WAIT_MS = 10
# The Java producer's settings for a micro-batch query's writes (see `sink_options`): how long
# a record waits for more to fill its batch, and a batch's most bytes.
MICRO_BATCH_LINGER_MS = 20
MICRO_BATCH_BATCH_BYTES = 256 * 1024
# Spark's Kafka source schema (with includeHeaders=true), in its order; sparkiq's source
# gives the same (`sparkiq.spark.rangeread.SCHEMA`).
KAFKA_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
)


class KafkaConnector(StrEnum):
    """The connector `sparkiq run --kafka-connector` asks for."""

    AUTO = "auto"  # the built-in one when its classes are on the classpath, else python
    BUILTIN = "builtin"  # Spark's `kafka` format (spark-sql-kafka-0-10)
    PYTHON = "python"  # sparkiq's `sparkiq-kafka` format (Python Data Source API)


class ConnectorMissingError(ConfigError):
    """The built-in Kafka connector was asked for and its classes are not on the classpath."""


def class_on_classpath(spark: SparkSession, name: str) -> bool:
    """Whether the driver JVM of *spark* can load the class *name* (without initializing it).

    Spark's own check (`Utils.classIsLoadable`) uses the class loader that jars added with
    ``--packages`` / ``spark.jars`` are in.
    """
    jvm = spark.sparkContext._jvm
    if jvm is None:  # pragma: no cover - a live session always has its gateway
        raise ConfigError("the SparkSession has no JVM gateway (was it stopped?)")
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(name))


def connector_package(spark: SparkSession) -> str:
    """The Maven coordinates of Spark's Kafka connector for the running Spark and Scala."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # pragma: no cover
        raise ConfigError("the SparkSession has no JVM gateway (was it stopped?)")
    scala = str(jvm.scala.util.Properties.versionNumberString())
    scala_binary = ".".join(scala.split(".")[:2])
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala_binary}:{spark.version}"


def choose_connector(spark: SparkSession, wanted: KafkaConnector) -> KafkaConnector:
    """BUILTIN or PYTHON for *spark*: what *wanted* means with the classes the JVM has."""
    if wanted is KafkaConnector.PYTHON:
        return KafkaConnector.PYTHON
    present = class_on_classpath(spark, BUILTIN_PROVIDER)
    if present:
        return KafkaConnector.BUILTIN
    if wanted is KafkaConnector.BUILTIN:
        package = connector_package(spark)
        raise ConnectorMissingError(
            f"--kafka-connector builtin: Spark's Kafka connector is not on the classpath "
            f"({BUILTIN_PROVIDER} cannot be loaded); add it with --packages {package} "
            "(or spark-submit --packages, or spark.jars), or use --kafka-connector auto "
            "to fall back to sparkiq's Python source and sink"
        )
    return KafkaConnector.PYTHON


# librdkafka's SASL mechanisms and the Java login module each one takes its user from.
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka settings with a Java client setting of the same name and meaning.
_SAME_IN_JAVA = ("security.protocol", "ssl.endpoint.identification.algorithm")


def _jaas_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_security(security: KafkaSecurity) -> dict[str, str]:
    """*security* (librdkafka settings) as the Java Kafka client's settings.

    Covers SASL PLAIN and SCRAM with a user name and password, a CA file (PEM) and the
    endpoint check; anything else has no one-to-one Java form and is a ConfigError saying
    to use sparkiq's connector.
    """
    conf = dict(security.settings)
    out: dict[str, str] = {}
    for name in _SAME_IN_JAVA:
        if name in conf:
            out[name] = conf.pop(name)
    mechanism = conf.pop("sasl.mechanisms", None) or conf.pop("sasl.mechanism", None)
    user, password = conf.pop("sasl.username", None), conf.pop("sasl.password", None)
    if mechanism is not None:
        out["sasl.mechanism"] = mechanism
        module = _LOGIN_MODULES.get(mechanism.upper())
        if module is None or user is None or password is None:
            raise ConfigError(
                f"the built-in Kafka connector gets SASL {mechanism} settings only as Java "
                "client settings sparkiq does not translate; use --kafka-connector python"
            )
        out["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(user)} password={_jaas_quote(password)};"
        )
    ca = conf.pop("ssl.ca.location", None)
    if ca is not None:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    verify = conf.pop("enable.ssl.certificate.verification", None)
    if verify is not None and verify.strip().lower() in ("false", "0"):
        conf["enable.ssl.certificate.verification"] = verify  # no Java counterpart
    if conf:
        raise ConfigError(
            f"the built-in Kafka connector cannot take the Kafka settings {sorted(conf)} "
            "(no Java client counterpart sparkiq translates); use --kafka-connector python"
        )
    return out


@dataclass(frozen=True)
class KafkaIO:
    """A format name and its options, as `readStream.format(...).options(...)` takes them."""

    format: str
    options: Mapping[str, str]


def source_options(
    connector: KafkaConnector,
    *,
    bootstrap_servers: str,
    topics: tuple[str, ...],
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    security: KafkaSecurity = PLAINTEXT,
    micro_batches: bool = True,
) -> KafkaIO:
    """What reading *topics* takes with *connector* (BUILTIN or PYTHON); *micro_batches*:
    the query reads in micro-batches (False: it may run in Real-Time Mode)."""
    if not topics:
        raise ConfigError("read() needs at least one topic")
    options = {"subscribe": ",".join(topics), "startingOffsets": starting_offsets}
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if connector is KafkaConnector.BUILTIN:
        options["kafka.bootstrap.servers"] = bootstrap_servers
        # The same columns as sparkiq's source, headers included.
        options["includeHeaders"] = "true"
        # A topic compacted or truncated under a running query is not an error here
        # either: sparkiq's source reads what is there.
        options["failOnDataLoss"] = "false"
        if micro_batches:
            # A task's consumer leaves a fetch parked at the end of its range, and the next
            # batch's first fetch of that partition waits until the broker answers it: with
            # Kafka's 500 ms default, up to 500 ms of every micro-batch. A range is in the
            # log already, so a short wait costs nothing (sparkiq's source: FETCH_WAITS_MS).
            # A Real-Time query polls for new records and keeps the default, not spinning.
            options["kafka.fetch.max.wait.ms"] = str(MICRO_BATCH_FETCH_WAIT_MS)
        options.update({f"kafka.{k}": v for k, v in java_security(security).items()})
        return KafkaIO(BUILTIN_FORMAT, options)
    _check_resolved(connector)
    options["bootstrap.servers"] = bootstrap_servers
    options.update(security.spark_options())
    return KafkaIO(FORMAT_NAME, options)


def sink_options(
    connector: KafkaConnector,
    *,
    bootstrap_servers: str,
    topic: str | None = None,
    windowed_keys: bool = False,
    windowed_topics: Sequence[str] = (),
    security: KafkaSecurity = PLAINTEXT,
    micro_batches: bool = True,
) -> KafkaIO:
    """What writing to Kafka takes with *connector* (BUILTIN or PYTHON); *micro_batches*: the
    query writes in micro-batches (False: in Real-Time Mode).

    The built-in sink places keyed records as Kafka's Java producer does (murmur2 of the
    whole key), so a windowed changelog's partition (murmur2 of the key part) must come in
    a ``partition`` column (`sparkiq.spark.murmur2col`); *windowed_keys* (every record's
    key ends with a window start) and *windowed_topics* (those of the records to these
    topics) are for sparkiq's sink only.
    """
    options: dict[str, str] = {}
    if topic is not None:
        options["topic"] = topic
    if connector is KafkaConnector.BUILTIN:
        options["kafka.bootstrap.servers"] = bootstrap_servers
        # Every record acknowledged by all in-sync replicas before the batch commits, as
        # sparkiq's sink does.
        options["kafka.acks"] = "all"
        if micro_batches:
            # A micro-batch is a flood of small records (the POS routes: ~5 of ~300 bytes per
            # invoice), and each task's writer flushes its producer before the batch commits,
            # so nothing waits past its batch's end. With the client's linger of 0 the sender
            # sends whatever has queued as soon as it is free: many small produce requests,
            # each costing the producer and the broker CPU. The routes' query alone over 20,000-
            # invoice batches (`bench_pipeline_stages.py --stages routes-kafka`, 2026-11-29):
            # 0.22-0.29 of the rate source with Kafka's defaults, 0.33-0.41 with a linger of
            # 20 ms (larger batches alone: 0.31; lz4: 0.25). A Real-Time query keeps the
            # defaults: its records must not wait for company.
            options["kafka.linger.ms"] = str(MICRO_BATCH_LINGER_MS)
            options["kafka.batch.size"] = str(MICRO_BATCH_BATCH_BYTES)
        options.update({f"kafka.{k}": v for k, v in java_security(security).items()})
        return KafkaIO(BUILTIN_FORMAT, options)
    _check_resolved(connector)
    options["bootstrap.servers"] = bootstrap_servers
    options["windowedKeys"] = "true" if windowed_keys else "false"
    if windowed_topics:
        options["windowedTopics"] = ",".join(windowed_topics)
    options.update(security.spark_options())
    return KafkaIO(FORMAT_NAME, options)


def _check_resolved(connector: KafkaConnector) -> None:
    if connector is KafkaConnector.AUTO:
        raise ConfigError("resolve --kafka-connector auto with choose_connector() first")
