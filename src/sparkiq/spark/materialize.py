"""Turns a streaming DataFrame into a queryable table: `materialize(df, table=..., key=...)`.

A table's changelog is a keyed topic of full values (not deltas): each row the query emits
becomes the record ``key -> value`` and a null value a tombstone that deletes the key. With
output mode ``update`` an aggregation emits only the keys it changed in a micro-batch, each
with its whole new value, which is exactly a changelog. `materialize` creates the changelog
topic (compacted), registers the table in the catalog so every serving node starts serving
it, and starts the streaming query that writes it through Spark's built-in Kafka sink or the
`sparkiq-kafka` sink (`sparkiq.spark.connector`).

Keys are encoded as the serving tier reads them (`sparkiq.core.serde`): strings as UTF-8, longs
and ints big-endian, JSON keys as their text. A windowed table's record key is the key
bytes followed by the window start as an 8-byte big-endian millisecond count, and the
record is partitioned by the key bytes alone (the `sparkiq-kafka` sink's ``windowedKeys``
option; with the built-in sink a ``partition`` column computed by the JVM,
`sparkiq.spark.murmur2col`), so all windows of one key live in the partition a lookup of
that key goes to.

`changelog` gives the same ``key``/``value`` columns without starting a query, for a query
that writes a table and other topics at once (add a ``topic`` column and union them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from sparkiq.core.durations import parse_duration_ms
from sparkiq.core.errors import ConfigError
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.kafka.access import check_rights
from sparkiq.kafka.admin import create_topic, topic_exists
from sparkiq.kafka.catalog import DEFAULT_APP, register_table
from sparkiq.kafka.roles import pipeline_needs
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.spark.connector import KafkaConnector, sink_options
from sparkiq.spark.kafkawrite import start_kafka_write, write_kafka_once
from sparkiq.spark.murmur2col import murmur2_partition

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "changelog",
    "changelog_columns",
    "define_table",
    "materialize",
    "parse_duration_ms",
    "prepare_table",
    "start_kafka_write",
    "write_kafka_once",
]

# Changelog topics keep the latest record per key; tombstones are kept a day so a node
# restoring from scratch still sees recent deletes.
CHANGELOG_TOPIC_CONFIG = {"cleanup.policy": "compact", "delete.retention.ms": "86400000"}
# A windowed changelog with a retention keeps its records this much longer than the windows.
WINDOW_CHANGELOG_EXTRA_MS = 86_400_000


def changelog_topic_config(table: TableDef) -> dict[str, str]:
    """The topic settings of *table*'s changelog.

    A windowed table with a retention also deletes by age (``compact,delete``): its records
    are kept the retention, plus the window size (a window is timestamped when it starts
    and kept until it ends), plus a day, as Kafka Streams does for window stores, so a
    node restoring from scratch finds every window it still has to keep.
    """
    config = dict(CHANGELOG_TOPIC_CONFIG)
    if table.retention_ms is not None:
        keep = table.retention_ms + (table.window_size_ms or 0) + WINDOW_CHANGELOG_EXTRA_MS
        config["cleanup.policy"] = "compact,delete"
        config["retention.ms"] = str(keep)
    return config


def prepare_table(
    bootstrap_servers: str,
    table: TableDef,
    *,
    app: str = DEFAULT_APP,
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Create the changelog topic if it is missing and (re-)register the table in *app*."""
    # Look before creating: a changelog an admin made needs no right to create topics
    # (CreateTopics is refused without it even for a topic that exists).
    if not topic_exists(bootstrap_servers, table.topic, security=security):
        create_topic(
            bootstrap_servers,
            table.topic,
            table.partitions,
            config=changelog_topic_config(table),
            exist_ok=True,
            timeout_s=timeout_s,
            security=security,
        )
    # The rights the table's query and the registration need, named now rather than as a
    # refused write deep in a Spark task.
    check_rights(
        bootstrap_servers,
        pipeline_needs(app, (), (table.topic,)),
        doing=f"write table {table.name!r}",
        security=security,
    )
    register_table(bootstrap_servers, table, app=app, timeout_s=timeout_s, security=security)


def _col(c: str | Column) -> Column:
    from pyspark.sql import functions as F

    return F.col(c) if isinstance(c, str) else c


def _big_endian(number: Column, width: int) -> Column:
    """*number* as *width* big-endian two's-complement bytes (Kafka's Long/IntegerSerializer)."""
    from pyspark.sql import functions as F

    as_long = number.cast("long")
    if width == 4:
        as_long = as_long.bitwiseAND(F.lit(0xFFFFFFFF))
    # hex() of a long is its two's complement in 16 hex digits; pad short positives.
    return F.unhex(F.lpad(F.hex(as_long), width * 2, "0"))


def _key_bytes(key: Column, key_format: Format) -> Column:
    if key_format in (Format.STRING, Format.JSON):
        return key.cast("string").cast("binary")
    if key_format is Format.LONG:
        return _big_endian(key, 8)
    if key_format is Format.INT:
        return _big_endian(key, 4)
    if key_format is Format.BYTES:
        return key.cast("binary")
    raise ConfigError(
        f"materialize writes string, json, long, int or bytes keys, not {key_format.value}; "
        "encode the key yourself and use format 'bytes'"
    )


