"""What a pipeline file sees: `PipelineContext`, and how `sparkiq run` loads the file.

A pipeline file is ordinary PySpark with one entry point::

    def pipeline(ctx: PipelineContext) -> None:
        orders = ctx.read("orders")                       # a streaming DataFrame
        ...
        ctx.write(branch, name="big-orders", topic="big-orders")
        ctx.materialize(latest, table="latest-order", key="customer")

`sparkiq run FILE` builds the SparkSession (any master), calls ``pipeline(ctx)`` and keeps the
queries it started running. The context fills in what every query needs and a user should
not repeat: the broker, a checkpoint directory per query under one root (so a restarted
pipeline resumes each query where it stopped), the trigger interval, the catalog, the
Kafka connector (Spark's built-in one where it is installed, else sparkiq's:
`sparkiq.spark.connector`, the same columns either way) and the Kafka client security
settings (``sparkiq run --kafka-config``), which every source, sink, topic creation and
catalog registration it makes connects with.

With ``sparkiq run --trigger realtime`` (or ``trigger="realtime"`` on one query) each query
runs in Spark's Real-Time Mode where it can, and in micro-batches where it cannot, saying why
once as it starts (`sparkiq.spark.realtime`).
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkiq.core.errors import ConfigError
from sparkiq.core.tables import TableDef
from sparkiq.kafka.access import check_rights
from sparkiq.kafka.admin import create_topic, partition_count
from sparkiq.kafka.catalog import DEFAULT_APP
from sparkiq.kafka.roles import pipeline_needs
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.spark.connector import KafkaConnector, sink_options, source_options
from sparkiq.spark.kafkawrite import Finish, start_kafka_write
from sparkiq.spark.materialize import materialize, prepare_table, with_window_partitions
from sparkiq.spark.realtime import (
    REALTIME_BATCH,
    PlanFacts,
    TriggerMode,
    is_realtime_refusal,
    plan_facts,
    realtime_refusal,
    spark_has_realtime_mode,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

PipelineFn = Callable[["PipelineContext"], None]
# Starts a query in the mode given (the same query, started again, in another mode).
ModeStarter = Callable[[TriggerMode], "StreamingQuery"]

log = logging.getLogger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class PipelineContext:
    """The SparkSession and the settings a pipeline's queries share."""

    spark: SparkSession
    bootstrap_servers: str
    # A local directory, or a URL of shared storage (hdfs://, s3a://, ...) on a cluster.
    checkpoint_dir: Path | str
    app: str = DEFAULT_APP
    trigger_interval: str | None = "1 second"
    # Micro-batches, or Real-Time Mode for every query that can run in it (`sparkiq run
    # --trigger realtime`); a query may ask for either itself (``write(trigger=...)``).
    trigger_mode: TriggerMode = TriggerMode.MICROBATCH
    # A Real-Time query's batch: how often it checkpoints its offsets and reports progress.
    realtime_batch: str = REALTIME_BATCH
    max_offsets_per_trigger: int | None = None
    # SASL/SSL settings of every Kafka client the context makes (default PLAINTEXT).
    kafka_security: KafkaSecurity = PLAINTEXT
    # The connector every read and write uses: BUILTIN or PYTHON (`choose_connector`).
    kafka_connector: KafkaConnector = KafkaConnector.PYTHON
    # Free-form settings for the pipeline itself (`sparkiq run --param name=value`).
    params: Mapping[str, str] = field(default_factory=dict)
    queries: list[StreamingQuery] = field(default_factory=list)
    starters: dict[str, Callable[[], StreamingQuery]] = field(default_factory=dict)
    # The tables each query writes (by query name): the runner publishes their progress
    # after every committed micro-batch (`sparkiq.kafka.progress`, `after_source` reads).
    tables_of_query: dict[str, list[str]] = field(default_factory=dict)
    # Called about once a second while a query is starting (the runner reports progress).
    on_wait: Callable[[], None] | None = None
    # How long a started query may take over its first micro-batch before the next one
    # starts anyway.
    init_wait_s: float = 300.0
    # The topics `read` was asked for, and those whose rights `_start` has checked.
    sources: set[str] = field(default_factory=set)
    _sources_checked: set[str] = field(default_factory=set, repr=False)
    # How each query runs (by query name), for the runner's progress lines and status.
    mode_of_query: dict[str, TriggerMode] = field(default_factory=dict)
    # The task slots each Real-Time query holds (one per source partition).
    _realtime_slots: dict[str, int] = field(default_factory=dict, repr=False)

    def check_sources(self) -> None:
        """AccessDeniedError naming the sources read so far that the pipeline may not read:
        before a query starts, not as its JVM stack when its first batch is refused."""
        unchecked = sorted(self.sources - self._sources_checked)
        if not unchecked:
            return
        needs = pipeline_needs(self.app, unchecked, ())
        check_rights(
            self.bootstrap_servers,
            [n for n in needs if n.name in unchecked],
            doing="read the pipeline's sources",
            security=self.kafka_security,
        )
        self._sources_checked.update(unchecked)

    def _start(self, starter: Callable[[], StreamingQuery]) -> StreamingQuery:
        """Start a query, remember how (for `restart`), and let it get going before the next.

        Spark starts a fresh Python process for each Python data source it plans (the
        streaming source's driver side among them) and gives it a fixed 10 s to connect
        back; several queries starting at once on a small, busy machine can miss that.
        Started one at a time, each after the one before has finished its first micro-batch
        (which, over a backlog, is the heavy one), they do not compete.

        The wait ends early when any query started so far has stopped: the runner's watch
        (which restarts or fails it) must see it at once, not after this one's first batch.
        """
        self.check_sources()
        query = starter()
        self.queries.append(query)
        self.starters[query.name] = starter
        deadline = time.monotonic() + self.init_wait_s
        next_report = 0.0
        while time.monotonic() < deadline and all(q.isActive for q in self.queries):
            if query.lastProgress is not None:
                break
            if self.on_wait is not None and time.monotonic() >= next_report:
                next_report = time.monotonic() + 1.0
                self.on_wait()
            time.sleep(0.1)
        return query

    def choose_mode(
        self,
        name: str,
        df: DataFrame,
        trigger: TriggerMode | str | None = None,
        *,
        finishes_on_driver: bool = False,
    ) -> TriggerMode:
        """How query *name* (writing *df*) runs: *trigger* (None: the context's), but in
        micro-batches when it asks for Real-Time Mode and cannot run in it, which is logged
        with the reason (`sparkiq.spark.realtime.realtime_refusal`)."""
        mode = self.trigger_mode if trigger is None else TriggerMode(trigger)
        if mode is TriggerMode.MICROBATCH:
            return mode
        builtin = self.kafka_connector is KafkaConnector.BUILTIN
        has_api = spark_has_realtime_mode()
        # (The plan only where it can tell more: analysing it costs a Python worker's start
        # with sparkiq's connector.)
        facts = plan_facts(df) if builtin and has_api else PlanFacts()
        partitions = sum(
            partition_count(self.bootstrap_servers, topic, security=self.kafka_security)
            for topic in facts.topics
        )
        reason = realtime_refusal(
            facts,
            spark_version=self.spark.version,
            has_realtime_api=has_api,
            builtin_connector=builtin,
            finishes_on_driver=finishes_on_driver,
            source_partitions=partitions,
            total_slots=self.spark.sparkContext.defaultParallelism,
            held_slots=sum(self._realtime_slots.values()),
        )
        if reason is not None:
            log.warning(
                "pipeline: query %r runs in micro-batches, not Real-Time Mode: %s", name, reason
            )
            return TriggerMode.MICROBATCH
        log.info(
            "pipeline: query %r runs in Real-Time Mode (batches of %s; %d task slots, one per "
            "source partition)",
            name,
            self.realtime_batch,
            partitions,
        )
        self._realtime_slots[name] = partitions
        return TriggerMode.REALTIME

    def _start_in(self, name: str, start: ModeStarter, mode: TriggerMode) -> StreamingQuery:
        """`_start` query *name* in *mode*; in micro-batches instead when Spark refuses it in
        Real-Time Mode as it starts (an operator it does not run there, say)."""
        self.mode_of_query[name] = mode
        query = self._start(lambda: start(mode))
        if mode is TriggerMode.REALTIME and not query.isActive:
            error = query.exception()
            text = "" if error is None else str(error)
            if is_realtime_refusal(text):
                log.warning(
                    "pipeline: query %r runs in micro-batches, not Real-Time Mode: Spark "
                    "refused it: %s",
                    name,
                    text.strip().splitlines()[0][:500],
                )
                self.queries.remove(query)
                self._realtime_slots.pop(name, None)
                return self._start_in(name, start, TriggerMode.MICROBATCH)
        return query

    def restart(self, query: StreamingQuery) -> StreamingQuery:
        """Start *query* (stopped) again from its checkpoint; the new query replaces it."""
        replacement = self.starters[query.name]()
        self.queries[self.queries.index(query)] = replacement
        return replacement

    def checkpoint(self, name: str) -> str:
        """The checkpoint directory of the query called *name*."""
        safe = _SAFE.sub("_", name)
        if isinstance(self.checkpoint_dir, Path):
            return str(self.checkpoint_dir / safe)
        return f"{self.checkpoint_dir.rstrip('/')}/{safe}"

    def read(
        self,
        *topics: str,
        starting_offsets: str = "earliest",
        max_offsets_per_trigger: int | None = None,
    ) -> DataFrame:
        """A streaming DataFrame of the records of *topics*: columns `KAFKA_COLUMNS` (key,
        value, topic, partition, offset, timestamp, timestampType, headers) with either
        connector.

        A micro-batch reads at most *max_offsets_per_trigger* records (None: the context's,
        ``sparkiq run --max-offsets-per-trigger``): more, say, for a query whose trigger
        interval is longer than the others', so a backlog does not hold it to fewer records
        per second than they go. In a run in Real-Time Mode (``--trigger realtime``) None is
        no cap: Spark's Kafka source refuses one there, and a query whose read has one runs
        in micro-batches (pass the cap for a query that runs in micro-batches anyway)."""
        if not topics:
            raise ConfigError("read() needs at least one topic")
        if max_offsets_per_trigger is not None and max_offsets_per_trigger < 1:
            raise ConfigError(
                f"max_offsets_per_trigger must be at least 1, got {max_offsets_per_trigger}"
            )
        self.sources.update(topics)
        cap = max_offsets_per_trigger or self._default_cap()
        source = source_options(
            self.kafka_connector,
            bootstrap_servers=self.bootstrap_servers,
            topics=topics,
            starting_offsets=starting_offsets,
            max_offsets_per_trigger=cap,
            security=self.kafka_security,
            # A capped read runs in micro-batches whatever the run's trigger.
            micro_batches=self.trigger_mode is not TriggerMode.REALTIME or cap is not None,
        )
        return self.spark.readStream.format(source.format).options(**source.options).load()

    def _default_cap(self) -> int | None:
        """The cap of a read that names none: the context's, in micro-batch runs only."""
        if self.trigger_mode is TriggerMode.REALTIME:
            return None
        return self.max_offsets_per_trigger

    def write(
        self,
        df: DataFrame,
        *,
        name: str,
        topic: str | None = None,
        output_mode: str = "append",
        tables: Sequence[TableDef] = (),
        trigger_interval: str | None = None,
        finish: Finish | None = None,
        finish_rows: Column | None = None,
        trigger: TriggerMode | str | None = None,
    ) -> StreamingQuery:
        """Start a query writing *df* (columns key, value, optional topic/partition) to Kafka.

        A query that writes the changelogs of *tables* itself (a ``topic`` column naming
        them, see `changelog_columns`) names them, so reads of those tables can wait for
        what it committed (``after_source``); the records of a windowed one among them go
        to the partition of their key part (all windows of a key where a lookup of the key
        goes) unless a ``partition`` column already says where. *trigger_interval* is this
        query's (``"0 seconds"``: each micro-batch as soon as the last ends); None: the
        pipeline's (``sparkiq run --trigger``). *finish*, when given, is a step across
        rows that Spark does not run on a stream: it receives rows of each micro-batch
        collected on the driver (a pyarrow Table, every row where *finish_rows* holds and
        maybe others; every row when *finish_rows* is None) and returns the records to
        produce for them (see `sparkiq.spark.kafkawrite`). *trigger* is ``"realtime"`` or
        ``"microbatch"`` for this query (None: the pipeline's, ``sparkiq run --trigger``); a
        query with a *finish* step runs in micro-batches.
        """
        if tables:
            self.tables_of_query[name] = [t.name for t in tables]
        windowed = {t.topic: t.partitions for t in tables if t.is_windowed}
        builtin = self.kafka_connector is KafkaConnector.BUILTIN
        if builtin and windowed and ("topic" in df.columns or topic in windowed):
            df = with_window_partitions(df, windowed, topic)  # the JVM's sink hashes whole keys
        mode = self.choose_mode(name, df, trigger, finishes_on_driver=finish is not None)
        # Beside Spark's sink, sparkiq's producer for what the finishing step leaves on the
        # driver (`sparkiq.spark.kafkawrite`): the records placed as Spark's sink places them.
        driver_sink = (
            sink_options(
                KafkaConnector.PYTHON,
                bootstrap_servers=self.bootstrap_servers,
                topic=topic,
                windowed_topics=list(windowed),
                security=self.kafka_security,
            )
            if builtin and finish is not None
            else None
        )

        def start(mode: TriggerMode) -> StreamingQuery:
            # Built per mode: a query Spark refuses in Real-Time Mode starts again in
            # micro-batches (`_start_in`), whose writes take the micro-batch producer settings.
            sink = sink_options(
                self.kafka_connector,
                bootstrap_servers=self.bootstrap_servers,
                topic=topic,
                windowed_topics=list(windowed),
                security=self.kafka_security,
                micro_batches=mode is TriggerMode.MICROBATCH,
            )
            return start_kafka_write(
                df,
                name=name,
                sink=sink,
                checkpoint_location=self.checkpoint(name),
                output_mode=output_mode,
                trigger_interval=trigger_interval or self.trigger_interval,
                finish=finish,
                finish_rows=finish_rows,
                realtime_batch=self.realtime_batch if mode is TriggerMode.REALTIME else None,
                driver_sink=driver_sink,
            )

        return self._start_in(name, start, mode)

    def create_topics(self, *topics: str, partitions: int = 6) -> None:
        """Create the output topics that do not exist yet (existing ones are left alone)."""
        for topic in topics:
            create_topic(
                self.bootstrap_servers,
                topic,
                partitions,
                exist_ok=True,
                security=self.kafka_security,
            )

    def prepare_table(self, table: TableDef) -> None:
        """Create *table*'s changelog topic and register it (for hand-written changelogs)."""
        prepare_table(self.bootstrap_servers, table, app=self.app, security=self.kafka_security)

    def materialize(
        self,
        df: DataFrame,
        *,
        table: str,
        key: str | Column,
        trigger: TriggerMode | str | None = None,
        **options: Any,
    ) -> StreamingQuery | None:
        """`sparkiq.spark.materialize` with this pipeline's broker, catalog and checkpoints.

        A batch *df* (reference data, e.g. a global table's rows) is written once, before
        this returns None; a streaming one starts the table's query, in Real-Time Mode or
        micro-batches as *trigger* says (None: the pipeline's; see `write`).
        """
        options.setdefault("trigger_interval", self.trigger_interval)
        options.setdefault("app", self.app)
        options.setdefault("kafka_security", self.kafka_security)
        options.setdefault("connector", self.kafka_connector)

        def write(mode: TriggerMode = TriggerMode.MICROBATCH) -> StreamingQuery | None:
            return materialize(
                df,
                table=table,
                key=key,
                bootstrap_servers=self.bootstrap_servers,
                checkpoint_location=self.checkpoint(f"table-{table}"),
                realtime_batch=self.realtime_batch if mode is TriggerMode.REALTIME else None,
                **options,
            )

        if not df.isStreaming:
            return write()
        name = f"table {table}"  # the query `materialize` names
        self.tables_of_query[name] = [table]
        mode = self.choose_mode(name, df, trigger)
        return self._start_in(name, lambda m: _started(write(m)), mode)


def _started(query: StreamingQuery | None) -> StreamingQuery:
    if query is None:  # materialize starts a query for every streaming DataFrame
        raise ConfigError("materialize started no query for a streaming DataFrame")
    return query


def load_pipeline(path: Path) -> PipelineFn:
    """The ``pipeline(ctx)`` function of the pipeline file at *path*."""
    if not path.is_file():
        raise ConfigError(f"pipeline file {str(path)!r} does not exist")
    module_name = f"sparkiq_pipeline_{_SAFE.sub('_', path.stem)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load {str(path)!r} as Python: is it a .py file?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"pipeline file {str(path)!r} failed to load: {exc!r}") from exc
    # Spark's Python workers cannot import a file loaded by path: the functions it defines
    # (UDFs, applyInPandasWithState callbacks) travel to them by value instead.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    fn = getattr(module, "pipeline", None)
    if not callable(fn):
        raise ConfigError(
            f"pipeline file {str(path)!r} must define a function pipeline(ctx) that starts "
            "its streaming queries through ctx (ctx.read, ctx.write, ctx.materialize)"
        )
    pipeline_fn: PipelineFn = fn
    return pipeline_fn
