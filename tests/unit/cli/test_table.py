"""`sparkiq table create` against Apache Kafka: the partitioner it picks, and bad input."""

from __future__ import annotations

from collections.abc import Callable

from click.testing import CliRunner
from confluent_kafka import Producer

from sparkiq.cli.table import table
from sparkiq.core.partitioner import Partitioner, fnv1a_partition
from sparkiq.kafka.admin import create_topic, list_topics
from sparkiq.kafka.catalog import read_catalog

Namer = Callable[[str], str]


def create(bootstrap: str, app: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        table, ["create", *args, "--bootstrap-servers", bootstrap, "--app", app]
    )
    return result.exit_code, result.output


def test_auto_detects_the_partitioner_and_prints_the_evidence(
    bootstrap: str, unique_name: Namer
) -> None:
    app, topic = unique_name("cliapp"), unique_name("fnv")
    create_topic(bootstrap, topic, 5)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(400):
        key = f"user-{i}".encode()
        producer.produce(topic, key=key, value=b"{}", partition=fnv1a_partition(key, 5))
    assert producer.flush(30) == 0
    code, out = create(bootstrap, app, "users", "--topic", topic)
    assert code == 0, out
    assert "partitioner fnv1a: fnv1a: 400 of 400 sampled records in place; murmur2: " in out
    assert "partitioner fnv1a" in out.splitlines()[-1]
    assert read_catalog(bootstrap, app=app)["users"].partitioner is Partitioner.FNV1A


def test_an_empty_topic_says_it_could_not_tell_and_registers_murmur2(
    bootstrap: str, unique_name: Namer
) -> None:
    app, topic = unique_name("cliapp"), unique_name("empty")
    create_topic(bootstrap, topic, 3)
    code, out = create(bootstrap, app, "empty", "--topic", topic)
    assert code == 0, out
    assert "could not be told" in out
    assert read_catalog(bootstrap, app=app)["empty"].partitioner is Partitioner.MURMUR2


def test_a_named_partitioner_is_registered_without_sampling(
    bootstrap: str, unique_name: Namer
) -> None:
    app, topic = unique_name("cliapp"), unique_name("named")
    create_topic(bootstrap, topic, 3)
    code, out = create(bootstrap, app, "named", "--topic", topic, "--partitioner", "any")
    assert code == 0, out
    assert "sampling" not in out
    assert read_catalog(bootstrap, app=app)["named"].partitioner is Partitioner.ANY


def test_an_unknown_partitioner_is_a_usage_error_listing_the_choices(
    bootstrap: str, unique_name: Namer
) -> None:
    code, out = create(bootstrap, unique_name("cliapp"), "t", "--topic", "x", "--partitioner", "x")
    assert code == 2
    assert "'auto', 'murmur2', 'crc32', 'fnv1a', 'any'" in out


def test_a_missing_topic_is_a_clear_error_and_registers_nothing(
    bootstrap: str, unique_name: Namer
) -> None:
    app, topic = unique_name("cliapp"), unique_name("missing")
    code, out = create(bootstrap, app, "ghost", "--topic", topic)
    assert code == 2
    assert f"topic {topic!r} does not exist" in out
    assert read_catalog(bootstrap, app=app) == {}
    assert topic not in list_topics(bootstrap)  # not created on the way


def test_global_and_retention_tables_are_registered_with_their_kind_and_retention(
    bootstrap: str, unique_name: Namer
) -> None:
    app, stores, sales = unique_name("cliapp"), unique_name("stores"), unique_name("sales")
    create_topic(bootstrap, stores, 2)
    create_topic(bootstrap, sales, 2, config={"cleanup.policy": "compact"})
    code, out = create(bootstrap, app, "stores", "--topic", stores, "--kind", "global")
    assert code == 0, out
    args = ["--kind", "windowed", "--window-size-ms", "60000", "--retention", "1h"]
    code, out = create(bootstrap, app, "sales", "--topic", sales, *args)
    assert code == 0, out
    assert f"note: topic {sales!r} (cleanup.policy=compact) keeps its records for good" in out
    tables = read_catalog(bootstrap, app=app)
    assert tables["stores"].is_global
    assert (tables["sales"].retention_ms, tables["sales"].window_size_ms) == (3_600_000, 60_000)
    listed = CliRunner().invoke(table, ["list", "--bootstrap-servers", bootstrap, "--app", app])
    assert "kind=global" in listed.output
    assert "retention_ms=3600000" in listed.output


def test_a_retention_on_a_table_that_is_not_windowed_is_refused(
    bootstrap: str, unique_name: Namer
) -> None:
    app, topic = unique_name("cliapp"), unique_name("kv")
    create_topic(bootstrap, topic, 1)
    code, out = create(bootstrap, app, "kv", "--topic", topic, "--retention", "1h")
    assert code == 2
    assert "only windowed tables take a retention" in out
    code, out = create(bootstrap, app, "kv", "--topic", topic, "--retention", "soon")
    assert code == 2
    assert "cannot read the duration 'soon'" in out
    assert read_catalog(bootstrap, app=app) == {}
