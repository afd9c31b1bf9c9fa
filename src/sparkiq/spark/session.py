"""Builds a local SparkSession bound to loopback, with sparkiq's data sources registered.

Everything a sparkiq pipeline starts must listen on 127.0.0.1 only, so the driver host, its
bind address and the UI are pinned here rather than left to each caller; under spark-submit
(which starts the JVM and sets PYSPARK_GATEWAY_PORT) the driver's address and the master are
spark-submit's. Python workers run
the interpreter that runs the driver, so the Kafka source and sink import the same sparkiq
and confluent-kafka as the driver does. Spark's own Kafka connector, where `sparkiq install
spark-kafka` installed it for this PySpark, goes on the session's class path (``spark.jars``,
which Spark also ships to a cluster's executors), so ``--kafka-connector auto`` takes it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkiq.core.jarsets import installed_jars, spark_kafka_connector

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The driver's address, pinned to loopback unless spark-submit started this process.
_LOOPBACK = ("spark.driver.host", "spark.driver.bindAddress")
ROCKSDB_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

# Settings every sparkiq session gets; `conf` passed to `local_session` overrides them.
_BASE_CONF: Mapping[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Python workers stay alive between tasks so the Kafka clients cached in the source and
    # sink modules are reused by the next micro-batch (it is Spark's default; pinned here
    # because the source's speed depends on it).
    "spark.python.worker.reuse": "true",
    # Stateful operators keep their state in RocksDB, off the JVM heap (DESIGN.md).
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_STATE_STORE,
    # A micro-batch commits its state as a small changelog file instead of a new RocksDB
    # snapshot copied into the checkpoint; snapshots are made in the background. Per-batch
    # latency, which is what table freshness is made of, drops by the copy.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # No empty micro-batches just because a watermark moved: in update mode (how tables are
    # written) they emit nothing, they only evict old state, which the next batch with
    # data does as well.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
}


# Spark writes every checkpoint file (the offset and commit logs, the state stores' files)
# through Hadoop. Its default manager, FileContext-based, makes Hadoop's local file system
# run `chmod` and `readlink` in a forked shell for each file (Hadoop's native library is not
# in pyspark): about six forks of the driver's JVM per micro-batch, 60-70 ms of every
# micro-batch on a 2-core machine. The FileSystem-based manager renames without them (a
# rename within one local file system is atomic, which is all it needs); Hadoop still runs
# `chmod` in a shell for each file it creates (seen in a JFR profile of the POS pipeline,
# 2026-11-28: the offset and commit logs' files and the state stores' changelog files).
# (The class moved between Spark releases; the first that exists is used.)
CHECKPOINT_FILE_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
_FILE_SYSTEM_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)


def use_local_checkpoint_files(spark: SparkSession) -> str | None:
    """Write checkpoints on the local file system with fewer forked shells per file.

    For checkpoints on a local (or locally mounted) directory only: shared storage (HDFS, S3)
    keeps Spark's default. A manager chosen by the caller (``--conf``) is kept. Returns the
    manager in use (None: Spark's default).
    """
    from sparkiq.spark.connector import class_on_classpath

    chosen = spark.conf.get(CHECKPOINT_FILE_MANAGER_CONF, None)
    if chosen:
        return str(chosen)
    for name in _FILE_SYSTEM_MANAGERS:
        if class_on_classpath(spark, name):
            spark.conf.set(CHECKPOINT_FILE_MANAGER_CONF, name)
            return name
    return None


# Spark warns after every micro-batch that outlasts its trigger interval. A query that asks
# for a short interval (the POS example's tables: a batch as soon as data waits) does so on
# purpose, and each batch's duration is in `sparkiq run`'s own log and status.
_FALLING_BEHIND_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
)


def quiet_falling_behind(spark: SparkSession) -> None:
    """Log Spark's "current batch is falling behind" at ERROR only (so: not at all)."""
    jvm: Any = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    for name in _FALLING_BEHIND_LOGGERS:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.ERROR)


# A Real-Time query's tasks run as long as the query: stopping it interrupts them while they
# write, and Spark logs each one's abort as an error with its stack (the records it had not
# committed are read again on the next start, as after any stop).
_STOP_LOGGERS = (
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.util.Utils",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.scheduler.DAGScheduler",
)


def quiet_stopping(spark: SparkSession) -> None:
    """Log nothing of the tasks that stopping the queries cuts off (call it just before)."""
    jvm: Any = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    for name in _STOP_LOGGERS:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)


