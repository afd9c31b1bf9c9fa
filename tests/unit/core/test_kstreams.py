"""Kafka Streams changelogs: record keys split as Kafka Streams writes them (big-endian bytes
built by hand here), serdes mapped or refused by name, store tables defined, Schema Registry
framed Avro read."""

from __future__ import annotations

import io

import fastavro
import orjson
import pytest

from sparkiq.core.errors import CatalogError, FormatError
from sparkiq.core.formatcheck import SampledRecord, check_formats
from sparkiq.core.kstreams import (
    SessionKeys,
    StoreType,
    changelog_topic,
    format_of_serde,
    kstreams_table,
    session_changelog_key,
    split_avro_sr,
    split_session_changelog_key,
    split_window_changelog_key,
    stored_value,
    window_changelog_key,
    window_end_and_value,
)
from sparkiq.core.serde import split_window_store_key, window_store_key
from sparkiq.core.tables import Format, TableDef, TableKind, WindowLayout
from sparkiq.core.value_codecs import value_codec
from sparkiq.node.restore.batches import store_key_fn
from tests.support import kstreamstables as kstreams_tables
from tests.support.kstreamstables import be

START = 1_764_000_000_000  # 2025-11-24, ms
END = START + 4_321


def window_table(**kw: object) -> TableDef:
    args: dict[str, object] = {
        "application_id": "shop",
        "store": "clicks",
        "store_type": StoreType.TIMESTAMPED_WINDOW,
        "partitions": 4,
        "key_serde": "string",
        "value_serde": "long",
        "window_size_ms": 10_000,
    }
    args.update(kw)
    return kstreams_table("clicks", **args)  # type: ignore[arg-type]


def session_table() -> TableDef:
    return kstreams_tables.session_table(retention_ms=86_400_000)


def test_changelog_topic_is_application_id_store_changelog() -> None:
    assert changelog_topic("shop-v2", "clicks.per_10s") == "shop-v2-clicks.per_10s-changelog"
    with pytest.raises(CatalogError, match="application id"):
        changelog_topic("a b", "s")


def test_window_changelog_keys_are_key_start_and_sequence_number() -> None:
    wire = b"alice" + be(START, 8) + be(3, 4)
    assert split_window_changelog_key(wire) == (b"alice", START, 3)
    assert window_changelog_key(b"alice", START, 3) == wire
    assert split_window_changelog_key(be(START, 8) + be(0, 4)) == (b"", START, 0)
    with pytest.raises(FormatError, match="not a Kafka Streams window store"):
        split_window_changelog_key(b"short")


def test_session_changelog_keys_are_key_end_and_start() -> None:
    wire = b"bob" + be(END, 8) + be(START, 8)
    assert split_session_changelog_key(wire) == (b"bob", END, START)
    assert session_changelog_key(b"bob", END, START) == wire
    with pytest.raises(FormatError, match="session"):
        split_session_changelog_key(b"x" * 15)


@pytest.mark.parametrize(
    ("serde", "fmt"),
    [
        ("String", Format.STRING),
        ("long", Format.LONG),
        ("Integer", Format.INT),
        ("json", Format.JSON),
        ("avro", Format.AVRO_SR),
        ("ByteArray", Format.BYTES),
    ],
)
def test_common_serdes_map_to_formats(serde: str, fmt: Format) -> None:
    assert format_of_serde(serde, "value") is fmt


@pytest.mark.parametrize("serde", ["double", "uuid", "protobuf", "MyCustomSerde"])
def test_serdes_that_cannot_be_served_are_refused_by_name(serde: str) -> None:
    with pytest.raises(CatalogError, match=f"value serde '{serde}'.*cannot be served"):
        format_of_serde(serde, "value")


def test_avro_keys_are_refused_with_the_reason() -> None:
    with pytest.raises(CatalogError, match="schema id"):
        format_of_serde("avro", "key")
    with pytest.raises(CatalogError, match="avro-sr"):
        TableDef("t", "t", 1, key_format=Format.AVRO_SR)


