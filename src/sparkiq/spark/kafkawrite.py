"""Streaming queries and batch writes into Kafka, through Spark's sink or sparkiq's.

Spark's built-in ``kafka`` sink is given the DataFrame as it is (the JVM produces; no Python
worker). With the `sparkiq-kafka` sink a streaming query writes each micro-batch from
``foreachBatch``: every record is acknowledged before the batch ends, so Spark commits the
batch only after Kafka has it, and a failed batch is written again on restart (at least
once). This path serves any output mode, and it starts no Python process per micro-batch:
Spark runs the commit of a Python data source sink in a fresh Python process each time,
which costs seconds per batch on a busy machine.

Where a micro-batch is produced (`BatchProducer`): a large one by the executors' Python
workers (``mapInArrow`` over the batch, the sink's producing code in each task), so records
stream from the query to Kafka as they are computed. A small one, when Spark runs in local
mode, from the driver's own Python process (the batch collected as Arrow): the executors are
the driver's JVM then, and the Python worker's round trip costs a micro-batch of a few
records ~60 ms of the ~300 it takes (a table's freshness is made of those). The batch's
size is known before it runs, from the query's offset log (`sparkiq.spark.offsetlog`).

A query can give a *finish* function, a step across rows that Spark does not run on a
stream (the loyalty notifications' running totals of the point-of-sale example), and the
rows it needs (*finish_rows*, a few per micro-batch). Those rows are collected on the
driver as Arrow, passed through *finish*, and what it returns is produced; the other rows
are produced as above, by the executors' tasks in the same pass over the micro-batch (which
hand the finishing rows back instead of producing them), or from the driver when the batch
is small.

A query with a finishing step that writes through Spark's own sink (which cannot hand rows
back) gives a *driver_sink* as well, sparkiq's options for the same broker: its small
micro-batches are then collected whole in one Spark job, finished and produced from the
driver by sparkiq's producer, where Spark's sink took three jobs (the batch kept in memory
and written, its finishing rows collected, the finished rows written again) and ~175 ms of
planning and Python around them on two cores (`bench_pipeline.py`, the tables' query at 50
invoices/s); its large ones keep Spark's sink for the rows the step does not need.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sparkiq.core.errors import ConfigError
from sparkiq.spark.batcherrors import without_frames
from sparkiq.spark.connector import KafkaIO
from sparkiq.spark.offsetlog import batch_records
from sparkiq.spark.options import FORMAT_NAME
from sparkiq.spark.sink import SinkOptions, new_producer, produce_batches

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Producer
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

# A micro-batch that reads at most this many records is produced from the driver in local
# mode: a few MB collected at most, and up to ~10 s of the demo's invoices.
DRIVER_MAX_RECORDS = 2_000

# A query's finishing step on the driver: a micro-batch's rows (an Arrow table) in, the
# records to produce out.
Finish = Callable[["pa.Table"], "pa.Table"]
FINISH_FLAG = "__sparkiq_finish"  # the column saying which rows go through `finish`


def start_kafka_write(
    df: DataFrame,
    *,
    name: str,
    sink: KafkaIO,
    checkpoint_location: str,
    output_mode: str = "append",
    trigger_interval: str | None = None,
    finish: Finish | None = None,
    finish_rows: Column | None = None,
    realtime_batch: str | None = None,
    driver_sink: KafkaIO | None = None,
) -> StreamingQuery:
    """Start a streaming query named *name* writing *df* (key, value[, topic]) to Kafka
    through *sink* (`sparkiq.spark.connector.sink_options`). With *finish*, the rows where
    *finish_rows* holds (every row when it is None) go through it on the driver before they
    are produced (`BatchProducer`; *driver_sink*: sparkiq's sink options to produce them
    there when *sink* is Spark's). With *realtime_batch* (a duration) the query runs in
    Spark's Real-Time Mode, batches that long, straight into Spark's Kafka sink
    (`sparkiq.spark.realtime` says which queries can)."""
    if realtime_batch is not None:
        if finish is not None or sink.format == FORMAT_NAME:
            raise ConfigError(
                f"query {name!r} cannot run in Real-Time Mode: it needs Spark's Kafka sink "
                "and no finishing step"
            )
        # Output mode update, the only one Real-Time Mode takes: for a stateless query the
        # same rows as append. (PySpark's type stubs do not list `realTime` yet.)
        realtime: Any = df.writeStream.option("checkpointLocation", checkpoint_location)
        realtime = realtime.outputMode("update").queryName(name).trigger(realTime=realtime_batch)
        started: StreamingQuery = realtime.format(sink.format).options(**sink.options).start()
        return started
    if finish is not None:
        from pyspark.sql import functions as F

        df = df.withColumn(FINISH_FLAG, F.lit(True) if finish_rows is None else finish_rows)
    writer = df.writeStream.option("checkpointLocation", checkpoint_location)
    writer = writer.outputMode(output_mode).queryName(name)
    if trigger_interval:
        writer = writer.trigger(processingTime=trigger_interval)
    if sink.format != FORMAT_NAME and finish is None:
        return writer.format(sink.format).options(**sink.options).start()
    local = (df.sparkSession.sparkContext.master or "").startswith("local")
    producer = BatchProducer(
        sink, checkpoint_location, local=local, finish=finish, driver_sink=driver_sink
    )
    return writer.foreachBatch(producer).start()


class BatchProducer:
    """The ``foreachBatch`` function of a query writing to Kafka (see the module)."""

    def __init__(
        self,
        sink: KafkaIO,
        checkpoint_location: str,
        *,
        local: bool,
        driver_max_records: int = DRIVER_MAX_RECORDS,
        finish: Finish | None = None,
        driver_sink: KafkaIO | None = None,
    ) -> None:
        self.sink = sink
        # What the driver produces with: sparkiq's sink (the query's own, or *driver_sink*
        # beside Spark's); None: Spark's sink writes whatever the driver holds.
        self.driver_sink = sink if sink.format == FORMAT_NAME else driver_sink
        if self.driver_sink is not None and self.driver_sink.format != FORMAT_NAME:
            raise ConfigError(
                f"driver_sink must be {FORMAT_NAME}'s options, not {self.driver_sink.format}'s"
            )
        self.checkpoint_location = checkpoint_location
        self.local = local
        self.driver_max_records = driver_max_records
        self.finish = finish
        self.in_driver = 0  # micro-batches produced from the driver so far
        self.by_executors = 0
        # The query's own producer: Spark calls the functions of different queries from
        # different threads, and a shared producer's flush would wait for the other's records.
        self._producer: Producer | None = None

    def produces_in_driver(self, batch_id: int) -> bool:
        """Whether micro-batch *batch_id* is produced from the driver (see the module)."""
        if not self.local or self.driver_sink is None:
            return False
        records = batch_records(self.checkpoint_location, batch_id)
        return records is not None and records <= self.driver_max_records

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from py4j.protocol import Py4JJavaError

        try:
            self._write(batch, batch_id)
        except Py4JJavaError as error:
            # Its JVM stack trace would overflow Spark's check of whether the query's stop
            # cut it off (`sparkiq.spark.batcherrors`).
            raise without_frames(error) from None

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        if self.produces_in_driver(batch_id):
            records = batch.toArrow()
            if self.finish is not None:
                records = self.finish(records.drop_columns([FINISH_FLAG]))
            self._produce(records, batch)
            self.in_driver += 1
            return
        self.by_executors += 1
        if self.finish is None:
            write_kafka_once(batch, self.sink)
            return
        self._produce(self.finish(produce_all_but_flagged(batch, self.sink)), batch)

    def close(self) -> None:
        """Flush and let go of the query's own producer (a later micro-batch makes a new
        one): Spark keeps a ``foreachBatch`` function, and so this object, as long as its
        session, after the query has stopped."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(10.0)

    def _produce(self, records: pa.Table, batch: DataFrame) -> None:
        """Produce *records*, collected on the driver (of *batch*), every one acknowledged."""
        if self.driver_sink is None:
            write_kafka_once(batch.sparkSession.createDataFrame(records), self.sink)
            return
        from pyspark.sql.pandas.types import from_arrow_schema

        options = SinkOptions.parse(self.driver_sink.options, from_arrow_schema(records.schema))
        if self._producer is None:
            self._producer = new_producer(options)
        produce_batches(options, records.to_batches(), self._producer)


