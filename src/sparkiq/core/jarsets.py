"""The Java libraries sparkiq installs, and where an installed set is found.

A `JarSet` names Maven coordinates resolved together (`sparkiq.dev.jars.install_jars` does
it, once) into a directory of its own under `jars_root`, with a stamp listing its jars:
`installed_jars` reads that listing and nothing else, so a Spark session (the connector's
jars) and a broker (Apache Kafka's) find their jars without a resolver, without the
network. Three sets exist: Apache Kafka (`KAFKA`), Kafka Streams (`KAFKA_STREAMS`: the
tests compile and run a Kafka Streams application against it), and Spark's own Kafka
connector at the version of the installed PySpark (`spark_kafka_connector`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "4.4.0"
# Kafka's own distribution logs through log4j2 behind slf4j 1.7 (its libs/ ship this bridge;
# the Maven artifact leaves the binding to the user).
_LOG4J_VERSION = "2.25.5"

STAMP = ".installed"


@dataclass(frozen=True)
class JarSet:
    """A named set of Maven artifacts ("group:artifact:version") resolved together.

    *excludes* ("group:artifact") are left out of every artifact's dependencies; with
    *beside_pyspark* the jars PySpark carries itself (Scala, Hadoop's client, ...) are
    dropped after the resolution, as Spark's own classes would shadow them anyway.
    """

    name: str
    version: str
    artifacts: tuple[str, ...]
    title: str
    excludes: tuple[str, ...] = ()
    beside_pyspark: bool = False
    # What still works without the set, for the messages of a failed installation.
    fallback: str = "the dev broker needs none of this: --broker dev"

    @property
    def dir_name(self) -> str:
        return f"{self.name}-{self.version}"


KAFKA = JarSet(
    name="kafka",
    version=KAFKA_VERSION,
    artifacts=(
        f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{_LOG4J_VERSION}",
    ),
    title=f"Apache Kafka {KAFKA_VERSION}",
)

# Kafka Streams at the broker's version, with the slf4j binding Kafka's own set uses: the
# tests' Kafka Streams application (tests/support/kstreamsapp) runs on it.
KAFKA_STREAMS = JarSet(
    name="kafka-streams",
    version=KAFKA_VERSION,
    artifacts=(
        f"org.apache.kafka:kafka-streams:{KAFKA_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{_LOG4J_VERSION}",
    ),
    title=f"Kafka Streams {KAFKA_VERSION}",
    fallback="only the tests' Kafka Streams application needs it; sparkiq serves Kafka "
    "Streams stores without it",
)

SPARK_KAFKA = "spark-kafka"


def spark_kafka_connector(spark_version: str, scala_binary: str = "2.13") -> JarSet:
    """Spark's Kafka connector (``spark-sql-kafka-0-10``) for *spark_version*, without Spark.

    Spark's own modules are what PySpark is, so they are excluded from the resolution (they
    would bring Spark again, hundreds of MB); what remains is the connector, its token
    provider, the Kafka client and its pool.
    """
    return JarSet(
        name=SPARK_KAFKA,
        version=spark_version,
        artifacts=(f"org.apache.spark:spark-sql-kafka-0-10_{scala_binary}:{spark_version}",),
        title=f"Spark's Kafka connector {spark_version}",
        excludes=(
            f"org.apache.spark:spark-sql_{scala_binary}",
            f"org.apache.spark:spark-core_{scala_binary}",
            f"org.apache.spark:spark-catalyst_{scala_binary}",
        ),
        beside_pyspark=True,
        fallback="without it, pipelines read and write Kafka with sparkiq's Python source and sink",
    )


def jars_root() -> Path:
    """Where resolved jar sets live: ``$SPARKIQ_JARS_DIR``, else under the environment."""
    configured = os.environ.get("SPARKIQ_JARS_DIR")
    if configured:
        return Path(configured)
    return Path(sys.prefix) / "share" / "sparkiq" / "jars"


def installed_jars(jar_set: JarSet, root: Path | None = None) -> list[Path] | None:
    """The jars of *jar_set* if it was installed completely, else None."""
    folder = (root or jars_root()) / jar_set.dir_name
    stamp = folder / STAMP
    if not stamp.is_file():
        return None
    jars = [folder / name for name in stamp.read_text().split()]
    return jars if jars and all(j.is_file() for j in jars) else None
