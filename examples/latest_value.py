"""A minimal sparkiq pipeline: the latest value of every key of a topic, as a queryable table.

    sparkiq run examples/latest_value.py --bootstrap-servers HOST:PORT --checkpoint-dir ckpt \
        --param topic=events --param table=events-latest

Values are taken as JSON text; a record with a null value (a tombstone) deletes its key.
Records of one key share a partition, so the greatest offset is the latest record.
"""

from pyspark.sql import functions as F

from sparkiq.spark.pipeline import PipelineContext


def pipeline(ctx: PipelineContext) -> None:
    topic = ctx.params.get("topic", "events")
    table = ctx.params.get("table", f"{topic}-latest")
    records = ctx.read(topic).select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "offset",
    )
    latest = (
        records.where(F.col("key").isNotNull())
        .groupBy("key")
        .agg(F.max_by("value", "offset").alias("value"))
    )
    ctx.materialize(
        latest,
        table=table,
        key="key",
        value="value",
        partitions=int(ctx.params.get("partitions", "3")),
    )
