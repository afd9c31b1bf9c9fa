"""`sparkiq table` against Apache Kafka: the partitioner `create` picks, the formats it checks,
names it refuses to replace, and bad input."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from sparkiq.cli.table import table
from sparkiq.core.partitioner import Partitioner, fnv1a_partition
from sparkiq.dev.acls import Grant
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic, list_topics
from sparkiq.kafka.catalog import read_catalog
from sparkiq.kafka.rights import Operation, Resource
from sparkiq.kafka.roles import app_topics, table_create_needs
from tests.support.secured import SecuredKafka, grants_for

Namer = Callable[[str], str]


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


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


def test_a_named_partitioner_is_registered_without_detection(
    bootstrap: str, unique_name: Namer
) -> None:
    app, topic = unique_name("cliapp"), unique_name("named")
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, [(b"k1", b"{}"), (b"k2", b"{}")])
    code, out = create(bootstrap, app, "named", "--topic", topic, "--partitioner", "any")
    assert code == 0, out
    assert "sampled records in place" not in out  # the sample checked formats only
    assert "formats: 2 sampled keys decode as string, 2 values as json" in out
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


def drop(bootstrap: str, app: str, name: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        table, ["drop", name, "--bootstrap-servers", bootstrap, "--app", app]
    )
    return result.exit_code, result.output


def string_keys_json_values(bootstrap: str, unique_name: Namer, count: int = 60) -> str:
    topic = unique_name("accounts")
    create_topic(bootstrap, topic, 3)
    produce(
        bootstrap,
        topic,
        [(f"A{i:04d}".encode(), b'{"balance": %d}' % i) for i in range(count)]
        + [(b"A0000", None)],  # a tombstone has no value to check
    )
    return topic


def test_keys_that_do_not_decode_in_the_key_format_are_refused_with_counts_and_an_example(
    bootstrap: str, unique_name: Namer
) -> None:
    app = unique_name("cliapp")
    topic = string_keys_json_values(bootstrap, unique_name)
    code, out = create(bootstrap, app, "accounts", "--topic", topic, "--key-format", "long")
    assert code == 2, out
    assert (
        f"table 'accounts' not registered: 61 of 61 sampled keys of topic {topic!r} do not "
        "decode as long (e.g. partition " in out
    )
    assert (
        "a long is 8 bytes, got 5); write --key-format string (the sampled keys decode as "
        "string, bytes); or --force to register it anyway" in out
    )
    assert read_catalog(bootstrap, app=app) == {}


def test_values_that_do_not_decode_are_refused_and_force_registers_them_with_a_warning(
    bootstrap: str, unique_name: Namer
) -> None:
    app = unique_name("cliapp")
    topic = string_keys_json_values(bootstrap, unique_name)
    code, out = create(bootstrap, app, "ints", "--topic", topic, "--value-format", "int")
    assert code == 2, out
    assert "60 of 60 sampled values" in out  # the tombstone is not counted
    assert "write --value-format json (the sampled values decode as json, string, bytes)" in out
    assert read_catalog(bootstrap, app=app) == {}
    code, out = create(bootstrap, app, "ints", "--topic", topic, "--value-format", "int", "--force")
    assert code == 0, out
    assert "warning: 60 of 60 sampled values" in out
    assert "registered anyway (--force)" in out
    assert read_catalog(bootstrap, app=app)["ints"].value_format.value == "int"


def test_an_avro_schema_the_values_do_not_match_is_refused(
    bootstrap: str, unique_name: Namer, tmp_path: Path
) -> None:
    app = unique_name("cliapp")
    topic = string_keys_json_values(bootstrap, unique_name)
    schema = tmp_path / "value.avsc"
    schema.write_text('{"type": "record", "name": "A", "fields": [{"name": "b", "type": "long"}]}')
    args = ["--topic", topic, "--value-format", "avro", "--value-schema", str(schema)]
    code, out = create(bootstrap, app, "avro", *args)
    assert code == 2, out
    assert "do not decode as avro" in out
    schema.write_text("{not json")
    code, out = create(bootstrap, app, "avro", *args)
    assert code == 2, out
    assert "invalid value schema" in out
    assert read_catalog(bootstrap, app=app) == {}


def test_json_keys_written_with_spaces_are_refused_as_not_findable(
    bootstrap: str, unique_name: Namer
) -> None:
    app, topic = unique_name("cliapp"), unique_name("jsonkeys")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(b'{"id": 1}', b"{}"), (b'{"id":2}', b"{}")])
    code, out = create(bootstrap, app, "j", "--topic", topic, "--key-format", "json")
    assert code == 2, out
    assert "1 of 2 sampled keys" in out
    assert "JSON, but not compact" in out


def test_an_existing_name_is_refused_unless_replace_which_says_what_changed(
    bootstrap: str, unique_name: Namer
) -> None:
    app = unique_name("cliapp")
    topic = string_keys_json_values(bootstrap, unique_name)
    assert create(bootstrap, app, "accounts", "--topic", topic)[0] == 0
    code, out = create(bootstrap, app, "accounts", "--topic", topic, "--value-format", "string")
    assert code == 2, out
    assert (
        f"table 'accounts' exists (topic {topic!r}, key string, value json, kind kv); write "
        "--replace to replace it, or choose another name" in out
    )
    assert read_catalog(bootstrap, app=app)["accounts"].value_format.value == "json"
    args = ["--topic", topic, "--value-format", "string", "--replace", "--description", "x"]
    code, out = create(bootstrap, app, "accounts", *args)
    assert code == 0, out
    assert "table 'accounts' replaced: value_format json -> string; description '' -> 'x'" in out
    assert read_catalog(bootstrap, app=app)["accounts"].value_format.value == "string"


def test_dropping_a_table_the_catalog_lacks_is_an_error(bootstrap: str, unique_name: Namer) -> None:
    app = unique_name("cliapp")
    topic = string_keys_json_values(bootstrap, unique_name)
    assert create(bootstrap, app, "accounts", "--topic", topic)[0] == 0
    code, out = drop(bootstrap, app, "nosuch")
    assert code == 2
    assert f"no table 'nosuch' in the catalog of app {app!r} (its tables: accounts)" in out
    assert "dropped" not in out.replace("nothing dropped", "")
    code, out = drop(bootstrap, app, "accounts")
    assert (code, out.strip()) == (0, "table 'accounts' dropped from the catalog")
    assert read_catalog(bootstrap, app=app) == {}


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["drop", "t"],
        ["create", "t", "--topic", "t"],
    ],
    ids=["list", "drop", "create"],
)
def test_an_unreachable_broker_is_one_message_within_seconds_and_no_client_log(
    args: list[str],
) -> None:
    closed = free_port()  # nothing listens there
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkiq",
            "table",
            *args,
            "--bootstrap-servers",
            f"127.0.0.1:{closed}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"sparkiq: cannot reach a Kafka broker at 127.0.0.1:{closed} (127.0.0.1:{closed}: "
        "connection refused); check --bootstrap-servers (or SPARKIQ_BOOTSTRAP_SERVERS) and "
        "that the brokers run and listen there"
    ]
    assert took < 5.0


def test_a_windowed_table_without_its_window_length_says_which_option_gives_it(
    bootstrap: str, unique_name: Namer
) -> None:
    app = unique_name("cliapp")
    topic = string_keys_json_values(bootstrap, unique_name)
    code, out = create(bootstrap, app, "w", "--topic", topic, "--kind", "windowed")
    assert code == 2
    assert "--window-size-ms 60000" in out
    assert read_catalog(bootstrap, app=app) == {}


def test_create_without_the_rights_names_each_missing_one(
    secured_kafka: SecuredKafka, unique_name: Namer
) -> None:
    """On a secured cluster: a user that may read the topic but only read the catalog is
    refused before anything is sampled or written, with the right it lacks and how to grant
    it; given WRITE on the catalog, the same command registers the table."""
    app, topic = unique_name("tbl-acl"), unique_name("tbl-acl-topic")
    catalog = app_topics(app)[0]
    secured_kafka.create_topic(topic, 2)
    secured_kafka.create_topic(catalog, 1)
    secured_kafka.grant("tables", [Grant(Operation.READ, Resource.TOPIC, catalog)])
    config = ["--kafka-config", str(secured_kafka.config_file("tables"))]
    code, output = create(secured_kafka.bootstrap, app, "t", "--topic", topic, *config)
    assert code == 2
    assert f"cannot register table 't': principal User:tables may not READ topic {topic} " in output
    assert f"may not WRITE topic {catalog} (TOPIC_AUTHORIZATION_FAILED)" in output
    assert f"--operation Write --topic {catalog}" in output
    assert "sampling" not in output
    secured_kafka.grant("tables", grants_for(table_create_needs(app, topic)))
    code, output = create(secured_kafka.bootstrap, app, "t", "--topic", topic, *config)
    assert code == 0, output
    assert f"table 't' registered: topic {topic!r}, 2 partitions" in output
    assert secured_kafka.passwords["tables"] not in output
