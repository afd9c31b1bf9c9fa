"""Table definitions: what a queryable table is (name, changelog topic, formats, kind).

A table is the latest value per key of one keyed changelog topic. The definition travels
as JSON in the catalog topic (see `sparkiq.kafka.catalog`); this module holds only the value type
and its validation.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import orjson

from sparkiq.core.errors import CatalogError
from sparkiq.core.partitioner import Partitioner, placer

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class Format(StrEnum):
    """Key and value formats a table can declare."""

    STRING = "string"  # UTF-8 text
    LONG = "long"  # 8-byte big-endian signed (Kafka's LongSerializer)
    INT = "int"  # 4-byte big-endian signed (Kafka's IntegerSerializer)
    JSON = "json"  # UTF-8 JSON document
    AVRO = "avro"  # Avro binary (schemaless, the schema is in the table definition)
    # Avro framed as Confluent's serializers write it (Schema Registry): byte 0, a 4-byte
    # schema id, the Avro binary; decoded with the schema in the table definition. Values only.
    AVRO_SR = "avro-sr"
    BYTES = "bytes"  # opaque; shown as base64 in JSON answers


class TableKind(StrEnum):
    """A plain key-value table, one whose values are per (key, window start), or a key-value
    table every node holds whole (`global`: small reference data, read locally anywhere)."""

    KV = "kv"
    WINDOWED = "windowed"
    GLOBAL = "global"


class WindowLayout(StrEnum):
    """How a windowed table's changelog record key holds its window (all big-endian).

    `sparkiq`: key + 8-byte start (sparkiq's sinks). `kstreams-window`: a Kafka Streams
    window store's changelog, key + 8-byte start + 4-byte sequence number.
    `kstreams-session`: a Kafka Streams session store's, key + 8-byte end + 8-byte start; its
    sessions have no fixed length, so each stored value keeps its session's end
    (`sparkiq.core.kstreams`).
    """

    SPARKIQ = "sparkiq"
    KSTREAMS_WINDOW = "kstreams-window"
    KSTREAMS_SESSION = "kstreams-session"

    @property
    def suffix_bytes(self) -> int:
        """The bytes after the key in a changelog record key."""
        return _SUFFIX_BYTES[self]


_SUFFIX_BYTES = {
    WindowLayout.SPARKIQ: 8,
    WindowLayout.KSTREAMS_WINDOW: 12,
    WindowLayout.KSTREAMS_SESSION: 16,
}


@dataclass(frozen=True, slots=True)
class TableDef:
    """One queryable table, as registered in the catalog."""

    name: str
    topic: str
    partitions: int
    key_format: Format = Format.STRING
    value_format: Format = Format.JSON
    kind: TableKind = TableKind.KV
    # Windowed tables: the window length; the record key is key bytes + 8-byte BE start ms.
    window_size_ms: int | None = None
    # Windowed tables: how long a window is kept after it ends, measured against the newest
    # window end seen in its partition (None: kept for good).
    retention_ms: int | None = None
    # Avro formats: the writer schema, as JSON text.
    key_schema: str | None = None
    value_schema: str | None = None
    # Free text shown in `GET /v1/tables`.
    description: str = ""
    # How the producers placed keys in partitions; definitions written before this field
    # existed were all murmur2 (sparkiq's sinks, Java clients), so that is the default.
    partitioner: Partitioner = Partitioner.MURMUR2
    # Windowed tables: how a changelog key holds the window (sparkiq's or Kafka Streams').
    window_layout: WindowLayout = WindowLayout.SPARKIQ

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise CatalogError(
                f"table name {self.name!r} must be 1-200 characters of letters, digits, "
                "'.', '_' or '-', starting with a letter or digit"
            )
        if not self.topic:
            raise CatalogError(f"table {self.name!r} needs a changelog topic")
        if self.partitions < 1:
            raise CatalogError(f"table {self.name!r} needs at least one partition")
        if self.window_layout is not WindowLayout.SPARKIQ and self.kind is not TableKind.WINDOWED:
            raise CatalogError(
                f"table {self.name!r} has window layout {self.window_layout.value}: its kind "
                "must be windowed"
            )
        if self.has_session_ends:
            if self.window_size_ms is not None:
                raise CatalogError(
                    f"table {self.name!r} holds sessions: each has its own end, no window size"
                )
        elif self.kind is TableKind.WINDOWED and not (self.window_size_ms or 0) > 0:
            raise CatalogError(
                f"windowed table {self.name!r} needs its window length: window_size_ms > 0 "
                "(sparkiq table create --window-size-ms 60000 for one minute)"
            )
        if self.kind is not TableKind.WINDOWED and self.window_size_ms is not None:
            raise CatalogError(f"table {self.name!r} is {self.kind.value}: it has no window size")
        if self.retention_ms is not None:
            if self.kind is not TableKind.WINDOWED:
                raise CatalogError(
                    f"table {self.name!r} is {self.kind.value}: only windowed tables take a "
                    "retention"
                )
            if self.retention_ms <= 0:
                raise CatalogError(f"table {self.name!r} needs a retention > 0 ms")
        if self.key_format is Format.AVRO_SR:
            raise CatalogError(
                f"table {self.name!r}: keys in format avro-sr (Schema Registry framed Avro) "
                "cannot be served yet: a lookup would have to know the schema id each key was "
                "written with; key the changelog with another serde (string, long, json)"
            )
        if self.key_format is Format.AVRO and not self.key_schema:
            raise CatalogError(f"table {self.name!r} has Avro keys but no key_schema")
        if self.value_format in (Format.AVRO, Format.AVRO_SR) and not self.value_schema:
            raise CatalogError(f"table {self.name!r} has Avro values but no value_schema")

    @property
    def is_windowed(self) -> bool:
        return self.kind is TableKind.WINDOWED

    @property
    def has_session_ends(self) -> bool:
        """Whether each window (a session) keeps its own end in its stored value."""
        return self.window_layout is WindowLayout.KSTREAMS_SESSION

    def key_of_window_key(self, wire: bytes) -> bytes:
        """The key part of a windowed changelog record key (what the partitioner hashed)."""
        return wire[: -self.window_layout.suffix_bytes]

    @property
    def is_global(self) -> bool:
        """Whether every node holds every partition and answers every key itself."""
        return self.kind is TableKind.GLOBAL

    @property
    def has_fixed_placement(self) -> bool:
        """Whether a key's partition follows from the key (every partitioner but `any`)."""
        return self.partitioner is not Partitioner.ANY

    def partition_of(self, key: bytes) -> int | None:
        """The partition this table's partitioner gives *key* (a windowed table's key
        without its window start); None when placement is unknown (`any`)."""
        place = placer(self.partitioner)
        return None if place is None else place(key, self.partitions)

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes | str) -> TableDef:
        try:
            raw: Any = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CatalogError(f"table definition is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise CatalogError("table definition must be a JSON object")
        try:
            return cls(
                name=str(raw["name"]),
                topic=str(raw["topic"]),
                partitions=int(raw["partitions"]),
                key_format=Format(raw.get("key_format", "string")),
                value_format=Format(raw.get("value_format", "json")),
                kind=TableKind(raw.get("kind", "kv")),
                window_size_ms=raw.get("window_size_ms"),
                retention_ms=raw.get("retention_ms"),
                key_schema=raw.get("key_schema"),
                value_schema=raw.get("value_schema"),
                description=str(raw.get("description", "")),
                partitioner=Partitioner(raw.get("partitioner", "murmur2")),
                window_layout=WindowLayout(raw.get("window_layout", "sparkiq")),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise CatalogError(f"invalid table definition {raw!r}: {exc}") from exc

    def summary(self) -> dict[str, object]:
        """The public description used by `GET /v1/tables`."""
        out: dict[str, object] = {
            "name": self.name,
            "topic": self.topic,
            "partitions": self.partitions,
            "kind": self.kind.value,
            "key_format": self.key_format.value,
            "value_format": self.value_format.value,
            "partitioner": self.partitioner.value,
        }
        if self.window_size_ms is not None:
            out["window_size_ms"] = self.window_size_ms
        if self.retention_ms is not None:
            out["retention_ms"] = self.retention_ms
        if self.window_layout is not WindowLayout.SPARKIQ:
            out["window_layout"] = self.window_layout.value
        if self.description:
            out["description"] = self.description
        return out