def _value_bytes(
    df: DataFrame, value: str | Column | None, exclude: set[str], fmt: Format
) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType, StructType

    if value is None:
        if fmt is not Format.JSON:
            raise ConfigError("without a value column the value is JSON of the other columns")
        rest = [c for c in df.columns if c not in exclude]
        if not rest:
            raise ConfigError("there is no column left to be the value; pass value=...")
        return F.to_json(F.struct(*[F.col(c) for c in rest])).cast("binary")
    column = _col(value)
    dtype = df.select(column).schema.fields[0].dataType
    if fmt is Format.JSON:
        if isinstance(dtype, (StringType, BinaryType)):
            return column.cast("binary")  # already JSON text
        if isinstance(dtype, StructType):
            return F.to_json(column).cast("binary")
        # A scalar: JSON-encode it inside an array, then take the element's text.
        return F.regexp_extract(F.to_json(F.array(column)), r"^\[(.*)\]$", 1).cast("binary")
    if fmt is Format.STRING:
        return column.cast("string").cast("binary")
    if fmt is Format.LONG:
        return _big_endian(column, 8)
    if fmt is Format.INT:
        return _big_endian(column, 4)
    if fmt is Format.BYTES:
        return column.cast("binary")
    raise ConfigError(f"materialize writes json, string, long, int or bytes values, not {fmt}")


def changelog_columns(
    df: DataFrame,
    table: TableDef,
    *,
    key: str | Column,
    value: str | Column | None = None,
    window: str | Column | None = None,
    deleted: Column | None = None,
) -> tuple[Column, Column]:
    """The binary ``key`` and ``value`` columns of *table*'s changelog records for *df*.

    *value* is a column (JSON text, a struct rendered as JSON, or a scalar for the other
    formats); by default every column but the key and window becomes a JSON object. A null
    value, or a row where *deleted* is true, is a tombstone. *window* names the window
    struct (``start``/``end``) of a windowed table.
    """
    from pyspark.sql import functions as F

    if table.is_windowed and window is None:
        raise ConfigError(f"table {table.name!r} is windowed: pass window=<window column>")
    if window is not None and not table.is_windowed:
        raise ConfigError(f"table {table.name!r} is not windowed but a window was given")
    exclude = {key} if isinstance(key, str) else set()
    if isinstance(window, str):
        exclude.add(window)
    key_bin = _key_bytes(_col(key), table.key_format)
    if window is not None:
        start_ms = F.unix_millis(_col(window).getField("start"))
        key_bin = F.concat(key_bin, _big_endian(start_ms, 8))
    value_bin = _value_bytes(df, value, exclude, table.value_format)
    if deleted is not None:
        value_bin = F.when(deleted, F.lit(None).cast("binary")).otherwise(value_bin)
    return key_bin.alias("key"), value_bin.alias("value")


def changelog(
    df: DataFrame,
    table: TableDef,
    *,
    key: str | Column,
    value: str | Column | None = None,
    window: str | Column | None = None,
    deleted: Column | None = None,
) -> DataFrame:
    """*df*'s rows as changelog records of *table*: columns ``key`` and ``value`` (binary).

    Rows with a null key are dropped (a changelog record needs a key). See
    `changelog_columns` for *value*, *window* and *deleted*.
    """
    from pyspark.sql import functions as F

    key_col, value_col = changelog_columns(
        df, table, key=key, value=value, window=window, deleted=deleted
    )
    return df.select(key_col, value_col).where(F.col("key").isNotNull())


def define_table(
    table: str,
    *,
    topic: str | None = None,
    partitions: int = 6,
    key_format: str = "string",
    value_format: str = "json",
    window_size: str | int | None = None,
    app: str = DEFAULT_APP,
    description: str = "",
    kind: str | None = None,
    retention: str | int | None = None,
) -> TableDef:
    """The definition of a table a pipeline writes (changelog topic ``<app>.table.<name>``).

    *kind* is ``kv``, ``windowed`` or ``global``; by default ``windowed`` when a
    *window_size* is given, else ``kv``. *retention* (windowed tables) is how long a window
    is kept after it ends, e.g. ``"1 hour"``.
    """
    try:
        kf, vf = Format(key_format), Format(value_format)
    except ValueError as exc:
        raise ConfigError(f"unknown format: {exc}") from exc
    window_ms = parse_duration_ms(window_size) if window_size is not None else None
    try:
        table_kind = TableKind(kind) if kind is not None else None
    except ValueError:
        kinds = ", ".join(k.value for k in TableKind)
        raise ConfigError(f"unknown table kind {kind!r}: use one of {kinds}") from None
    if table_kind is None:
        table_kind = TableKind.WINDOWED if window_ms else TableKind.KV
    if table_kind is TableKind.WINDOWED and window_ms is None:
        raise ConfigError(f"windowed table {table!r} needs window_size=..., e.g. '1 minute'")
    return TableDef(
        name=table,
        topic=topic or f"{app}.table.{table}",
        partitions=partitions,
        key_format=kf,
        value_format=vf,
        kind=table_kind,
        window_size_ms=window_ms,
        retention_ms=parse_duration_ms(retention) if retention is not None else None,
        description=description,
    )


