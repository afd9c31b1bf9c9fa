"""Table definitions: their JSON in the catalog, and where their keys belong."""

from __future__ import annotations

import orjson
import pytest

from sparkiq.core.errors import CatalogError
from sparkiq.core.partitioner import Partitioner, crc32_partition, fnv1a_partition, partition_for
from sparkiq.core.tables import TableDef, TableKind


def test_a_definition_round_trips_with_its_partitioner() -> None:
    for partitioner in Partitioner:
        table = TableDef("t", "topic", 6, partitioner=partitioner)
        assert TableDef.from_json(table.to_json()) == table
        assert table.summary()["partitioner"] == partitioner.value


def test_a_definition_written_before_partitioners_keeps_murmur2() -> None:
    old = orjson.dumps({"name": "t", "topic": "topic", "partitions": 6})
    assert TableDef.from_json(old).partitioner is Partitioner.MURMUR2


def test_an_unknown_partitioner_is_refused() -> None:
    raw = orjson.dumps({"name": "t", "topic": "x", "partitions": 2, "partitioner": "random"})
    with pytest.raises(CatalogError, match="random"):
        TableDef.from_json(raw)


@pytest.mark.parametrize(
    ("partitioner", "place"),
    [
        (Partitioner.MURMUR2, partition_for),
        (Partitioner.CRC32, crc32_partition),
        (Partitioner.FNV1A, fnv1a_partition),
    ],
)
def test_partition_of_follows_the_partitioner(partitioner: Partitioner, place: object) -> None:
    table = TableDef("t", "topic", 7, partitioner=partitioner)
    assert callable(place)
    for key in (b"", b"a", "caf\u00e9".encode(), b"x" * 500):
        assert table.partition_of(key) == place(key, 7)
    assert table.has_fixed_placement


def test_a_table_of_unknown_placement_has_no_partition_per_key() -> None:
    table = TableDef("t", "topic", 7, partitioner=Partitioner.ANY)
    assert table.partition_of(b"a") is None
    assert not table.has_fixed_placement


def test_global_and_retention_definitions_round_trip_and_are_checked() -> None:
    stores = TableDef("stores", "s", 3, kind=TableKind.GLOBAL)
    assert stores.is_global
    assert not stores.is_windowed
    sales = TableDef(
        "sales", "w", 3, kind=TableKind.WINDOWED, window_size_ms=60_000, retention_ms=120_000
    )
    for table in (stores, sales):
        assert TableDef.from_json(table.to_json()) == table
    assert sales.summary()["retention_ms"] == 120_000
    assert "retention_ms" not in stores.summary()
    with pytest.raises(CatalogError, match="only windowed tables take a retention"):
        TableDef("t", "t", 1, retention_ms=1_000)
    with pytest.raises(CatalogError, match="global: it has no window size"):
        TableDef("t", "t", 1, kind=TableKind.GLOBAL, window_size_ms=1_000)
    with pytest.raises(CatalogError, match="retention > 0"):
        TableDef("t", "t", 1, kind=TableKind.WINDOWED, window_size_ms=1, retention_ms=0)
