"""The example pipeline files run as `sparkiq run` would run them, against Apache Kafka."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import read_catalog
from sparkiq.spark.pipeline import PipelineContext, load_pipeline
from tests.support.spark import read_topic

pytest_plugins = ["tests.support.spark"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.spark
def test_latest_value_example_keeps_the_last_record_of_every_key(
    spark: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, app = unique_name("events"), unique_name("ex")
    create_topic(bootstrap, topic, 3)
    rng = random.Random(3)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    expected: dict[bytes, bytes | None] = {}
    for i in range(600):
        key = f"k{rng.randrange(80)}".encode()
        value = None if rng.random() < 0.1 else b'{"n": %d}' % i
        producer.produce(topic, key=key, value=value)
        expected[key] = value
    assert producer.flush(30) == 0

    ctx = PipelineContext(
        spark=spark,
        bootstrap_servers=bootstrap,
        checkpoint_dir=tmp_path,
        app=app,
        trigger_interval=None,
        params={"topic": topic, "table": "latest", "partitions": "2"},
    )
    load_pipeline(EXAMPLES / "latest_value.py")(ctx)
    try:
        for query in ctx.queries:
            query.processAllAvailable()
    finally:
        for query in ctx.queries:
            query.stop()

    table = read_catalog(bootstrap, app=app)["latest"]
    latest = {m.key(): m.value() for m in read_topic(bootstrap, table.topic, 2)}
    assert latest == expected
    assert None in latest.values(), "deleted keys end with a tombstone"