def test_store_types_make_kv_window_and_session_tables() -> None:
    kv = kstreams_table(
        "profiles", application_id="shop", store="profiles",
        store_type=StoreType.TIMESTAMPED_KV, partitions=4, key_serde="string",
        value_serde="json", retention_ms=5,
    )  # fmt: skip
    assert (kv.topic, kv.kind, kv.retention_ms) == ("shop-profiles-changelog", TableKind.KV, None)
    assert kv.window_layout is WindowLayout.SPARKIQ
    clicks = window_table()
    assert (clicks.kind, clicks.window_layout) == (TableKind.WINDOWED, WindowLayout.KSTREAMS_WINDOW)
    assert (clicks.key_format, clicks.value_format) == (Format.STRING, Format.LONG)
    sessions = session_table()
    assert sessions.has_session_ends
    assert sessions.window_size_ms is None
    assert TableDef.from_json(sessions.to_json()) == sessions
    assert sessions.summary()["window_layout"] == "kstreams-session"
    with pytest.raises(CatalogError, match="window size"):
        window_table(window_size_ms=None)


def test_the_partition_key_of_a_window_key_drops_the_window() -> None:
    assert window_table().key_of_window_key(window_changelog_key(b"k1", START)) == b"k1"
    assert session_table().key_of_window_key(session_changelog_key(b"k1", END, START)) == b"k1"


def test_a_window_ends_after_its_size_a_session_where_its_stored_value_says() -> None:
    assert window_end_and_value(window_table(), START, b"v") == (START + 10_000, b"v")
    assert window_end_and_value(session_table(), START, be(END, 8) + b"v") == (END, b"v")


def test_store_keys_of_window_and_session_changelogs_are_key_and_start() -> None:
    window_fn = store_key_fn(window_table())
    assert window_fn is not None
    assert not isinstance(window_fn, SessionKeys)
    assert window_fn(window_changelog_key(b"k", START, 7)) == window_store_key(b"k", START)
    session_fn = store_key_fn(session_table())
    assert isinstance(session_fn, SessionKeys)
    wire = session_changelog_key(b"k", END, START)
    assert split_window_store_key(session_fn(wire)) == (b"k", START)
    assert stored_value(session_fn, wire, be(5, 8)) == be(END, 8) + be(5, 8)
    assert stored_value(session_fn, wire, None) is None
    assert stored_value(window_fn, wire, b"v") == b"v"


SCHEMA = {
    "type": "record",
    "name": "Profile",
    "fields": [{"name": "name", "type": "string"}, {"name": "visits", "type": "long"}],
}


def sr_framed(datum: dict[str, object], schema_id: int = 17) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), datum)
    return b"\x00" + be(schema_id, 4) + out.getvalue()


def test_schema_registry_framed_avro_values_decode_with_the_given_schema() -> None:
    table = TableDef(
        "p", "p", 1, value_format=Format.AVRO_SR, value_schema=orjson.dumps(SCHEMA).decode()
    )
    datum = {"name": "ann", "visits": 3}
    wire = sr_framed(datum)
    assert split_avro_sr(wire)[0] == 17
    codec = value_codec(table)
    assert codec.render(wire) == datum
    assert orjson.loads(codec.render_json(wire)) == datum
    with pytest.raises(FormatError, match="Schema Registry"):
        codec.render(wire[5:])
    findings = check_formats(table, [SampledRecord(0, 0, b"k", wire)])
    assert [f.ok for f in findings] == [True, True]
    bad = check_formats(table, [SampledRecord(0, 1, b"k", b"\x01garbage")])
    assert not bad[1].ok


def test_format_check_skips_the_window_of_kafka_streams_keys() -> None:
    records = [
        SampledRecord(0, 0, window_changelog_key(b"alice", START), be(2, 8)),
        SampledRecord(0, 1, window_changelog_key(b"bob", START, 1), None),
    ]
    key, value = check_formats(window_table(), records)
    assert key.ok
    assert value.ok
    assert key.checked == 2
