"""Kafka Streams state stores as sparkiq tables: changelog names, store types, serdes, and
the record keys and values of their changelogs.

Every logged Kafka Streams store writes `<application.id>-<store>-changelog`, partitioned like
its input (the key alone decides: murmur2 of the key's bytes), so a sparkiq node can serve it
as it serves its own tables. What the changelog records hold, by store type (all
big-endian):

| store type | record key | record value |
|---|---|---|
| kv, timestamped-kv | key | value |
| window, timestamped-window | key + 8-byte window start + 4-byte sequence number | value |
| session | key + 8-byte session end + 8-byte session start | value |

Timestamped stores keep an 8-byte timestamp before each value *in their RocksDB*, but log
the plain value (the timestamp travels as the record's timestamp) and add it back when they
restore: their changelogs read like the plain stores'. A null value deletes the key, window
or session. A window store that keeps duplicates (stream-stream joins) numbers them with the
sequence number; sparkiq keeps the last of a window's duplicates.

A session has no fixed length, so a session store becomes a windowed table whose stored
value is the session's 8-byte end followed by the value (`session_value`); answers show the
end from there (`window_end_and_value`).

Serdes are named as Kafka Streams' `Serdes` (and Confluent's Avro serdes) name them; those
whose bytes sparkiq cannot yet show are refused by name (`format_of_serde`).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum

from sparkiq.core.errors import CatalogError, FormatError
from sparkiq.core.serde import INT, LONG
from sparkiq.core.tables import Format, TableDef, TableKind, WindowLayout

__all__ = [
    "SessionKeys",
    "StoreType",
    "changelog_topic",
    "format_of_serde",
    "kstreams_table",
    "session_changelog_key",
    "session_value",
    "split_avro_sr",
    "split_session_changelog_key",
    "split_window_changelog_key",
    "stored_value",
    "window_changelog_key",
    "window_end_and_value",
    "window_splitter",
]

_APP_ID = re.compile(r"^[A-Za-z0-9._-]+$")
_SR_MAGIC = 0


class StoreType(StrEnum):
    """The Kafka Streams store types sparkiq serves from their changelogs."""

    KV = "kv"
    TIMESTAMPED_KV = "timestamped-kv"
    WINDOW = "window"
    TIMESTAMPED_WINDOW = "timestamped-window"
    SESSION = "session"

    @property
    def window_layout(self) -> WindowLayout | None:
        """How its changelog keys hold a window (None: a key-value store)."""
        if self in (StoreType.WINDOW, StoreType.TIMESTAMPED_WINDOW):
            return WindowLayout.KSTREAMS_WINDOW
        if self is StoreType.SESSION:
            return WindowLayout.KSTREAMS_SESSION
        return None


# Serde names (lower case, as in `Serdes.String()`, Confluent's `GenericAvroSerde`) -> format.
_SERVED_SERDES: dict[str, Format] = {
    "string": Format.STRING,
    "long": Format.LONG,
    "integer": Format.INT,
    "json": Format.JSON,
    "avro": Format.AVRO_SR,
    "bytes": Format.BYTES,
    "bytearray": Format.BYTES,
    "bytebuffer": Format.BYTES,
}
# Serdes whose bytes sparkiq cannot show yet, and why.
_UNSERVED_SERDES: dict[str, str] = {
    "double": "8-byte IEEE 754 numbers",
    "float": "4-byte IEEE 754 numbers",
    "short": "2-byte integers",
    "uuid": "UUIDs",
    "boolean": "1-byte booleans",
    "void": "null keys and values",
    "protobuf": "Schema Registry framed Protobuf",
    "json-schema": "Schema Registry framed JSON Schema",
    "list": "lists",
}
SERDE_NAMES = (*_SERVED_SERDES, *_UNSERVED_SERDES)


def changelog_topic(application_id: str, store: str) -> str:
    """The changelog topic Kafka Streams writes for *store* of application *application_id*."""
    for what, name in (("application id", application_id), ("store name", store)):
        if not _APP_ID.match(name):
            raise CatalogError(
                f"Kafka Streams {what} {name!r} must be letters, digits, '.', '_' or '-'"
            )
    return f"{application_id}-{store}-changelog"


def format_of_serde(serde: str, part: str) -> Format:
    """The table format of Kafka Streams serde *serde* for keys or values (*part*);
    CatalogError naming the serde when sparkiq cannot serve it."""
    name = serde.lower()
    fmt = _SERVED_SERDES.get(name)
    if fmt is not None:
        if part == "key" and fmt is Format.AVRO_SR:
            raise CatalogError(
                f"{part} serde {serde!r} (Schema Registry framed Avro) cannot be served yet for "
                "keys: a lookup would need the schema id each key was written with"
            )
        return fmt
    why = _UNSERVED_SERDES.get(name)
    served = ", ".join(_SERVED_SERDES)
    if why is not None:
        raise CatalogError(
            f"{part} serde {serde!r} ({why}) cannot be served yet; sparkiq serves the serdes "
            f"{served}"
        )
    raise CatalogError(
        f"{part} serde {serde!r} is not one sparkiq knows: custom serdes cannot be served; "
        f"sparkiq serves the serdes {served}"
    )


def kstreams_table(
    name: str,
    *,
    application_id: str,
    store: str,
    store_type: StoreType,
    partitions: int,
    key_serde: str,
    value_serde: str,
    window_size_ms: int | None = None,
    retention_ms: int | None = None,
    value_schema: str | None = None,
    description: str = "",
) -> TableDef:
    """The table that serves store *store* of Kafka Streams application *application_id*.

    Window stores need their window size (it is not in the changelog); session stores take
    none. *retention_ms* (windows and sessions): how long they are kept after the newest of
    their partition, normally the changelog topic's `retention.ms`.
    """
    layout = store_type.window_layout
    if layout is WindowLayout.KSTREAMS_WINDOW and not (window_size_ms or 0) > 0:
        raise CatalogError(
            f"window store {store!r}: give its window size (--window-size-ms), which its "
            "changelog does not hold"
        )
    if layout is not WindowLayout.KSTREAMS_WINDOW and window_size_ms is not None:
        raise CatalogError(f"{store_type.value} store {store!r} takes no window size")
    return TableDef(
        name=name,
        topic=changelog_topic(application_id, store),
        partitions=partitions,
        key_format=format_of_serde(key_serde, "key"),
        value_format=format_of_serde(value_serde, "value"),
        kind=TableKind.KV if layout is None else TableKind.WINDOWED,
        window_size_ms=window_size_ms,
        retention_ms=retention_ms if layout is not None else None,
        value_schema=value_schema,
        description=description
        or f"Kafka Streams application {application_id!r}, {store_type.value} store {store!r}",
        window_layout=layout or WindowLayout.SPARKIQ,
    )


# --------------------------------------------------------------------------------------
# Changelog record keys


def _short(wire: bytes, need: int, what: str) -> FormatError:
    return FormatError(
        f"a {what} changelog key has {len(wire)} bytes, fewer than the {need} after its key; "
        f"the topic is not a Kafka Streams {what} store's changelog"
    )


def window_changelog_key(key: bytes, start_ms: int, seqnum: int = 0) -> bytes:
    """A window store's changelog record key: key + 8-byte start + 4-byte sequence number."""
    return key + LONG.pack(start_ms) + INT.pack(seqnum)


