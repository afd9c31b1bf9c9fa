"""`kafkawrite`: a streaming query's micro-batches reach Kafka whole, small ones from the driver,
the rows a query finishes on the driver through its finish step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Column
from pyspark.sql import functions as F

from sparkiq.core.errors import ConfigError
from sparkiq.core.partitioner import partition_for
from sparkiq.kafka.admin import create_topic
from sparkiq.spark.connector import KafkaConnector, sink_options
from sparkiq.spark.kafkawrite import FINISH_FLAG, BatchProducer
from tests.support.restore import produce
from tests.support.spark import read_topic

pytest_plugins = ["tests.support.spark"]


def _write_400(
    spark: Any,
    bootstrap: str,
    topics: tuple[str, str],
    checkpoint: str,
    values: Callable[[int], bytes],
    columns: list[Column],
    builtin: bool = False,
    **producer: Any,
) -> BatchProducer:
    """Produce 400 records (key k<i>, value *values(i)*) on two partitions of *topics[0]*,
    stream them in batches of 100 as *columns* through a `BatchProducer` (*producer*: its
    options; *builtin*: writing through Spark's sink) into *topics[1]* (3 partitions);
    return the producer once done."""
    source, sink = topics
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 3)
    produce(bootstrap, source, [(i % 2, f"k{i}".encode(), values(i)) for i in range(400)])
    writer = BatchProducer(
        sink_options(KafkaConnector.PYTHON, bootstrap_servers=bootstrap, topic=sink),
        checkpoint,
        **producer,
    )
    if builtin:  # Spark's sink, sparkiq's producer on the driver beside it
        writer = BatchProducer(
            sink_options(KafkaConnector.BUILTIN, bootstrap_servers=bootstrap, topic=sink),
            checkpoint,
            driver_sink=writer.sink,
            **producer,
        )
    query = (
        spark.readStream.format("sparkiq-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 100)
        .load()
        .select(*columns)
        .writeStream.option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .foreachBatch(writer)
        .start()
    )
    assert query.awaitTermination(180)
    writer.close()  # its producer would outlive the test's broker (Spark keeps the writer)
    return writer


@pytest.mark.spark
@pytest.mark.parametrize(("local", "driver_max", "in_driver"), [(True, 150, 3), (False, 150, 0)])
def test_batches_are_produced_whole_from_the_driver_when_small_and_local(
    spark: Any,
    bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    local: bool,
    driver_max: int,
    in_driver: int,
) -> None:
    sink = unique_name("kw-out")
    writer = _write_400(
        spark,
        bootstrap,
        (unique_name("kw-in"), sink),
        str(tmp_path / "cp"),
        lambda i: f"v{i}".encode(),
        [F.col("key"), F.upper(F.col("value").cast("string")).alias("value")],
        local=local,
        driver_max_records=driver_max,
    )
    # Four batches of 100: the first's size is unknown (no log before it), so the executors
    # produce it; the rest are small enough for the driver, in local mode only.
    assert (writer.in_driver, writer.by_executors) == (in_driver, 4 - in_driver)
    written = read_topic(bootstrap, sink, 3)
    assert sorted((m.key(), m.value()) for m in written) == sorted(
        (f"k{i}".encode(), f"V{i}".encode()) for i in range(400)
    )
    assert all(m.partition() == partition_for(m.key(), 3) for m in written)  # type: ignore[arg-type]


def test_a_batch_over_the_limit_or_of_unknown_size_goes_to_the_executors(tmp_path: Path) -> None:
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    for batch_id, end in ((0, 10), (1, 2_010), (2, 4_011)):
        (offsets / str(batch_id)).write_text(f'v1\n{{}}\n{{"t": {{"0": {end}}}}}')
    sink = sink_options(KafkaConnector.PYTHON, bootstrap_servers="127.0.0.1:9", topic="t")
    writer = BatchProducer(sink, str(tmp_path), local=True, driver_max_records=2_000)
    assert [writer.produces_in_driver(b) for b in (0, 1, 2, 3)] == [False, True, False, False]
    remote = BatchProducer(sink, str(tmp_path), local=False)
    assert not remote.produces_in_driver(1)
    # Spark's sink: from the driver only with sparkiq's producer beside it.
    spark_sink = sink_options(KafkaConnector.BUILTIN, bootstrap_servers="127.0.0.1:9", topic="t")
    assert not BatchProducer(spark_sink, str(tmp_path), local=True).produces_in_driver(1)
    beside = BatchProducer(spark_sink, str(tmp_path), local=True, driver_sink=sink)
    assert [beside.produces_in_driver(b) for b in (0, 1, 2)] == [False, True, False]
    with pytest.raises(ConfigError, match="driver_sink"):
        BatchProducer(spark_sink, str(tmp_path), local=True, driver_sink=spark_sink)


def _finish(table: pa.Table) -> pa.Table:
    """A step across rows: each flagged record's value gets the number of flagged rows it
    was given with; the others pass as they are."""
    flagged = table.column("mark").to_pylist()
    count = sum(1 for f in flagged if f)
    values = [
        b"F:%s/%d" % (v, count) if f else v
        for v, f in zip(table.column("value").to_pylist(), flagged, strict=True)
    ]
    out = table.drop_columns(["mark"])
    return out.set_column(out.schema.get_field_index("value"), "value", pa.array(values))


@pytest.mark.spark
@pytest.mark.parametrize(
    ("local", "builtin", "in_driver"), [(True, False, 3), (False, False, 0), (True, True, 3)]
)
def test_flagged_rows_of_a_batch_go_through_finish_together_on_the_driver(
    spark: Any,
    bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    local: bool,
    builtin: bool,
    in_driver: int,
) -> None:
    sink = unique_name("kwf-out")
    mark = (F.col("value").cast("string").cast("int") % 4) == 0
    writer = _write_400(
        spark,
        bootstrap,
        (unique_name("kwf-in"), sink),
        str(tmp_path / "cp"),
        lambda i: b"%d" % i,
        [F.col("key"), F.col("value"), mark.alias("mark"), mark.alias(FINISH_FLAG)],
        builtin=builtin,
        local=local,
        driver_max_records=150,
        finish=_finish,
    )
    # The first batch (size unknown) goes through the executors, which produce the
    # unflagged rows and hand the flagged ones to the driver (Spark's sink: the batch kept
    # for a second pass); small ones, in local mode, are produced whole from the driver.
    assert (writer.in_driver, writer.by_executors) == (in_driver, 4 - in_driver)
    written = {bytes(m.key() or b""): m.value() for m in read_topic(bootstrap, sink, 3)}
    assert len(written) == 400
    flagged = {k: v for k, v in written.items() if v is not None and v.startswith(b"F:")}
    assert len(flagged) == 100
    # Offsets run in two partitions, so a batch of 100 holds whichever 25 flagged rows
    # its offsets cover; every flagged value was finished with the others of its batch.
    counts = [int(v.rsplit(b"/", 1)[1]) for v in flagged.values()]
    assert sum(counts) / len(counts) > 1
    batches: dict[int, int] = {}
    for c in counts:
        batches[c] = batches.get(c, 0) + 1
    assert all(n % c == 0 for c, n in batches.items())  # c rows finished together, n/c times
    assert all(
        v == b"%d" % int(k[1:]) for k, v in written.items() if v is not None and k not in flagged
    )
