"""Parsing of path segments, query parameters, headers and keys; bad input becomes a Failure.

Nothing here raises for bad input: every function returns the parsed value or a `Failure`
(BAD_REQUEST, TOO_LARGE), which the caller hands back for the edge to render.
"""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Collection
from urllib.parse import parse_qsl, unquote

from sparkiq.core import positions
from sparkiq.core.errors import FormatError, KeyFormatError
from sparkiq.core.queries import Failure, FailureReason, Order
from sparkiq.core.serde import KeyCodec, key_codec
from sparkiq.core.tables import TableDef
from sparkiq.core.timespec import parse_time
from sparkiq.core.value_codecs import ValueCodec, value_codec

Params = dict[str, str]

# A read's consistency token: answer from a replica that has applied at least its offsets.
AFTER_PARAM = "after"
# Source records a read must reflect (read-your-writes through the pipeline).
AFTER_SOURCE_PARAM = "after_source"

# Codecs by table object: the factories cache them by TableDef, whose hash walks every field;
# this is looked up on every request. A changed definition is a new object and gets new codecs.
_CODECS: dict[int, tuple[TableDef, KeyCodec, ValueCodec]] = {}


def codecs(table: TableDef) -> tuple[KeyCodec, ValueCodec]:
    """The key and value codecs of `table`."""
    entry = _CODECS.get(id(table))
    if entry is None or entry[0] is not table:
        if len(_CODECS) > 1024:  # definitions replaced many times over: start afresh
            _CODECS.clear()
        entry = (table, key_codec(table), value_codec(table))
        _CODECS[id(table)] = entry
    return entry[1], entry[2]


def parse_query(query: str, allowed: Collection[str]) -> Params | Failure:
    """The query string as a dict; unknown and repeated names are refused."""
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, errors="strict")
    except (ValueError, UnicodeDecodeError) as exc:
        return Failure(FailureReason.BAD_REQUEST, f"query string does not parse: {exc}")
    params = dict(pairs)
    if len(params) < len(pairs):
        # Every parameter is one value: `limit=10&limit=1000` is a caller's mistake to report,
        # not one to settle by picking a value.
        counts = Counter(name for name, _ in pairs)
        repeated = sorted(name for name, count in counts.items() if count > 1)
        return Failure(
            FailureReason.BAD_REQUEST,
            f"parameter(s) {', '.join(repeated)} given more than once; give each once",
        )
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        return Failure(
            FailureReason.BAD_REQUEST,
            f"unknown parameter(s) {', '.join(unknown)}; this endpoint takes "
            f"{', '.join(sorted(allowed)) or 'none'}",
        )
    return params


def decode_segment(raw: str) -> str | Failure:
    """Percent-decode one path segment (UTF-8)."""
    if "%" not in raw:
        return raw
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return Failure(FailureReason.BAD_REQUEST, "path segment is not percent-encoded UTF-8")


def int_param(
    params: Params, name: str, default: int | None, lo: int | None = None, hi: int | None = None
) -> int | Failure | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        return Failure(FailureReason.BAD_REQUEST, f"{name}={raw!r} is not an integer")
    if lo is not None and value < lo:
        return Failure(FailureReason.BAD_REQUEST, f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        return Failure(FailureReason.BAD_REQUEST, f"{name} must be <= {hi}, got {value}")
    return value


def order_param(params: Params) -> Order | Failure:
    """`order=asc|desc` (default asc)."""
    raw = params.get("order") or "asc"
    try:
        return Order(raw)
    except ValueError:
        return Failure(FailureReason.BAD_REQUEST, f"order={raw!r}; give order=asc or order=desc")


def time_param(params: Params, name: str, default: int, now: int) -> int | Failure:
    """A time parameter (`sparkiq.core.timespec`: epoch ms, ISO-8601 or relative to `now`)."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse_time(raw, now)
    except FormatError as exc:
        return Failure(FailureReason.BAD_REQUEST, f"{name}: {exc}")


def parse_key_text(table: TableDef, text: str, max_bytes: int) -> bytes | Failure:
    """Key text from a path or parameter -> wire bytes, within the size limit."""
    if len(text) > max_bytes or len(text.encode()) > max_bytes:
        return too_large_key(max_bytes)
    try:
        wire = codecs(table)[0].parse_text(text)
    except KeyFormatError as exc:
        return Failure(FailureReason.BAD_REQUEST, str(exc))
    if len(wire) > max_bytes:
        return too_large_key(max_bytes)
    return wire


def parse_key_json(table: TableDef, value: object, index: int, max_bytes: int) -> bytes | Failure:
    """A key given in a JSON body -> wire bytes, within the size limit."""
    try:
        wire = codecs(table)[0].parse_json(value)
    except KeyFormatError as exc:
        return Failure(FailureReason.BAD_REQUEST, f"keys[{index}]: {exc}")
    if len(wire) > max_bytes:
        return Failure(
            FailureReason.TOO_LARGE, f"keys[{index}] is over the {max_bytes}-byte key limit"
        )
    return wire


def too_large_key(max_bytes: int) -> Failure:
    return Failure(
        FailureReason.TOO_LARGE,
        f"key is over the {max_bytes}-byte limit; keys that long cannot be looked up by path",
    )


def encode_cursor(store_key: bytes) -> str:
    return base64.urlsafe_b64encode(store_key).rstrip(b"=").decode("ascii")


def decode_cursor(text: str) -> bytes | Failure:
    try:
        padded = text + "=" * (-len(text) % 4)
        return base64.b64decode(padded, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return Failure(
            FailureReason.BAD_REQUEST,
            "cursor does not decode; pass the next_cursor of the previous page as it is",
        )


def no_fixed_placement(table: TableDef, endpoint: str) -> Failure:
    """400: `endpoint` reads one key's partition, which a table of partitioner `any` has not."""
    return Failure(
        FailureReason.BAD_REQUEST,
        f"table {table.name!r} has partitioner 'any': its keys have no fixed partition, so "
        f"{endpoint} cannot be answered for one key; GET /v1/tables/{table.name}/keys/{{key}} "
        "finds a key in whichever partition holds it (or register the table with the "
        "producer's partitioner)",
    )


def parse_after(text: str, table: TableDef) -> positions.Positions | Failure:
    """The positions of an `after=` token for a read of `table`."""
    try:
        return positions.decode(text, table.partitions)
    except positions.BadPositions as exc:
        return Failure(
            FailureReason.BAD_REQUEST,
            f"after={text[:80]!r} is not a consistency token of table {table.name!r}: {exc} "
            "(pass the token of an earlier answer as it came)",
        )


def partition_list(text: str, count: int) -> list[int] | Failure:
    """The `partitions=` parameter: a comma-separated list of partitions of a table of
    *count* partitions, sorted and without repeats."""
    try:
        parts = sorted({int(p) for p in text.split(",")})
    except ValueError:
        return Failure(FailureReason.BAD_REQUEST, f"partitions={text!r} is not a list of ints")
    if not parts or parts[0] < 0 or parts[-1] >= count:
        return Failure(FailureReason.BAD_REQUEST, f"partitions must be in 0..{count - 1}")
    return parts
