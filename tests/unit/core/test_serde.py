"""Key/value formats: Kafka-compatible wire bytes, order-preserving store keys, clear errors."""

from __future__ import annotations

import json
import struct

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkiq.core.errors import FormatError, KeyFormatError
from sparkiq.core.serde import (
    key_codec,
    split_window_store_key,
    split_window_wire_key,
    window_store_key,
    window_wire_key,
)
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.core.value_codecs import value_codec

LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INTS = st.integers(min_value=-(2**31), max_value=2**31 - 1)

AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "region", "type": "string"},
            {"name": "blob", "type": ["null", "bytes"], "default": None},
        ],
    }
)


def table(key: Format = Format.STRING, value: Format = Format.JSON, **kw: object) -> TableDef:
    return TableDef(
        name="t", topic="t.changelog", partitions=3, key_format=key, value_format=value, **kw
    )  # type: ignore[arg-type]


# ---- long / int keys ------------------------------------------------------------------


def test_long_wire_is_kafka_long_serializer() -> None:
    codec = key_codec(table(Format.LONG))
    assert codec.parse_text("1") == b"\x00" * 7 + b"\x01"
    assert codec.parse_text("-1") == b"\xff" * 8
    assert codec.parse_text(str(2**63 - 1)) == b"\x7f" + b"\xff" * 7
    assert codec.parse_json(-(2**63)) == b"\x80" + b"\x00" * 7
    assert codec.parse_json("42") == struct.pack(">q", 42)
    assert codec.render(struct.pack(">q", -5)) == -5


def test_int_wire_is_kafka_integer_serializer() -> None:
    codec = key_codec(table(Format.INT))
    assert codec.parse_text("258") == b"\x00\x00\x01\x02"
    assert codec.parse_text("-2") == b"\xff\xff\xff\xfe"
    assert codec.render(b"\x80\x00\x00\x00") == -(2**31)


@given(st.lists(LONGS, min_size=1, max_size=50, unique=True))
def test_long_store_keys_sort_like_numbers(numbers: list[int]) -> None:
    codec = key_codec(table(Format.LONG))
    stores = [codec.wire_to_store(codec.parse_json(n)) for n in numbers]
    by_bytes = [codec.render(codec.store_to_wire(s)) for s in sorted(stores)]
    assert by_bytes == sorted(numbers)


@given(st.lists(INTS, min_size=1, max_size=50, unique=True))
def test_int_store_keys_sort_like_numbers(numbers: list[int]) -> None:
    codec = key_codec(table(Format.INT))
    stores = [codec.wire_to_store(codec.parse_json(n)) for n in numbers]
    assert [codec.render(codec.store_to_wire(s)) for s in sorted(stores)] == sorted(numbers)


@given(LONGS)
def test_long_text_round_trip(n: int) -> None:
    codec = key_codec(table(Format.LONG))
    wire = codec.parse_text(str(n))
    assert codec.store_to_wire(codec.wire_to_store(wire)) == wire
    assert codec.render(wire) == n


@pytest.mark.parametrize("text", ["abc", "", "1.5", "+1", " 1", "1_000", "٣", str(2**63), "0x10"])
def test_bad_long_text_names_the_format(text: str) -> None:
    with pytest.raises(KeyFormatError) as info:
        key_codec(table(Format.LONG)).parse_text(text)
    msg = str(info.value)
    assert f"key {text!r} is not a long" in msg
    assert "table 't' has long keys" in msg


def test_bad_int_json_names_the_format() -> None:
    codec = key_codec(table(Format.INT))
    for bad in (True, 1.0, None, 2**31, {"a": 1}):
        with pytest.raises(KeyFormatError, match="has int keys"):
            codec.parse_json(bad)


def test_long_wire_of_wrong_length_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="8 bytes"):
        key_codec(table(Format.LONG)).wire_to_store(b"\x00\x01")


# ---- string / bytes keys -------------------------------------------------------------


def test_string_keys_are_utf8_and_store_as_wire() -> None:
    codec = key_codec(table(Format.STRING))
    wire = codec.parse_text("zoë")
    assert wire == "zoë".encode()
    assert codec.wire_to_store(wire) == wire
    assert codec.render(wire) == "zoë"
    assert codec.render(b"\xff") == "\ufffd"
    with pytest.raises(KeyFormatError, match="has string keys"):
        codec.parse_json(7)
    with pytest.raises(KeyFormatError):
        codec.parse_text("\udcff")


@given(st.binary(max_size=64))
def test_bytes_keys_round_trip_base64url(data: bytes) -> None:
    codec = key_codec(table(Format.BYTES))
    text = codec.render(data)
    assert isinstance(text, str)
    assert not set(text) & set("=+/")
    assert codec.parse_text(text) == data
    assert codec.parse_json(text) == data