def materialize(
    df: DataFrame,
    *,
    table: str,
    key: str | Column,
    bootstrap_servers: str,
    checkpoint_location: str,
    value: str | Column | None = None,
    window: str | Column | None = None,
    window_size: str | int | None = None,
    deleted: Column | None = None,
    topic: str | None = None,
    partitions: int = 6,
    key_format: str = "string",
    value_format: str = "json",
    app: str = DEFAULT_APP,
    output_mode: str = "update",
    trigger_interval: str | None = "1 second",
    description: str = "",
    kafka_security: KafkaSecurity = PLAINTEXT,
    connector: KafkaConnector = KafkaConnector.PYTHON,
    kind: str | None = None,
    retention: str | int | None = None,
    realtime_batch: str | None = None,
) -> StreamingQuery | None:
    """Write *df*'s updates as the changelog of table *table* and make it queryable.

    The changelog topic (default ``<app>.table.<table>``) is created with *partitions*
    partitions if it is missing, the table is registered in the catalog of *app*, and the
    returned query (named after the table) writes every update. Pass *window* (the window
    column of a ``groupBy(..., F.window(...))``) and *window_size* for a windowed table,
    and *retention* (e.g. ``"1 hour"``) to drop its windows that long after they end;
    ``kind="global"`` for a table every node holds whole. A batch (not streaming) *df*, say
    reference data for a global table, is written once before this returns None.
    The topic creation, the registration and the writers connect with *kafka_security*;
    *connector* (BUILTIN or PYTHON, `sparkiq.spark.connector`) is the sink that writes.
    With *realtime_batch* (a duration) the query runs in Spark's Real-Time Mode
    (`sparkiq.spark.realtime`), the records placed as in micro-batches.
    """
    definition = define_table(
        table,
        topic=topic,
        partitions=partitions,
        key_format=key_format,
        value_format=value_format,
        window_size=window_size,
        app=app,
        description=description,
        kind=kind,
        retention=retention,
    )
    if (window is not None) != definition.is_windowed:
        raise ConfigError("a windowed table needs both window=<column> and window_size=...")
    records = changelog(df, definition, key=key, value=value, window=window, deleted=deleted)
    if definition.is_windowed and connector is KafkaConnector.BUILTIN:
        records = with_key_part_partition(records, definition.partitions)
    prepare_table(bootstrap_servers, definition, app=app, security=kafka_security)
    sink = sink_options(
        connector,
        bootstrap_servers=bootstrap_servers,
        topic=definition.topic,
        windowed_keys=definition.is_windowed,
        security=kafka_security,
        micro_batches=realtime_batch is None,
    )
    if not df.isStreaming:
        write_kafka_once(records, sink)
        return None
    return start_kafka_write(
        records,
        name=f"table {table}",
        sink=sink,
        checkpoint_location=checkpoint_location,
        output_mode=output_mode,
        trigger_interval=trigger_interval,
        realtime_batch=realtime_batch,
    )


def with_key_part_partition(records: DataFrame, partitions: int) -> DataFrame:
    """Windowed changelog *records* with the ``partition`` of their key part (all but the
    last 8 bytes, the window start) under murmur2, computed in the JVM: the built-in sink
    would hash the whole key."""
    return _with_partition_of_key_part(records, lambda part: murmur2_partition(part, partitions))


def with_window_partitions(
    records: DataFrame, windowed: Mapping[str, int], topic: str | None = None
) -> DataFrame:
    """*records* whose rows to the windowed changelog topics of *windowed* (topic ->
    partitions) get the ``partition`` of their key part, as `with_key_part_partition`; the
    other rows keep theirs (or none: the partitioner's). A row's topic is its ``topic``
    column, else *topic* (the sink's)."""
    from pyspark.sql import functions as F

    row_topic = F.col("topic") if "topic" in records.columns else F.lit(topic)
    given = F.col("partition") if "partition" in records.columns else F.lit(None).cast("int")

    def partition_of(part: str) -> Column:
        partition = given
        for name, partitions in windowed.items():
            partition = F.when(
                given.isNull() & (row_topic == name), murmur2_partition(part, partitions)
            ).otherwise(partition)
        return partition.cast("int")

    return _with_partition_of_key_part(records, partition_of)


def _with_partition_of_key_part(
    records: DataFrame, partition_of: Callable[[str], Column]
) -> DataFrame:
    """*records* with ``partition`` set to *partition_of* the name of a column that holds
    each key's key part (the key without its 8-byte window start)."""
    from pyspark.sql import functions as F

    part = "__sparkiq_key_part"
    return (
        records.withColumn(part, F.expr("substring(key, 1, length(key) - 8)"))
        .withColumn("partition", partition_of(part))
        .drop(part)
    )
