"""What a store records about itself: the table it was written for and its checkpoint.

A store (`sparkiq.node.stores.partitionstore`) keeps, in its `meta` column family, the definition of
the table it holds and the next changelog offset to apply. Here: those keys, whether a
store written for one definition can serve another (`compatible`), the error when it
cannot (`mismatch`), and reading both from a store that is not open (`read_store_meta`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from sparkiq.core.errors import CatalogError, StateDirMismatchError
from sparkiq.core.tables import TableDef, TableKind

META_CF = "meta"
OFFSET_KEY = b"next_offset"
TABLE_KEY = b"table"
# Kinds whose stores hold the same records (a key's latest value): a table may move between
# them (say kv -> global) and keep its stores.
_PLAIN = {TableKind.KV, TableKind.GLOBAL}


def compatible(a: TableDef, b: TableDef) -> bool:
    """Whether data written for *a* can be served as *b* (descriptions may differ)."""
    return (
        a.topic == b.topic
        and a.partitions == b.partitions
        and a.key_format == b.key_format
        and a.value_format == b.value_format
        and (a.kind == b.kind or {a.kind, b.kind} <= _PLAIN)
        and a.window_size_ms == b.window_size_ms
        and a.window_layout == b.window_layout
        and a.key_schema == b.key_schema
        and a.value_schema == b.value_schema
    )


def mismatch(path: Path, written: TableDef | str, wanted: TableDef) -> StateDirMismatchError:
    """The error for a store at *path* written for another table (*written*) than *wanted*."""
    if isinstance(written, TableDef):
        what = (
            f"table {written.name!r} (topic {written.topic!r}, {written.partitions} partitions, "
            f"{written.kind.value}, keys {written.key_format.value}, "
            f"values {written.value_format.value})"
        )
    else:
        what = written
    return StateDirMismatchError(
        f"state dir {path} was written for {what}, not for table {wanted.name!r} "
        f"(topic {wanted.topic!r}, {wanted.partitions} partitions, {wanted.kind.value}, "
        f"keys {wanted.key_format.value}, values {wanted.value_format.value}); "
        "delete it or pass another --state-dir"
    )


def read_store_meta(path: Path) -> tuple[TableDef | None, int | None]:
    """Table definition and checkpoint of a store that is not open (read-only, no lock)."""
    try:
        db = Rdict(
            str(path),
            Options(raw_mode=True),
            column_families={META_CF: Options(raw_mode=True)},
            access_type=AccessType.read_only(False),
        )
    except Exception:
        return None, None
    try:
        meta = db.get_column_family(META_CF)
        try:
            raw_table = meta.get(TABLE_KEY)
            raw_offset = meta.get(OFFSET_KEY)
        finally:
            meta.close()
    finally:
        db.close()
    table: TableDef | None = None
    if raw_table is not None:
        with contextlib.suppress(CatalogError):
            table = TableDef.from_json(raw_table)
    offset = int.from_bytes(raw_offset, "big") if raw_offset is not None else None
    return table, offset
