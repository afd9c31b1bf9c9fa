"""`sparkiq run PIPELINE.py`: run a pipeline file until it fails or is told to stop.

The runner builds the SparkSession (local mode or any Spark master URL, with the packages
of ``--packages``), chooses the Kafka connector (``--kafka-connector``:
`sparkiq.spark.connector.choose_connector`), hands the file's ``pipeline(ctx)`` a
`PipelineContext`, and then watches the queries it started: a progress
line per query every few seconds (micro-batch, input and processed rows per second, batch
duration, observed metrics such as dead-letter counts), optionally the same as JSON in a
status file for tools, and a clear exit: SIGINT/SIGTERM stop every query and the session
(each query resumes from its checkpoint next time); a query that fails stops the others
and the runner exits with its error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from sparkiq.core.errors import SparkiqError
from sparkiq.core.progress import QueryBatch
from sparkiq.core.tables import TableDef
from sparkiq.kafka.catalog import DEFAULT_APP, read_catalog
from sparkiq.kafka.progress import ProgressPublisher
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.spark.connector import KafkaConnector, choose_connector
from sparkiq.spark.listener import ProgressTracker
from sparkiq.spark.pipeline import PipelineContext, load_pipeline
from sparkiq.spark.realtime import REALTIME_EXTRA_SLOTS, TriggerMode

log = logging.getLogger(__name__)

# Spark's scratch directory (`spark.local.dir`) for a run, under its checkpoint directory.
SCRATCH_DIR = ".spark-scratch"
# How long a stop waits for the stopped queries' tasks to end before it stops Spark.
STOP_TASKS_WAIT_S = 10.0


class PipelineFailed(SparkiqError):
    """A query of the pipeline stopped with an error."""


@dataclass
class RunSettings:
    """Everything `sparkiq run` needs besides the pipeline file."""

    bootstrap_servers: str
    # A local directory, or a URL of shared storage (hdfs://, s3a://, ...) on a cluster.
    checkpoint_dir: Path | str
    # None: spark-submit's master when run under spark-submit, else local mode with two
    # task slots per core (`sparkiq.spark.session.default_local_master`).
    master: str | None = None
    app: str = DEFAULT_APP
    trigger_interval: str | None = "1 second"
    # Real-Time Mode for every query that can run in it, or micro-batches (`--trigger`).
    trigger_mode: TriggerMode = TriggerMode.MICROBATCH
    max_offsets_per_trigger: int | None = None
    shuffle_partitions: int = 1
    params: Mapping[str, str] = field(default_factory=dict)
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    status_file: Path | None = None
    # SASL/SSL settings of every Kafka client the pipeline makes (`--kafka-config`).
    kafka_security: KafkaSecurity = PLAINTEXT
    # Spark's built-in Kafka connector, sparkiq's, or the first where it is installed.
    kafka_connector: KafkaConnector = KafkaConnector.AUTO
    # Maven coordinates of JVM packages for Spark (`--packages`: spark.jars.packages).
    packages: tuple[str, ...] = ()
    progress_interval_s: float = 5.0
    duration_s: float | None = None


class _Catalog:
    """Table definitions by name, read from the catalog again when one is missing."""

    def __init__(self, settings: RunSettings) -> None:
        self._settings = settings
        self._tables: dict[str, TableDef] = {}

    def table(self, name: str) -> TableDef | None:
        if name not in self._tables:
            s = self._settings
            self._tables = read_catalog(s.bootstrap_servers, app=s.app, security=s.kafka_security)
        return self._tables.get(name)


def _progress_line(status: Mapping[str, Any]) -> str:
    """A query's progress line. A Real-Time "batch" is an epoch of planned length, whose
    records pass through as they arrive: its line says so, and how long records that arrive
    between two epochs wait, rather than a duration that reads as a slow batch."""
    observed = "".join(
        f" {k}={v:g}"
        for metrics in status["observed_total"].values()
        if isinstance(metrics, dict)
        for k, v in metrics.items()
    )
    if status.get("trigger") == TriggerMode.REALTIME.value:
        between = status.get("between_epochs_ms")
        return (
            f"[{status['name']}] (real-time) epoch {status['batch']}: "
            f"{status['input_rows']} rows, {status['input_rows_per_s']:.0f} rows/s in; "
            f"epoch {status['batch_ms']} ms (records pass through as they arrive), "
            f"{'?' if between is None else between} ms between epochs{observed}"
        )
    return (
        f"[{status['name']}] batch {status['batch']}: {status['input_rows']} rows, "
        f"{status['processed_rows_per_s']:.0f} rows/s processed, "
        f"{status['batch_ms']} ms{observed}"
    )


def _write_status(path: Path, statuses: list[dict[str, Any]], *, running: bool) -> None:
    """The status file: ``running`` is false while the pipeline still starts its queries."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    data = {"time": time.time(), "running": running, "queries": statuses}
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def spark_conf(settings: RunSettings, scratch: Path) -> dict[str, str]:
    """The Spark settings of a run: its scratch space, its packages, then ``--conf``."""
    conf = {"spark.local.dir": str(scratch)}
    if settings.packages:
        conf["spark.jars.packages"] = ",".join(settings.packages)
    conf.update(settings.spark_conf)
    return conf


