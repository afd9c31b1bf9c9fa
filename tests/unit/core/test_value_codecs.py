"""Value formats: rendered as JSON, embedded in answers, encoded as producers write them."""

from __future__ import annotations

import struct

import orjson
import pytest

from sparkiq.core.errors import CatalogError, FormatError
from sparkiq.core.tables import Format, TableDef
from sparkiq.core.value_codecs import value_codec


def table(value: Format = Format.JSON, **kw: object) -> TableDef:
    return TableDef(
        name="t",
        topic="t.changelog",
        partitions=3,
        key_format=Format.STRING,
        value_format=value,
        **kw,
    )  # type: ignore[arg-type]


def test_json_values_render_and_embed() -> None:
    vc = value_codec(table())
    wire = b'{"total": 12.5, "n": 3}'
    assert vc.render(wire) == {"total": 12.5, "n": 3}
    embedded = b'{"value":' + vc.render_json(wire) + b"}"
    assert orjson.loads(embedded) == {"value": {"total": 12.5, "n": 3}}
    assert vc.encode({"a": [1]}) == b'{"a":[1]}'
    for bad in (b'{"a":1}{"b":2}', b'{"a":', b'"\xff"', b"NaN"):
        with pytest.raises(FormatError, match="is not json"):
            vc.render_json(bad)


@pytest.mark.parametrize(
    ("fmt", "value", "wire", "rendered"),
    [
        (Format.STRING, "hé", "hé".encode(), "hé"),
        (Format.LONG, -3, struct.pack(">q", -3), -3),
        (Format.INT, 70000, struct.pack(">i", 70000), 70000),
        (Format.BYTES, b"\x00\xfb", b"\x00\xfb", "APs"),
    ],
)
def test_scalar_values(fmt: Format, value: object, wire: bytes, rendered: object) -> None:
    vc = value_codec(table(value=fmt))
    assert vc.encode(value) == wire
    assert vc.render(wire) == rendered
    assert orjson.loads(vc.render_json(wire)) == rendered


def test_value_encode_errors() -> None:
    with pytest.raises(FormatError, match="long value of table 't'"):
        value_codec(table(value=Format.LONG)).encode("12")
    with pytest.raises(FormatError):
        value_codec(table(value=Format.INT)).encode(2**40)
    with pytest.raises(FormatError, match="expected 8 bytes"):
        value_codec(table(value=Format.LONG)).render(b"\x01")


def test_invalid_avro_schema_is_a_catalog_error() -> None:
    with pytest.raises(CatalogError, match="invalid value_schema"):
        value_codec(table(value=Format.AVRO, value_schema='{"type": "nope"}'))
