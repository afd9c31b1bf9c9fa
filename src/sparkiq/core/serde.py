"""Key and value formats: wire bytes <-> text, JSON and order-preserving store keys.

Three forms of a key meet here (vocabulary in docs/internals.md):

- **wire key**: the Kafka record key exactly as the producer wrote it. The partitioner hashes
  it, so a key typed into a URL must be turned into *the same bytes* the producer wrote, or
  the lookup goes to the wrong partition and misses.
- **store key**: what a RocksDB store is keyed by. Long and int keys flip the sign bit of
  their big-endian form so that byte order equals numeric order (range scans); every other
  format stores the wire bytes.
- **text / JSON form**: what a caller types in a URL (``parse_text``) or sends in a JSON body
  (``parse_json``), and what answers show (``render``).

| format | wire | text form | rendered as |
|---|---|---|---|
| string | UTF-8 | the text itself | str |
| long | 8-byte big-endian signed (Kafka ``LongSerializer``) | decimal | int |
| int | 4-byte big-endian signed (Kafka ``IntegerSerializer``) | decimal | int |
| json | UTF-8 JSON, compact (see below) | JSON text | the parsed value |
| avro | Avro binary, schemaless (schema in the table definition) | JSON of the datum | the datum |
| bytes | opaque | base64url (padding optional) | base64url, unpadded |

**JSON keys must be produced compactly.** A JSON key given as text is parsed and re-serialised
with orjson: no whitespace, object members in the order given, non-ASCII as UTF-8. A lookup
matches only if the producer wrote the key the same way: ``orjson.dumps(key)`` or
``json.dumps(key, separators=(",", ":"), ensure_ascii=False)``. Avoid floats in JSON keys:
serialisers disagree on how to print some of them.

**Avro** is plain schemaless Avro binary (fastavro), *not* the Confluent Schema Registry
framing (magic byte + schema id). Avro ``bytes``/``fixed`` fields render as base64url,
decimals as strings, and such keys cannot be typed as text.

Windowed tables key each record by ``key wire bytes + 8-byte big-endian window start (ms)``;
in a store, the window start has its sign bit flipped so windows sort by start. Because keys
of other formats have no length prefix, a prefix scan over ``window_store_key`` bytes of a
string key also meets longer keys that start with it: callers compare the split key.

Errors: text or JSON that does not parse raises `KeyFormatError` naming the table and its key
format; wire bytes that do not decode raise `FormatError`. Size limits are the HTTP layer's.

Value codecs are in `sparkiq.core.value_codecs`, built on the helpers here.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct
from abc import ABC, abstractmethod
from decimal import Decimal
from functools import lru_cache
from typing import Any

import fastavro
import orjson
from fastavro.validation import ValidationError, validate

from sparkiq.core.errors import CatalogError, FormatError, KeyFormatError
from sparkiq.core.tables import Format, TableDef

__all__ = [
    "KeyCodec",
    "key_codec",
    "split_window_store_key",
    "split_window_wire_key",
    "window_store_key",
    "window_wire_key",
]

# Public names left out of __all__ are helpers shared with the value codecs.
_DECIMAL = re.compile(r"-?[0-9]+", re.ASCII)
LONG = struct.Struct(">q")
INT = struct.Struct(">i")
_SIGN64 = 1 << 63
_SIGN32 = 1 << 31


def shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _from_b64(text: str) -> bytes:
    # Accept both alphabets and missing padding: a key pasted from either encoder works.
    s = text.replace("-", "+").replace("_", "/")
    s += "=" * (-len(s) % 4)
    return base64.b64decode(s, validate=True)


def to_jsonable(value: object) -> object:
    if isinstance(value, bytes | bytearray | memoryview):
        return b64url(bytes(value))
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"cannot show a {type(value).__name__} as JSON")


def jsonable(value: object) -> object:
    """A plain JSON-able copy of a decoded Avro datum (bytes, decimals, dates converted)."""
    return orjson.loads(orjson.dumps(value, default=to_jsonable))


# --------------------------------------------------------------------------------------
# Keys


class KeyCodec(ABC):
    """Turns a table's keys between wire bytes, store keys, text and JSON."""

    format: Format

    def __init__(self, table_name: str) -> None:
        self.table_name = table_name

    def _bad(self, shown: object, what: str, hint: str = "") -> KeyFormatError:
        text = shown if isinstance(shown, str) else repr(shown)
        msg = (
            f"key {shorten(text)!r} is not {what}; table {self.table_name!r} has "
            f"{self.format.value} keys"
        )
        return KeyFormatError(msg + (f" ({hint})" if hint else ""))

    @abstractmethod
    def parse_text(self, text: str) -> bytes:
        """The wire bytes of a key typed as text (a URL path segment)."""

    @abstractmethod
    def parse_json(self, value: object) -> bytes:
        """The wire bytes of a key given as a value in a JSON body."""

    def wire_to_store(self, wire: bytes) -> bytes:
        """The store key of *wire*; the identity except for numeric formats."""
        return wire

    def store_to_wire(self, store: bytes) -> bytes:
        """Inverse of `wire_to_store`."""
        return store

    @abstractmethod
    def render(self, wire: bytes) -> object:
        """The JSON-able form of a key in answers."""