def produce_all_but_flagged(batch: DataFrame, sink: KafkaIO) -> pa.Table:
    """Produce the rows of *batch* whose `FINISH_FLAG` is false from the executors (every
    record acknowledged before this returns); return the flagged ones, without the flag, as
    one Arrow table on the driver."""
    from pyspark.sql import functions as F

    if sink.format != FORMAT_NAME:
        # Spark's own sink cannot hand rows back: keep the batch for the second pass.
        batch.persist()
        try:
            rest = batch.where(~F.col(FINISH_FLAG)).drop(FINISH_FLAG)
            rest.write.format(sink.format).options(**sink.options).save()
            return batch.where(F.col(FINISH_FLAG)).drop(FINISH_FLAG).toArrow()
        finally:
            batch.unpersist()
    kept_schema = batch.drop(FINISH_FLAG).schema
    options = SinkOptions.parse(sink.options, kept_schema)
    fn = functools.partial(produce_unflagged_partition, options)
    return batch.mapInArrow(fn, kept_schema).toArrow()


def produce_unflagged_partition(
    options: SinkOptions, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A task of `produce_all_but_flagged`: produce the unflagged rows, yield the others."""
    import pyarrow.compute as pc

    kept: list[pa.RecordBatch] = []

    def unflagged() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            flag = batch.column(FINISH_FLAG)
            rest = batch.drop_columns([FINISH_FLAG])
            kept.append(rest.filter(flag))
            yield rest.filter(pc.invert(flag))

    produce_batches(options, unflagged())
    yield from kept


def write_kafka_once(df: DataFrame, sink: KafkaIO) -> None:
    """Produce a batch DataFrame (key, value[, topic]) to Kafka through *sink* from the
    executors, every record acknowledged before this returns."""
    if sink.format != FORMAT_NAME:
        df.write.format(sink.format).options(**sink.options).save()
        return
    from pyspark.sql.types import LongType, StructField, StructType

    options = SinkOptions.parse(sink.options, df.schema)
    counted = StructType([StructField("records", LongType(), False)])
    df.mapInArrow(functools.partial(produce_partition, options), counted).collect()


def produce_partition(
    options: SinkOptions, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Produce one partition of a micro-batch; yield how many records Kafka acknowledged."""
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"records": [produce_batches(options, batches)]})
