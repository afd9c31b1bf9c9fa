"""Whether a topic's records decode in the formats a table declares, and which would.

`table create` samples the topic (`sparkiq.kafka.sample.sample_records`) and hands the
records here before it registers anything: a table whose keys do not decode in its key
format would answer "not found" for every key, and one whose values do not decode would
fail its reads later. Decoding is strict here (a string must be valid UTF-8), stricter than
answers, which show undecodable text with replacement characters.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from sparkiq.core.errors import CatalogError, FormatError
from sparkiq.core.kstreams import split_avro_sr
from sparkiq.core.serde import avro_decode, parse_avro_schema, shorten
from sparkiq.core.tables import Format, TableDef, TableKind

# What follows the key in a windowed changelog key, by its length (`WindowLayout`).
_WINDOW_PARTS = {
    8: "an 8-byte window start",
    12: "an 8-byte window start and a 4-byte sequence number",
    16: "an 8-byte session end and start",
}
# Formats tried when one does not fit, in the order they are suggested.
_KEY_CANDIDATES = (Format.STRING, Format.JSON, Format.LONG, Format.INT, Format.BYTES)
_VALUE_CANDIDATES = (Format.JSON, Format.STRING, Format.LONG, Format.INT, Format.BYTES)


class SampledRecord(NamedTuple):
    """One record read from a topic: where it is, its key and its value (None: tombstone)."""

    partition: int
    offset: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class FormatFinding:
    """How the sampled keys (or values) of a topic decode in one declared format."""

    part: str  # "key" or "value"
    declared: Format
    checked: int
    failed: int
    example: SampledRecord | None  # the first that failed
    reason: str  # why it failed
    fitting: tuple[Format, ...]  # formats every sampled one decodes in

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def describe(self, topic: str) -> str:
        """One sentence: what failed, an example, and what to write instead."""
        assert self.example is not None
        shown = self.example.key if self.part == "key" else self.example.value
        option = f"--{self.part}-format"
        # bytes takes anything: worth suggesting only beside a format that says more.
        if self.fitting and self.fitting[0] is not Format.BYTES:
            instead = (
                f"write {option} {self.fitting[0].value} (the sampled {self.part}s decode as "
                f"{', '.join(f.value for f in self.fitting)})"
            )
        else:
            instead = f"check {option} and the producer's serializer ({option} bytes takes any)"
        return (
            f"{self.failed} of {self.checked} sampled {self.part}s of topic {topic!r} do not "
            f"decode as {self.declared.value} (e.g. partition {self.example.partition} offset "
            f"{self.example.offset}: {shorten(repr(shown))}: {self.reason}); {instead}"
        )


def check_formats(table: TableDef, records: Sequence[SampledRecord]) -> list[FormatFinding]:
    """The key finding and the value finding of `records` against `table`'s formats.

    Windowed tables' keys end with their window (`WindowLayout`), which is not part of the key's
    format. Tombstones (null values) have no value to check. CatalogError when a given Avro
    schema does not parse.
    """
    suffix = table.window_layout.suffix_bytes if table.kind is TableKind.WINDOWED else 0
    keys = [(r, _key_part(r.key, suffix)) for r in records]
    values = [(r, r.value) for r in records if r.value is not None]
    return [
        _finding(
            "key",
            table.key_format,
            table.key_schema,
            table.name,
            keys,
            _KEY_CANDIDATES,
            too_short=f"too short for a key and {_WINDOW_PARTS[suffix]}" if suffix else "",
        ),
        _finding(
            "value", table.value_format, table.value_schema, table.name, values, _VALUE_CANDIDATES
        ),
    ]


def _key_part(key: bytes, suffix: int) -> bytes | None:
    """The key without the *suffix* bytes of its window; None when a windowed key is too
    short to have them."""
    if not suffix:
        return key
    return key[:-suffix] if len(key) >= suffix else None


def _finding(
    part: str,
    declared: Format,
    schema: str | None,
    table_name: str,
    items: Iterable[tuple[SampledRecord, bytes | None]],
    candidates: tuple[Format, ...],
    too_short: str = "",
) -> FormatFinding:
    parsed_schema = None
    if declared in (Format.AVRO, Format.AVRO_SR):
        if schema is None:
            raise CatalogError(
                f"table {table_name!r} declares Avro {part}s without a schema; give "
                f"--{part}-schema FILE"
            )
        parsed_schema = parse_avro_schema(table_name, f"{part} schema", schema)
    checked = failed = 0
    example: SampledRecord | None = None
    reason = ""
    fits = dict.fromkeys(candidates, True)
    for record, data in items:
        checked += 1
        why = (
            too_short if data is None else _why_not(declared, data, parsed_schema, table_name, part)
        )
        if why is not None:
            failed += 1
            if example is None:
                example, reason = record, why
        for fmt in candidates:
            if fits[fmt] and (data is None or _why_not(fmt, data, None, table_name, part)):
                fits[fmt] = False
    fitting = tuple(f for f, fit in fits.items() if fit) if checked else ()
    return FormatFinding(part, declared, checked, failed, example, reason, fitting)


def _why_not(
    fmt: Format, data: bytes, avro_schema: object, table_name: str, part: str
) -> str | None:
    """Why `data` is not a `fmt` key or value, or None when it is."""
    if fmt is Format.STRING:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"not UTF-8 ({exc.reason} at byte {exc.start})"
        return None
    if fmt in (Format.LONG, Format.INT):
        size = 8 if fmt is Format.LONG else 4
        article = "an" if fmt is Format.INT else "a"
        return (
            None if len(data) == size else f"{article} {fmt.value} is {size} bytes, got {len(data)}"
        )
    if fmt is Format.JSON:
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return f"not JSON ({exc.msg})"
        if part == "key" and orjson.dumps(parsed) != data:
            # A key typed in a lookup is serialised compactly (sparkiq.core.serde): a key
            # written with spaces could never be found.
            return "JSON, but not compact (no spaces, as orjson.dumps writes it)"
        return None
    if fmt in (Format.AVRO, Format.AVRO_SR):
        if avro_schema is None:
            return "no schema"
        try:
            if fmt is Format.AVRO_SR:
                data = split_avro_sr(data)[1]
            avro_decode(avro_schema, data, table_name, part)
        except FormatError as exc:
            return str(exc).split(": ", 1)[-1]
        return None
    return None  # bytes: anything