def wait_for_tasks(spark: SparkSession, timeout_s: float = 10.0) -> bool:
    """Wait until no task of *spark* runs (at most *timeout_s*); whether none does.

    Stopping a query cancels its job, and its tasks end when they next look (a Real-Time
    task in its Kafka read, a micro-batch's in its partition): a session stopped before
    they have ended takes their results and their locks' release for errors, and logs them
    with their stacks ("Exception in statusUpdate", "Block broadcast_N does not exist").
    The scheduler counts a task as running until its end is reported.
    """
    from py4j.protocol import Py4JError

    deadline = time.monotonic() + timeout_s
    try:
        scheduler = spark.sparkContext._jsc.sc().taskScheduler()
        while True:
            running = scheduler.runningTasksByExecutors().valuesIterator()
            total = 0
            while running.hasNext():
                total += int(running.next())
            if total == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
    except Py4JError:  # a scheduler without the count: the stop goes on
        return False


def _private_local_dir() -> str:
    """A scratch directory for this process's Spark, removed when the process exits.

    Spark's default scratch space is the system temporary directory, and whatever its
    shutdown hooks miss (the stateful operators' RocksDB working copies, tens of MB per
    session) stays there for good. A directory of our own is removed whole at exit.
    """
    path = tempfile.mkdtemp(prefix="sparkiq-spark-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def register_data_sources(spark: SparkSession) -> None:
    """Register the `sparkiq-kafka` source and sink on *spark* (idempotent)."""
    from sparkiq.spark import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)


def kafka_connector_jars() -> list[Path]:
    """The jars of Spark's Kafka connector for the running PySpark, where `sparkiq install
    spark-kafka` installed them (none otherwise: sparkiq's Python connector remains)."""
    import pyspark

    return installed_jars(spark_kafka_connector(pyspark.__version__)) or []


def _with_jars(settings: dict[str, str], jars: list[Path]) -> None:
    """Add *jars* to ``spark.jars`` in *settings*, after any the caller put there."""
    given = [j for j in settings.get("spark.jars", "").split(",") if j]
    settings["spark.jars"] = ",".join(given + [str(j) for j in jars if str(j) not in given])


def default_local_master(extra_slots: int = 0) -> str:
    """The master of a pipeline run without one: local mode with twice as many task slots as
    the machine has cores (and *extra_slots* more: a run in Real-Time Mode, whose queries
    hold a slot per source partition while they run).

    A task of sparkiq's Kafka source or sink holds its slot while a Python worker reads or
    produces, its JVM thread waiting; with one slot per core (``local[*]``), the micro-batch
    of one query waits for a slot while another query's tasks hold them all, though the
    cores are not all busy. With twice the slots the operating system shares the cores
    among the queries' threads instead. The POS pipeline's freshness p99 at 50 invoices/s on
    2 cores: 1.06-1.23 s with ``local[2]`` (3 runs), 0.83-1.08 s with ``local[4]`` in 5 runs
    of 6 (measured by hand when it was chosen); its throughput did not change.
    """
    return f"local[{2 * (os.cpu_count() or 1) + extra_slots}]"


def local_session(
    app_name: str = "sparkiq",
    *,
    master: str | None = "local[2]",
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession for *master*, on 127.0.0.1, with sparkiq's data sources registered.

    *master* None is the master spark-submit was given when this process runs under
    spark-submit (it started the JVM), else `default_local_master`.

    `shuffle_partitions` is small by default: on a 2-core machine each extra shuffle partition
    of a stateful query costs a state store task per micro-batch.

    The installed Kafka connector's jars (`kafka_connector_jars`) join ``spark.jars``, unless
    spark-submit started the JVM: its class path is set by then, by its own ``--jars`` or
    ``--packages``.
    """
    from pyspark.sql import SparkSession

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    settings: dict[str, str] = dict(_BASE_CONF)
    if under_submit:
        # spark-submit (Kubernetes, YARN) chose the driver's address; keep it.
        for name in _LOOPBACK:
            settings.pop(name)
    settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    settings.update(conf or {})
    connector = [] if under_submit else kafka_connector_jars()
    if connector:
        _with_jars(settings, connector)
    if "spark.local.dir" not in settings:
        settings["spark.local.dir"] = _private_local_dir()
    # Python workers (and the planner processes of Python data sources) are started with
    # $PYSPARK_PYTHON, not with the `spark.pyspark.python` setting, so point it at this
    # interpreter unless the caller chose another one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if master is None and not under_submit:
        master = default_local_master()
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register_data_sources(spark)
    return spark