class StringKeyCodec(KeyCodec):
    format = Format.STRING

    def parse_text(self, text: str) -> bytes:
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates from a badly decoded URL
            raise self._bad(text, "valid UTF-8 text") from exc

    def parse_json(self, value: object) -> bytes:
        if not isinstance(value, str):
            raise self._bad(value, "a string", "give the key as a JSON string")
        return self.parse_text(value)

    def render(self, wire: bytes) -> object:
        # Producers may write any bytes; a lossy view beats failing a whole range scan.
        return wire.decode("utf-8", errors="replace")


class _FixedIntKeyCodec(KeyCodec):
    """Big-endian signed integers (Kafka's Long/IntegerSerializer); store flips the sign bit."""

    _struct: struct.Struct
    _sign: int
    _noun: str

    def _pack(self, number: int, shown: object) -> bytes:
        try:
            return self._struct.pack(number)
        except struct.error as exc:
            bits = self._struct.size * 8
            raise self._bad(shown, self._noun, f"out of the signed {bits}-bit range") from exc

    def parse_text(self, text: str) -> bytes:
        if not _DECIMAL.fullmatch(text):
            raise self._bad(text, self._noun, "give it in decimal, e.g. 42 or -7")
        return self._pack(int(text), text)

    def parse_json(self, value: object) -> bytes:
        if isinstance(value, bool):
            raise self._bad(value, self._noun)
        if isinstance(value, int):
            return self._pack(value, value)
        if isinstance(value, str):
            # Clients that cannot hold 64-bit integers send them as decimal strings.
            return self.parse_text(value)
        raise self._bad(value, self._noun, "give it as a JSON integer")

    def _check(self, data: bytes) -> None:
        if len(data) != self._struct.size:
            raise FormatError(
                f"table {self.table_name!r} has {self.format.value} keys "
                f"({self._struct.size} bytes) but a key has {len(data)} bytes; "
                "the changelog was written with another key serializer"
            )

    def wire_to_store(self, wire: bytes) -> bytes:
        self._check(wire)
        return bytes((wire[0] ^ 0x80,)) + wire[1:]

    def store_to_wire(self, store: bytes) -> bytes:
        self._check(store)
        return bytes((store[0] ^ 0x80,)) + store[1:]

    def render(self, wire: bytes) -> object:
        self._check(wire)
        return int.from_bytes(wire, "big", signed=True)


class LongKeyCodec(_FixedIntKeyCodec):
    format = Format.LONG
    _struct = LONG
    _noun = "a long"


class IntKeyCodec(_FixedIntKeyCodec):
    format = Format.INT
    _struct = INT
    _noun = "an int"


class JsonKeyCodec(KeyCodec):
    format = Format.JSON

    def parse_text(self, text: str) -> bytes:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise self._bad(text, "JSON", 'strings need quotes, e.g. "alice"') from exc
        return self.parse_json(value)

    def parse_json(self, value: object) -> bytes:
        try:
            return orjson.dumps(value)
        except TypeError as exc:
            raise self._bad(value, "JSON-serialisable", str(exc)) from exc

    def render(self, wire: bytes) -> object:
        try:
            return orjson.loads(wire)
        except orjson.JSONDecodeError as exc:
            raise FormatError(f"a key of table {self.table_name!r} is not JSON: {exc}") from exc


class AvroKeyCodec(KeyCodec):
    format = Format.AVRO

    def __init__(self, table_name: str, schema: str) -> None:
        super().__init__(table_name)
        self._schema = parse_avro_schema(table_name, "key_schema", schema)

    def parse_text(self, text: str) -> bytes:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise self._bad(text, "JSON", "give the Avro datum as JSON") from exc
        return self.parse_json(value)

    def parse_json(self, value: object) -> bytes:
        try:
            return avro_encode(self._schema, value)
        except (ValidationError, ValueError, TypeError) as exc:
            raise self._bad(
                orjson.dumps(value, default=repr).decode(), "a datum of the key schema", str(exc)
            ) from exc

    def render(self, wire: bytes) -> object:
        return jsonable(avro_decode(self._schema, wire, self.table_name, "key"))


