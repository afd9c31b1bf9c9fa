"""Kafka Streams tables for the unit tests: a session store's table and the big-endian
numbers its changelog keys and values are made of."""

from __future__ import annotations

from sparkiq.core.kstreams import StoreType, kstreams_table
from sparkiq.core.tables import TableDef


def be(n: int, size: int) -> bytes:
    """*n* as *size* big-endian bytes, as Kafka Streams writes numbers."""
    return n.to_bytes(size, "big", signed=True)


def session_table(*, partitions: int = 4, retention_ms: int | None = None) -> TableDef:
    """The table `sessions` of the session store `sessions` of application `shop` (String
    keys, Long values)."""
    return kstreams_table(
        "sessions",
        application_id="shop",
        store="sessions",
        store_type=StoreType.SESSION,
        partitions=partitions,
        key_serde="string",
        value_serde="long",
        retention_ms=retention_ms,
    )
