"""Kafka for PySpark Structured Streaming on the Python Data Source API: `sparkiq-kafka`.

Spark's own Kafka connector is a JVM jar from Maven Central (`sparkiq install spark-kafka`;
`sparkiq.spark.connector` takes it where installed); where it cannot be had, sparkiq brings
its own, in Python: `KafkaDataSource` ties the streaming source (`source.py`) and the
streaming and batch sink (`sink.py`) to one format name, and `local_session` builds a
loopback-only SparkSession with it registered.

    spark = local_session()
    df = (spark.readStream.format("sparkiq-kafka")
          .option("bootstrap.servers", bootstrap).option("subscribe", "orders").load())
    df.writeStream.format("sparkiq-kafka").option("bootstrap.servers", bootstrap)
      .option("topic", "orders-copy").option("checkpointLocation", path).start()
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from sparkiq.spark.options import FORMAT_NAME
from sparkiq.spark.rangeread import SCHEMA
from sparkiq.spark.session import local_session, register_data_sources
from sparkiq.spark.sink import KafkaBatchWriter, KafkaStreamWriter, SinkOptions
from sparkiq.spark.source import KafkaStreamReader, SourceOptions

__all__ = [
    "FORMAT_NAME",
    "SCHEMA",
    "KafkaDataSource",
    "local_session",
    "register_data_sources",
]


class KafkaDataSource(DataSource):
    """The `sparkiq-kafka` format: a Kafka streaming source and a Kafka sink."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(SinkOptions.parse(self.options, schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return KafkaBatchWriter(SinkOptions.parse(self.options, schema))