def split_window_changelog_key(wire: bytes) -> tuple[bytes, int, int]:
    """Inverse of `window_changelog_key`: (key, window start ms, sequence number)."""
    if len(wire) < 12:
        raise _short(wire, 12, "window")
    return (
        wire[:-12],
        LONG.unpack_from(wire, len(wire) - 12)[0],
        INT.unpack_from(wire, len(wire) - 4)[0],
    )


def session_changelog_key(key: bytes, end_ms: int, start_ms: int) -> bytes:
    """A session store's changelog record key: key + 8-byte end + 8-byte start."""
    return key + LONG.pack(end_ms) + LONG.pack(start_ms)


def split_session_changelog_key(wire: bytes) -> tuple[bytes, int, int]:
    """Inverse of `session_changelog_key`: (key, session end ms, session start ms)."""
    if len(wire) < 16:
        raise _short(wire, 16, "session")
    n = len(wire)
    return wire[:-16], LONG.unpack_from(wire, n - 16)[0], LONG.unpack_from(wire, n - 8)[0]


def _split_sparkiq(wire: bytes) -> tuple[bytes, int]:
    if len(wire) < 8:
        raise FormatError(
            f"a windowed record key has {len(wire)} bytes, fewer than the 8-byte window "
            "start; the changelog was not written as a windowed table"
        )
    return wire[:-8], LONG.unpack_from(wire, len(wire) - 8)[0]