def _master(settings: RunSettings) -> str | None:
    """The Spark master of a run: ``--master``; else, for a local run in Real-Time Mode, the
    usual local master with `REALTIME_EXTRA_SLOTS` more task slots (a Real-Time query holds
    one per source partition while it runs); else None (`local_session` chooses)."""
    from sparkiq.spark.session import default_local_master

    if settings.master is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return settings.master
    if settings.trigger_mode is TriggerMode.REALTIME:
        return default_local_master(extra_slots=REALTIME_EXTRA_SLOTS)
    return None


def _statuses(ctx: PipelineContext, tracker: ProgressTracker) -> list[dict[str, Any]]:
    """Every query's status (`ProgressTracker.status`, with how it runs: ``trigger``)."""
    return [tracker.status(q) for q in ctx.queries]


def run_pipeline(path: Path, settings: RunSettings) -> None:
    """Run the pipeline file at *path* until a signal, *duration_s*, or a query failure."""
    from sparkiq.spark.session import (
        local_session,
        quiet_falling_behind,
        quiet_stopping,
        use_local_checkpoint_files,
        wait_for_tasks,
    )

    pipeline_fn = load_pipeline(path)
    if isinstance(settings.checkpoint_dir, Path):
        settings.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        # Spark's scratch space lives beside the checkpoints: removed when the run ends, and
        # a run that was killed before it could remove it leaves it to the next run, not to
        # /tmp.
        scratch = settings.checkpoint_dir / SCRATCH_DIR
        shutil.rmtree(scratch, ignore_errors=True)
    else:  # checkpoints on shared storage: the scratch space stays on this machine
        scratch = Path(tempfile.mkdtemp(prefix="sparkiq-spark-"))
    spark = local_session(
        f"sparkiq pipeline {path.stem}",
        master=_master(settings),
        shuffle_partitions=settings.shuffle_partitions,
        conf=spark_conf(settings, scratch),
    )
    if isinstance(settings.checkpoint_dir, Path):
        use_local_checkpoint_files(spark)
    quiet_falling_behind(spark)
    try:
        connector = choose_connector(spark, settings.kafka_connector)
    except Exception:
        spark.stop()
        raise
    log.info(
        "pipeline: Kafka connector %s (%s)",
        connector.value,
        "Spark's kafka format" if connector is KafkaConnector.BUILTIN else "sparkiq-kafka",
    )
    stop = threading.Event()
    catalog = _Catalog(settings)
    publisher = ProgressPublisher(
        settings.bootstrap_servers,
        catalog.table,
        app=settings.app,
        security=settings.kafka_security,
    )
    tables_of_query: dict[str, list[str]] = {}
    # How each query runs (by name), as the context chooses it when it starts the query.
    mode_of_query: dict[str, TriggerMode] = {}

    def on_batch(query: str, batch: int, read: dict[str, dict[str, int]]) -> None:
        for table in tables_of_query.get(query, ()):
            publisher.batch_done(table, batch, read)

    def on_query(figures: QueryBatch) -> None:
        tables = tuple(tables_of_query.get(figures.query, ()))
        publisher.query_done(replace(figures, tables=tables))

    tracker = ProgressTracker(
        on_batch, on_query, lambda query: mode_of_query.get(query, TriggerMode.MICROBATCH)
    )
    tracker.attach(spark)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("pipeline: %s received, stopping the queries", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    ctx = PipelineContext(
        spark=spark,
        bootstrap_servers=settings.bootstrap_servers,
        checkpoint_dir=settings.checkpoint_dir,
        app=settings.app,
        trigger_interval=settings.trigger_interval,
        trigger_mode=settings.trigger_mode,
        max_offsets_per_trigger=settings.max_offsets_per_trigger,
        params=dict(settings.params),
        kafka_security=settings.kafka_security,
        kafka_connector=connector,
        tables_of_query=tables_of_query,
        mode_of_query=mode_of_query,
    )
    status_file = settings.status_file
    if status_file is not None:
        ctx.on_wait = lambda: _write_status(status_file, _statuses(ctx, tracker), running=False)
    try:
        pipeline_fn(ctx)
        if not ctx.queries:
            raise PipelineFailed(
                f"{path} started no queries: start them through ctx.write / ctx.materialize"
            )
        log.info(
            "pipeline: %d queries running: %s", len(ctx.queries), [q.name for q in ctx.queries]
        )
        _watch(ctx, settings, stop, tracker)
    finally:
        quiet_stopping(spark)
        with _py4j_quiet():
            for query in ctx.queries:
                try:
                    query.stop()
                except Exception as exc:  # a stop error must not hide the first failure
                    log.warning("pipeline: stopping query %r failed: %s", query.name, exc)
            if not wait_for_tasks(spark, STOP_TASKS_WAIT_S):
                log.warning(
                    "pipeline: tasks of the stopped queries still ran after %.0f s; stopping "
                    "Spark anyway",
                    STOP_TASKS_WAIT_S,
                )
        if settings.status_file is not None and ctx.queries:
            _write_status(settings.status_file, _statuses(ctx, tracker), running=False)
        spark.stop()
        publisher.close()
        shutil.rmtree(scratch, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# Failures worth starting a query again for, from its checkpoint. Spark gave a fresh Python
# process (which plans a Python data source) a fixed 10 s to connect back, and a busy
# machine made it miss that:
_WORKER_LATE = ("failed to connect back", "Timed out while waiting for the Python worker")
# A Kafka broker went away under a request (killed, restarting; its leaderships move to the
# other brokers within seconds): librdkafka's codes as confluent-kafka prints them, and the
# Java client's exceptions. Asked again, the request reaches the new leader.
_BROKER_GONE = (
    "_DESTROY_BROKER",
    "_TRANSPORT",
    "_ALL_BROKERS_DOWN",
    "NOT_LEADER_FOR_PARTITION",
    "LEADER_NOT_AVAILABLE",
    "NotLeaderOrFollowerException",
    "DisconnectException",
    "org.apache.kafka.common.errors.TimeoutException",
)
# At most this many starts of one query within `_RESTART_WINDOW_S`; more is no passing
# trouble, and the pipeline fails.
_MAX_RESTARTS = 10
_RESTART_WINDOW_S = 600.0


def restart_reason(failure: str) -> str | None:
    """Why a query that failed with *failure* (its exception's text) is worth starting
    again from its checkpoint, or None when the failure is the pipeline's own."""
    if any(t in failure for t in _WORKER_LATE):
        return "failed to start a Python worker in time (a busy machine)"
    if any(t in failure for t in _BROKER_GONE):
        return "lost a Kafka broker under a request (a broker down or restarting)"
    return None


class RestartBudget:
    """How often each query was started again lately: at most `_MAX_RESTARTS` within
    `_RESTART_WINDOW_S` (a pipeline that runs for months meets more than ten broker
    restarts; ten in a few minutes is no passing trouble)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._starts: dict[str, list[float]] = {}

    def take(self, query: str) -> int | None:
        """Count one more start of *query*: how many within the window now, or None when
        the budget is spent."""
        now = self._clock()
        recent = [t for t in self._starts.get(query, []) if now - t < _RESTART_WINDOW_S]
        if len(recent) >= _MAX_RESTARTS:
            return None
        recent.append(now)
        self._starts[query] = recent
        return len(recent)


@contextlib.contextmanager
def _py4j_quiet() -> Iterator[None]:
    """Within: py4j logs no error. A batch that a query's stop cuts off fails in its Python
    callback (foreachBatch), and py4j logs that failure with its Python and Java tracebacks;
    a stop that was asked for is no error."""
    py4j_log = logging.getLogger("py4j.clientserver")
    level = py4j_log.level
    py4j_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        py4j_log.setLevel(level)


def _watch(
    ctx: PipelineContext, settings: RunSettings, stop: threading.Event, tracker: ProgressTracker
) -> None:
    deadline = None if settings.duration_s is None else time.monotonic() + settings.duration_s
    next_progress = time.monotonic() + settings.progress_interval_s
    restarts = RestartBudget()
    while not stop.is_set():
        for query in list(ctx.queries):
            if query.isActive:
                continue
            error = query.exception()
            if error is None:
                raise PipelineFailed(f"query {query.name!r} stopped")
            text = str(error)
            reason = restart_reason(text)
            started = restarts.take(query.name) if reason is not None else None
            if started is None:
                raise PipelineFailed(f"query {query.name!r} failed: {text}")
            log.warning(
                "pipeline: query %r %s; starting it again from its checkpoint (%d of at most "
                "%d in %.0f minutes)",
                query.name,
                reason,
                started,
                _MAX_RESTARTS,
                _RESTART_WINDOW_S / 60,
            )
            stop.wait(2.0 * started)  # let the machine calm down, the leaders move
            ctx.restart(query)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            log.info("pipeline: --duration reached, stopping")
            return
        if now >= next_progress:
            next_progress = now + settings.progress_interval_s
            statuses = _statuses(ctx, tracker)
            for status in statuses:
                log.info("pipeline %s", _progress_line(status))
            if settings.status_file is not None:
                _write_status(settings.status_file, statuses, running=True)
        stop.wait(0.5)
