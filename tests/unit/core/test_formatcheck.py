"""`check_formats`: whether sampled records decode in a table's formats, and which would."""

from __future__ import annotations

import io
import struct

import fastavro
import pytest

from sparkiq.core.errors import CatalogError
from sparkiq.core.formatcheck import SampledRecord, check_formats
from sparkiq.core.tables import Format, TableDef, TableKind


def records(*pairs: tuple[bytes, bytes | None]) -> list[SampledRecord]:
    return [SampledRecord(0, offset, key, value) for offset, (key, value) in enumerate(pairs)]


def table(**kwargs: object) -> TableDef:
    return TableDef(name="t", topic="topic", partitions=1, **kwargs)  # type: ignore[arg-type]


def test_records_that_decode_give_no_failure() -> None:
    found = check_formats(table(), records((b"k1", b'{"a":1}'), (b"k2", None)))
    assert [(f.part, f.checked, f.failed, f.ok) for f in found] == [
        ("key", 2, 0, True),
        ("value", 1, 0, True),  # the tombstone has no value
    ]


def test_a_failure_counts_names_an_example_and_the_formats_that_fit() -> None:
    key, _ = check_formats(
        table(key_format=Format.LONG), records((b"abc", b"{}"), (struct.pack(">q", -1), b"{}"))
    )
    assert (key.checked, key.failed, key.example) == (2, 1, SampledRecord(0, 0, b"abc", b"{}"))
    assert key.fitting == (Format.BYTES,)  # text and a long: no format but bytes takes both
    assert key.describe("topic") == (
        "1 of 2 sampled keys of topic 'topic' do not decode as long (e.g. partition 0 offset 0: "
        "b'abc': a long is 8 bytes, got 3); check --key-format and the producer's serializer "
        "(--key-format bytes takes any)"
    )


def test_the_fitting_formats_are_suggested_most_specific_first() -> None:
    _, value = check_formats(
        table(value_format=Format.INT), records((b"k", b'{"a": 1}'), (b"j", b"[1]"))
    )
    assert value.fitting == (Format.JSON, Format.STRING, Format.BYTES)
    assert value.describe("topic").endswith(
        "write --value-format json (the sampled values decode as json, string, bytes)"
    )


def test_strings_must_be_utf8_and_json_keys_compact() -> None:
    key, value = check_formats(
        table(key_format=Format.JSON, value_format=Format.STRING),
        records((b'{"id": 1}', b"\xff\xfe")),
    )
    assert key.reason == "JSON, but not compact (no spaces, as orjson.dumps writes it)"
    assert value.reason.startswith("not UTF-8 (invalid start byte at byte 0)")


def test_windowed_keys_are_checked_without_their_window_start() -> None:
    start = struct.pack(">q", 60_000)
    key, _ = check_formats(
        table(kind=TableKind.WINDOWED, window_size_ms=60_000, key_format=Format.INT),
        records((struct.pack(">i", 5) + start, b"{}"), (b"x", b"{}")),
    )
    assert (key.checked, key.failed) == (2, 1)
    assert key.reason == "too short for a key and an 8-byte window start"


def test_avro_values_are_read_with_the_given_schema() -> None:
    schema = '{"type": "record", "name": "A", "fields": [{"name": "b", "type": "long"}]}'
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out,
        fastavro.parse_schema(
            {"type": "record", "name": "A", "fields": [{"name": "b", "type": "long"}]}
        ),
        {"b": 3},
    )
    _, value = check_formats(
        table(value_format=Format.AVRO, value_schema=schema),
        records((b"k", out.getvalue()), (b"j", out.getvalue() + b"\x00")),
    )
    assert (value.checked, value.failed) == (2, 1)
    assert "bytes after its Avro datum" in value.reason
    with pytest.raises(CatalogError, match="invalid value schema"):
        check_formats(table(value_format=Format.AVRO, value_schema="{"), records((b"k", b"")))