def test_bytes_keys_accept_padding_and_reject_garbage() -> None:
    codec = key_codec(table(Format.BYTES))
    assert codec.parse_text("_-8=") == b"\xff\xef"
    assert codec.parse_text("/+8") == b"\xff\xef"
    with pytest.raises(KeyFormatError, match="has bytes keys"):
        codec.parse_text("not base64!")


# ---- JSON keys -----------------------------------------------------------------------


def test_json_keys_match_what_a_compact_producer_wrote() -> None:
    codec = key_codec(table(Format.JSON))
    key = {"customer": "zoë", "id": 7, "tags": ["a", "b"]}
    produced = json.dumps(key, separators=(",", ":"), ensure_ascii=False).encode()
    assert codec.parse_text('{ "customer" : "zoë",\n "id": 7, "tags": ["a","b"] }') == produced
    assert codec.parse_json(key) == produced == orjson.dumps(key)
    assert codec.render(produced) == key
    assert codec.parse_text('"alice"') == b'"alice"'


def test_json_key_text_errors() -> None:
    codec = key_codec(table(Format.JSON))
    with pytest.raises(KeyFormatError, match=r"key 'alice' is not JSON; table 't' has json keys"):
        codec.parse_text("alice")
    with pytest.raises(KeyFormatError):
        codec.parse_json(2**64)


# ---- Avro ----------------------------------------------------------------------------


def test_avro_keys_and_values_round_trip() -> None:
    t = table(Format.AVRO, Format.AVRO, key_schema=AVRO_SCHEMA, value_schema=AVRO_SCHEMA)
    kc, vc = key_codec(t), value_codec(t)
    wire = kc.parse_text('{"id": 5, "region": "eu", "blob": null}')
    assert wire == kc.parse_json({"id": 5, "region": "eu", "blob": None})
    assert wire == b"\x0a\x04eu\x00"  # zig-zag 5, len-2 string, union branch 0
    assert kc.render(wire) == {"id": 5, "region": "eu", "blob": None}
    value = vc.encode({"id": -1, "region": "us", "blob": b"\xff\x00"})
    assert vc.render(value) == {"id": -1, "region": "us", "blob": "_wA"}
    assert orjson.loads(vc.render_json(value)) == vc.render(value)


def test_avro_rejects_mismatched_data() -> None:
    t = table(Format.AVRO, Format.AVRO, key_schema=AVRO_SCHEMA, value_schema=AVRO_SCHEMA)
    with pytest.raises(KeyFormatError, match="has avro keys"):
        key_codec(t).parse_text('{"id": 1.5, "region": "eu"}')  # would be truncated silently
    with pytest.raises(FormatError):
        value_codec(t).render(b"\x0a\x08eu")  # truncated
    with pytest.raises(FormatError, match="Schema Registry"):
        value_codec(t).render(b"\x0a\x04eu\x00\x00")  # trailing bytes


# ---- windows and caching -------------------------------------------------------------


@given(st.binary(max_size=20), LONGS)
def test_window_keys_round_trip(key: bytes, start: int) -> None:
    wire = window_wire_key(key, start)
    assert wire[-8:] == struct.pack(">q", start)
    assert split_window_wire_key(wire) == (key, start)
    store = window_store_key(key, start)
    assert split_window_store_key(store) == (key, start)


@given(st.lists(LONGS, min_size=1, max_size=30, unique=True))
def test_window_store_keys_sort_by_start(starts: list[int]) -> None:
    codec = key_codec(table(Format.LONG))
    k = codec.wire_to_store(codec.parse_text("9"))
    stores = sorted(window_store_key(k, s) for s in starts)
    assert [split_window_store_key(s)[1] for s in stores] == sorted(starts)


def test_window_helpers_reject_short_keys_and_big_starts() -> None:
    with pytest.raises(FormatError):
        split_window_wire_key(b"1234567")
    with pytest.raises(FormatError):
        split_window_store_key(b"")
    with pytest.raises(FormatError):
        window_wire_key(b"k", 2**63)
    with pytest.raises(FormatError):
        window_store_key(b"k", -(2**63) - 1)


def test_codecs_are_cached_per_definition() -> None:
    a = table(Format.LONG)
    assert key_codec(a) is key_codec(table(Format.LONG))
    assert value_codec(a) is value_codec(a)
    windowed = table(Format.LONG, kind=TableKind.WINDOWED, window_size_ms=60_000)
    assert key_codec(windowed) is not key_codec(a)
