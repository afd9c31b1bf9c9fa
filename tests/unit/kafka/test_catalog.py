"""The catalog topic against Apache Kafka: register, drop, read to the true end, follow."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from sparkiq.core.errors import CatalogError, TopicNotFoundError
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.kafka.admin import create_topic, partition_count
from sparkiq.kafka.catalog import (
    CatalogWatcher,
    catalog_topic,
    drop_table,
    read_catalog,
    register_table,
)

Namer = Callable[[str], str]


def _table(name: str, topic: str, partitions: int = 3, **kw: object) -> TableDef:
    return TableDef(name=name, topic=topic, partitions=partitions, **kw)  # type: ignore[arg-type]


@pytest.fixture
def app(unique_name: Namer) -> str:
    return unique_name("app")


@pytest.fixture
def topic(bootstrap: str, unique_name: Namer) -> str:
    name = unique_name("changelog")
    create_topic(bootstrap, name, 3)
    return name


def test_register_and_read_round_trip(bootstrap: str, app: str, topic: str) -> None:
    orders = _table("orders", topic, key_format=Format.LONG, description="orders by id")
    windows = _table("clicks-per-minute", topic, kind=TableKind.WINDOWED, window_size_ms=60_000)
    register_table(bootstrap, orders, app=app)
    register_table(bootstrap, windows, app=app)
    assert read_catalog(bootstrap, app=app) == {"orders": orders, "clicks-per-minute": windows}
    # The catalog topic was created compacted with one partition.
    assert partition_count(bootstrap, catalog_topic(app)) == 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, catalog_topic(app))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"

    # Registering again replaces the definition: the last record wins.
    changed = _table("orders", topic, key_format=Format.STRING)
    register_table(bootstrap, changed, app=app)
    assert read_catalog(bootstrap, app=app)["orders"] == changed


def test_drop_writes_a_tombstone(bootstrap: str, app: str, topic: str) -> None:
    register_table(bootstrap, _table("a", topic), app=app)
    register_table(bootstrap, _table("b", topic), app=app)
    drop_table(bootstrap, "a", app=app)
    assert set(read_catalog(bootstrap, app=app)) == {"b"}
    drop_table(bootstrap, "never-registered", app=app)  # harmless
    assert set(read_catalog(bootstrap, app=app)) == {"b"}


def test_empty_catalog_reads_empty(bootstrap: str, app: str) -> None:
    assert read_catalog(bootstrap, app=app) == {}


def test_wrong_partition_count_is_refused(bootstrap: str, app: str, topic: str) -> None:
    with pytest.raises(CatalogError, match=r"has 3 partitions .* register it with partitions=3"):
        register_table(bootstrap, _table("t", topic, partitions=6), app=app)
    assert read_catalog(bootstrap, app=app) == {}


def test_missing_topic_is_refused(bootstrap: str, app: str, unique_name: Namer) -> None:
    missing = unique_name("nope")
    with pytest.raises(TopicNotFoundError, match=f"{missing}.*create it with 4 partitions"):
        register_table(bootstrap, _table("t", missing, partitions=4), app=app)


def test_invalid_records_are_skipped_with_a_warning(
    any_bootstrap: str, app: str, unique_name: Namer, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = any_bootstrap
    topic = unique_name("cat-src")
    create_topic(bootstrap, topic, 3)
    good = _table("good", topic)
    register_table(bootstrap, good, app=app)
    delivered: list[tuple[bytes | None, str | None]] = []
    producer = Producer({"bootstrap.servers": bootstrap})

    def report(err: object, msg: object) -> None:
        delivered.append((msg.key(), None if err is None else str(err)))  # type: ignore[attr-defined]

    producer.produce(catalog_topic(app), key=b"junk", value=b"{not json", on_delivery=report)
    assert producer.flush(10) == 0
    producer.produce(
        catalog_topic(app), key=b"other", value=_table("x", topic).to_json(), on_delivery=report
    )
    assert producer.flush(10) == 0
    # Apache Kafka refuses a keyless record on a compacted topic; the dev broker takes it.
    producer.produce(catalog_topic(app), key=None, value=good.to_json(), on_delivery=report)
    assert producer.flush(10) == 0
    assert delivered[:2] == [(b"junk", None), (b"other", None)]
    with caplog.at_level(logging.WARNING, logger="sparkiq.kafka.catalog"):
        assert read_catalog(bootstrap, app=app) == {"good": good}
    assert "not a valid table definition" in caplog.text
    assert "keyed 'other' but defines table 'x'" in caplog.text


def test_read_sees_every_record_of_the_last_batch(
    any_bootstrap: str, app: str, unique_name: Namer
) -> None:
    """The dev broker under-reports the end offset; the tail of a batch must still be read."""
    bootstrap = any_bootstrap
    topic = unique_name("cat-tail")
    create_topic(bootstrap, topic, 3)
    tables = [_table(f"t{i}", topic) for i in range(10)]
    register_table(bootstrap, tables[0], app=app)  # creates the topic
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for t in tables[1:]:
        producer.produce(catalog_topic(app), key=t.name.encode(), value=t.to_json())
    assert producer.flush(10) == 0
    assert read_catalog(bootstrap, app=app) == {t.name: t for t in tables}


def test_watcher_starts_with_the_catalog_and_follows_changes(
    bootstrap: str, app: str, topic: str
) -> None:
    first = _table("first", topic)
    register_table(bootstrap, first, app=app)
    seen: list[dict[str, TableDef]] = []
    changed = threading.Event()

    def on_change(tables: dict[str, TableDef]) -> None:
        seen.append(tables)
        changed.set()

    watcher = CatalogWatcher(bootstrap, app=app, on_change=on_change)
    watcher.start()
    try:
        assert watcher.tables() == {"first": first}
        assert seen == [{"first": first}]

        changed.clear()
        second = _table("second", topic, value_format=Format.STRING)
        start = time.monotonic()
        register_table(bootstrap, second, app=app)
        deadline = start + 5
        while "second" not in watcher.tables() and time.monotonic() < deadline:
            changed.wait(0.1)
        assert watcher.tables() == {"first": first, "second": second}
        assert seen[-1] == {"first": first, "second": second}

        drop_table(bootstrap, "first", app=app)
        deadline = time.monotonic() + 5
        while "first" in watcher.tables() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.tables() == {"second": second}
        assert seen[-1] == {"second": second}
    finally:
        watcher.stop()
    watcher.stop()  # idempotent


def test_watcher_on_an_empty_catalog(bootstrap: str, app: str, topic: str) -> None:
    seen: list[dict[str, TableDef]] = []
    watcher = CatalogWatcher(bootstrap, app=app, on_change=seen.append)
    watcher.start()
    try:
        assert watcher.tables() == {}
        assert seen == []
        register_table(bootstrap, _table("late", topic), app=app)
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [set(s) for s in seen] == [{"late"}]
    finally:
        watcher.stop()