class BytesKeyCodec(KeyCodec):
    format = Format.BYTES

    def parse_text(self, text: str) -> bytes:
        try:
            return _from_b64(text)
        except (binascii.Error, ValueError) as exc:
            raise self._bad(text, "base64url", "encode the key bytes as base64url") from exc

    def parse_json(self, value: object) -> bytes:
        if not isinstance(value, str):
            raise self._bad(value, "a base64url string")
        return self.parse_text(value)

    def render(self, wire: bytes) -> object:
        return b64url(wire)


# --------------------------------------------------------------------------------------
# Avro helpers


def parse_avro_schema(table_name: str, field: str, schema: str) -> Any:
    try:
        return fastavro.parse_schema(orjson.loads(schema))
    except Exception as exc:  # fastavro raises several unrelated types for bad schemas
        raise CatalogError(
            f"table {table_name!r} has an invalid {field}: {exc}; register it again "
            "with a valid Avro schema (JSON text)"
        ) from exc


def avro_encode(schema: Any, value: object) -> bytes:
    # fastavro's writer silently truncates some mismatches (1.5 written as int 1), which
    # would produce the wrong wire bytes for a key: validate first.
    validate(value, schema, raise_errors=True)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, value)
    return out.getvalue()


def avro_decode(schema: Any, wire: bytes, table_name: str, what: str) -> object:
    buf = io.BytesIO(wire)
    try:
        datum = fastavro.schemaless_reader(buf, schema, None)
    except Exception as exc:  # truncated input surfaces as EOFError, IndexError, ...
        raise FormatError(
            f"a {what} of table {table_name!r} is not Avro of its {what} schema: {exc!r}"
        ) from exc
    if buf.tell() != len(wire):
        raise FormatError(
            f"a {what} of table {table_name!r} has {len(wire) - buf.tell()} bytes after its "
            "Avro datum; is it framed (e.g. Schema Registry)? sparkiq reads schemaless Avro"
        )
    return datum


# --------------------------------------------------------------------------------------
# Factories


@lru_cache(maxsize=1024)
def key_codec(table: TableDef) -> KeyCodec:
    """The key codec of *table* (cached per table definition)."""
    fmt = table.key_format
    name = table.name
    if fmt is Format.STRING:
        return StringKeyCodec(name)
    if fmt is Format.LONG:
        return LongKeyCodec(name)
    if fmt is Format.INT:
        return IntKeyCodec(name)
    if fmt is Format.JSON:
        return JsonKeyCodec(name)
    if fmt is Format.AVRO:
        assert table.key_schema is not None  # TableDef validates it
        return AvroKeyCodec(name, table.key_schema)
    return BytesKeyCodec(name)


# --------------------------------------------------------------------------------------
# Windowed keys


def _window_start_error(start_ms: int) -> FormatError:
    return FormatError(f"window start {start_ms} ms does not fit in a signed 64-bit integer")


def window_wire_key(key_wire: bytes, start_ms: int) -> bytes:
    """Changelog record key of one window: key wire bytes + 8-byte big-endian start (ms)."""
    try:
        return key_wire + LONG.pack(start_ms)
    except struct.error as exc:
        raise _window_start_error(start_ms) from exc


def split_window_wire_key(wire: bytes) -> tuple[bytes, int]:
    """Inverse of `window_wire_key`: (key wire bytes, window start ms)."""
    if len(wire) < 8:
        raise FormatError(
            f"a windowed record key has {len(wire)} bytes, fewer than the 8-byte window "
            "start; the changelog was not written as a windowed table"
        )
    return wire[:-8], LONG.unpack_from(wire, len(wire) - 8)[0]


def window_store_key(key_store: bytes, start_ms: int) -> bytes:
    """Store key of one window: key store bytes + start with its sign bit flipped."""
    if not -_SIGN64 <= start_ms < _SIGN64:
        raise _window_start_error(start_ms)
    return key_store + (start_ms + _SIGN64).to_bytes(8, "big")


def split_window_store_key(store: bytes) -> tuple[bytes, int]:
    """Inverse of `window_store_key`: (key store bytes, window start ms)."""
    if len(store) < 8:
        raise FormatError(
            f"a windowed store key has {len(store)} bytes, fewer than the 8-byte window start"
        )
    return store[:-8], int.from_bytes(store[-8:], "big") - _SIGN64
