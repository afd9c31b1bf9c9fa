"""Value codecs: a table's values shown as JSON, and encoded for producers and the Spark sink.

The value formats are those of `sparkiq.core.serde` (its docstring has the table); the
base64url, JSON and schemaless Avro helpers are the ones its key codecs use.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from functools import lru_cache

import orjson
from fastavro.validation import ValidationError

from sparkiq.core.errors import FormatError
from sparkiq.core.kstreams import split_avro_sr
from sparkiq.core.serde import (
    INT,
    LONG,
    avro_decode,
    avro_encode,
    b64url,
    jsonable,
    parse_avro_schema,
    shorten,
    to_jsonable,
)
from sparkiq.core.tables import Format, TableDef

__all__ = ["ValueCodec", "value_codec"]


class ValueCodec(ABC):
    """Shows a table's values as JSON and encodes values for producers and the Spark sink."""

    format: Format

    def __init__(self, table_name: str) -> None:
        self.table_name = table_name

    def _undecodable(self, wire: bytes, why: object) -> FormatError:
        return FormatError(
            f"a value of table {self.table_name!r} ({len(wire)} bytes) is not "
            f"{self.format.value}: {why}; check the serializer that writes its changelog"
        )

    def _unencodable(self, value: object, why: object = "") -> FormatError:
        return FormatError(
            f"cannot encode {shorten(repr(value))} as a {self.format.value} value of table "
            f"{self.table_name!r}" + (f": {why}" if why else "")
        )

    @abstractmethod
    def render(self, wire: bytes) -> object:
        """The JSON-able form of a value in answers."""

    def render_json(self, wire: bytes) -> bytes:
        """The value as JSON bytes, ready to embed in a response body."""
        return orjson.dumps(self.render(wire))

    @abstractmethod
    def encode(self, value: object) -> bytes:
        """The wire bytes of *value* (what a producer writes)."""


class StringValueCodec(ValueCodec):
    format = Format.STRING

    def render(self, wire: bytes) -> object:
        return wire.decode("utf-8", errors="replace")

    def encode(self, value: object) -> bytes:
        if not isinstance(value, str):
            raise self._unencodable(value, "expected a str")
        return value.encode("utf-8")


class _FixedIntValueCodec(ValueCodec):
    _struct: struct.Struct

    def render(self, wire: bytes) -> object:
        if len(wire) != self._struct.size:
            raise self._undecodable(wire, f"expected {self._struct.size} bytes")
        return int.from_bytes(wire, "big", signed=True)

    def encode(self, value: object) -> bytes:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._unencodable(value, "expected an int")
        try:
            return self._struct.pack(value)
        except struct.error as exc:
            raise self._unencodable(value, exc) from exc


class LongValueCodec(_FixedIntValueCodec):
    format = Format.LONG
    _struct = LONG


class IntValueCodec(_FixedIntValueCodec):
    format = Format.INT
    _struct = INT


class JsonValueCodec(ValueCodec):
    format = Format.JSON

    def render(self, wire: bytes) -> object:
        try:
            return orjson.loads(wire)
        except orjson.JSONDecodeError as exc:
            raise self._undecodable(wire, exc) from exc

    def render_json(self, wire: bytes) -> bytes:
        # Passing the wire bytes through unchecked is not safe: a producer's bad record
        # (truncated, two documents, invalid UTF-8) would break the whole response body.
        # orjson.loads validates fully (one document, strict UTF-8, no NaN); once it has,
        # the original bytes are safe to embed and re-serialising would only cost time.
        try:
            orjson.loads(wire)
        except orjson.JSONDecodeError as exc:
            raise self._undecodable(wire, exc) from exc
        return wire

    def encode(self, value: object) -> bytes:
        try:
            return orjson.dumps(value)
        except TypeError as exc:
            raise self._unencodable(value, exc) from exc


class AvroValueCodec(ValueCodec):
    format = Format.AVRO

    def __init__(self, table_name: str, schema: str) -> None:
        super().__init__(table_name)
        self._schema = parse_avro_schema(table_name, "value_schema", schema)

    def render(self, wire: bytes) -> object:
        return jsonable(avro_decode(self._schema, wire, self.table_name, "value"))

    def render_json(self, wire: bytes) -> bytes:
        return orjson.dumps(
            avro_decode(self._schema, wire, self.table_name, "value"), default=to_jsonable
        )

    def encode(self, value: object) -> bytes:
        try:
            return avro_encode(self._schema, value)
        except (ValidationError, ValueError, TypeError) as exc:
            raise self._unencodable(value, exc) from exc


class AvroSrValueCodec(AvroValueCodec):
    """Avro framed by Confluent's serializers (byte 0, a 4-byte schema id, the datum), read
    with the table's schema whatever the id. sparkiq does not write it: it has no registry."""

    format = Format.AVRO_SR

    def render(self, wire: bytes) -> object:
        return super().render(self._datum(wire))

    def render_json(self, wire: bytes) -> bytes:
        return super().render_json(self._datum(wire))

    def _datum(self, wire: bytes) -> bytes:
        try:
            return split_avro_sr(wire)[1]
        except FormatError as exc:
            raise self._undecodable(wire, exc) from exc

    def encode(self, value: object) -> bytes:
        raise self._unencodable(
            value,
            "sparkiq writes no Schema Registry framed Avro; produce it with Confluent's serializer",
        )


class BytesValueCodec(ValueCodec):
    format = Format.BYTES

    def render(self, wire: bytes) -> object:
        return b64url(wire)

    def encode(self, value: object) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise self._unencodable(value, "expected bytes")
        return bytes(value)


@lru_cache(maxsize=1024)
def value_codec(table: TableDef) -> ValueCodec:
    """The value codec of *table* (cached per table definition)."""
    fmt = table.value_format
    name = table.name
    if fmt is Format.STRING:
        return StringValueCodec(name)
    if fmt is Format.LONG:
        return LongValueCodec(name)
    if fmt is Format.INT:
        return IntValueCodec(name)
    if fmt is Format.JSON:
        return JsonValueCodec(name)
    if fmt is Format.AVRO:
        assert table.value_schema is not None  # TableDef validates it
        return AvroValueCodec(name, table.value_schema)
    if fmt is Format.AVRO_SR:
        assert table.value_schema is not None  # TableDef validates it
        return AvroSrValueCodec(name, table.value_schema)
    return BytesValueCodec(name)
