"""`materialize`: a streaming DataFrame's updates become a registered, correctly keyed changelog."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.core.errors import ConfigError
from sparkiq.core.partitioner import partition_for
from sparkiq.core.serde import window_wire_key
from sparkiq.core.tables import Format, TableKind
from sparkiq.kafka.admin import create_topic, topic_config
from sparkiq.kafka.catalog import read_catalog
from sparkiq.spark.materialize import define_table, materialize, parse_duration_ms, prepare_table
from tests.support.spark import read_topic

pytest_plugins = ["tests.support.spark"]


def test_durations_are_read_in_the_units_people_write() -> None:
    assert parse_duration_ms("1 minute") == 60_000
    assert parse_duration_ms("30 seconds") == 30_000
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms("2 hours") == 7_200_000
    assert parse_duration_ms(250) == 250
    for bad in ("", "minute", "1.5 minutes", "3 fortnights", "0 seconds", -1):
        with pytest.raises(ConfigError):
            parse_duration_ms(bad)


def test_table_definitions_name_their_changelog_topic_and_kind() -> None:
    kv = define_table("latest", app="shop")
    assert (kv.topic, kv.kind, kv.partitions) == ("shop.table.latest", TableKind.KV, 6)
    windowed = define_table("sales", window_size="1 minute", key_format="long", partitions=3)
    assert windowed.kind is TableKind.WINDOWED
    assert windowed.window_size_ms == 60_000
    assert windowed.key_format is Format.LONG
    with pytest.raises(ConfigError, match="unknown format"):
        define_table("x", value_format="yaml")
    stores = define_table("stores", kind="global")
    assert stores.is_global
    assert stores.window_size_ms is None
    kept = define_table("sales", window_size="1 minute", retention="2 hours")
    assert (kept.kind, kept.retention_ms) == (TableKind.WINDOWED, 7_200_000)
    with pytest.raises(ConfigError, match="unknown table kind 'cube'"):
        define_table("x", kind="cube")
    with pytest.raises(ConfigError, match="needs window_size"):
        define_table("x", kind="windowed")


def test_a_retention_table_s_changelog_deletes_by_age_after_its_windows(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("keep")
    sales = define_table("sales", window_size="1 minute", retention="2 minutes", app=app)
    plain = define_table("plain", app=app)
    prepare_table(bootstrap, sales, app=app)
    prepare_table(bootstrap, plain, app=app)
    config = topic_config(bootstrap, sales.topic)
    assert config["cleanup.policy"] == "compact,delete"
    # The retention, the window and a day: never shorter than the retention.
    assert int(config["retention.ms"]) == 120_000 + 60_000 + 86_400_000
    assert topic_config(bootstrap, plain.topic)["cleanup.policy"] == "compact"
    assert read_catalog(bootstrap, app=app)["sales"].retention_ms == 120_000


def _produce(bootstrap: str, topic: str, rows: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for row in rows:
        producer.produce(topic, key=str(row["user"]).encode(), value=orjson.dumps(row))
    assert producer.flush(30) == 0


def _source(spark: Any, bootstrap: str, topic: str) -> Any:
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("sparkiq-kafka")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    schema = "user string, id long, amount long, ts long, closed boolean"
    return raw.select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select("r.*")


@pytest.mark.spark
def test_aggregate_updates_become_full_values_tombstones_and_a_catalog_entry(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    source, app = unique_name("mat-in"), unique_name("mat")
    create_topic(bootstrap, source, 2)
    rows = [
        {"user": f"u{i % 7}", "id": i, "amount": i, "ts": 0, "closed": i % 7 == 3 and i > 50}
        for i in range(100)
    ]
    _produce(bootstrap, source, rows)
    totals = (
        _source(spark, bootstrap, source)
        .groupBy("user")
        .agg(F.sum("amount").alias("total"), F.max("closed").alias("closed"))
    )
    query = materialize(
        totals.select("user", "total", "closed"),
        table="totals",
        key="user",
        value=F.struct("total"),
        deleted=F.col("closed"),
        bootstrap_servers=bootstrap,
        checkpoint_location=str(tmp_path / "cp"),
        partitions=3,
        app=app,
        trigger_interval=None,
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    table = read_catalog(bootstrap, app=app)["totals"]
    assert (table.topic, table.partitions, table.kind) == (f"{app}.table.totals", 3, TableKind.KV)
    records = read_topic(bootstrap, table.topic, 3)
    latest = {m.key(): m.value() for m in records}  # partition order keeps each key's order
    want: dict[bytes, bytes | None] = {}
    for user in {r["user"] for r in rows}:
        mine = [r for r in rows if r["user"] == user]
        closed = any(r["closed"] for r in mine)
        want[user.encode()] = (
            None if closed else orjson.dumps({"total": sum(r["amount"] for r in mine)})
        )
    assert latest == want
    assert None in latest.values(), "a closed user is deleted with a tombstone"
    for m in records:
        assert m.partition() == partition_for(m.key(), 3)  # type: ignore[arg-type]


@pytest.mark.spark
def test_windowed_tables_key_by_key_and_window_start_and_partition_by_key_alone(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    source, app = unique_name("win-in"), unique_name("win")
    create_topic(bootstrap, source, 2)
    rows = [
        {"user": "x", "id": i % 5 - 2, "amount": 1, "ts": 1_000_000 + i * 7_000, "closed": False}
        for i in range(60)
    ]
    _produce(bootstrap, source, rows)
    counts = (
        _source(spark, bootstrap, source)
        .withColumn("t", F.timestamp_millis("ts"))
        .groupBy("id", F.window("t", "1 minute"))
        .agg(F.count(F.lit(1)).alias("n"))
    )
    query = materialize(
        counts,
        table="per-minute",
        key="id",
        key_format="long",
        window="window",
        window_size="1 minute",
        value="n",
        value_format="long",
        bootstrap_servers=bootstrap,
        checkpoint_location=str(tmp_path / "cp"),
        partitions=4,
        app=app,
        trigger_interval=None,
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    table = read_catalog(bootstrap, app=app)["per-minute"]
    assert table.is_windowed
    assert table.window_size_ms == 60_000
    records = read_topic(bootstrap, table.topic, 4)
    got = {m.key(): struct.unpack(">q", m.value() or b"")[0] for m in records}
    want: dict[bytes, int] = {}
    for r in rows:
        key = window_wire_key(struct.pack(">q", r["id"]), r["ts"] // 60_000 * 60_000)
        want[key] = want.get(key, 0) + 1
    assert got == want
    for m in records:
        key = m.key() or b""
        assert m.partition() == partition_for(key[:-8], 4)
    assert {len(m.key() or b"") for m in records} == {16}