def _split_window(wire: bytes) -> tuple[bytes, int]:
    key, start, _ = split_window_changelog_key(wire)
    return key, start


def _split_session(wire: bytes) -> tuple[bytes, int]:
    key, _, start = split_session_changelog_key(wire)
    return key, start


_SPLITTERS: dict[WindowLayout, Callable[[bytes], tuple[bytes, int]]] = {
    WindowLayout.SPARKIQ: _split_sparkiq,
    WindowLayout.KSTREAMS_WINDOW: _split_window,
    WindowLayout.KSTREAMS_SESSION: _split_session,
}


def window_splitter(layout: WindowLayout) -> Callable[[bytes], tuple[bytes, int]]:
    """Changelog record key -> (key, window start ms) for a windowed table of *layout*."""
    return _SPLITTERS[layout]


# --------------------------------------------------------------------------------------
# Values


def session_value(wire_key: bytes, value: bytes) -> bytes:
    """The stored value of a session: its end (8 bytes, from the changelog key) + value."""
    if len(wire_key) < 16:
        raise _short(wire_key, 16, "session")
    return wire_key[-16:-8] + value


def window_end_and_value(table: TableDef, start_ms: int, stored: bytes) -> tuple[int, bytes]:
    """A stored window's end (ms) and value: a session's from its stored value, any other
    window's from its start and the table's window size."""
    if table.has_session_ends:
        if len(stored) < 8:
            raise FormatError(f"a session of table {table.name!r} is stored without its end")
        return LONG.unpack_from(stored)[0], stored[8:]
    return start_ms + (table.window_size_ms or 0), stored


def split_avro_sr(wire: bytes) -> tuple[int, bytes]:
    """(schema id, Avro binary) of a Schema Registry framed Avro datum: byte 0, a 4-byte
    big-endian schema id, the datum."""
    if len(wire) < 5 or wire[0] != _SR_MAGIC:
        raise FormatError(
            "not Schema Registry framed Avro (byte 0 then a 4-byte schema id); was it "
            "written with Confluent's Avro serializer?"
        )
    return INT.unpack_from(wire, 1)[0], wire[5:]


class SessionKeys:
    """The key function of a table of sessions (a Kafka Streams session store), which
    also makes a record's stored value: the session's end, from the record key, before the
    value (`session_value`). The restore loop, the change feed and replays know it
    by its type (`stored_value`), so other tables' records pay nothing for it."""

    __slots__ = ("_key_fn",)

    def __init__(self, key_fn: Callable[[bytes], bytes]) -> None:
        self._key_fn = key_fn

    def __call__(self, wire: bytes) -> bytes:
        return self._key_fn(wire)


def stored_value(
    key_fn: Callable[[bytes], bytes] | None, wire: bytes, value: bytes | None
) -> bytes | None:
    """What the store holds for a record of key *wire* and value *value*, given its table's
    key function (`sparkiq.node.restore.store_key_fn`)."""
    if value is None or not isinstance(key_fn, SessionKeys):
        return value
    return session_value(wire, value)
