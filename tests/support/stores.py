"""Writing a value into the stores of a `StaticView` (or a dict of `DictStore`s) where the
table's partitioner puts its key, as the restorer would: for tests of the HTTP layer."""

from __future__ import annotations

from sparkiq.core.serde import window_store_key
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.core.value_codecs import value_codec
from sparkiq.http.staticview import DictStore, StaticView, where


def put_value(
    stores: dict[TopicPartition, DictStore] | StaticView,
    table: TableDef,
    key: object,
    value: object,
    *,
    window_start: int | None = None,
    partition: int | None = None,
) -> int:
    """Write `key` (its JSON form) -> `value` where the table's partitioner puts it, or in
    `partition` (a misplaced record, or a table of partitioner `any`); the partition."""
    tp, store_key = where(table, key, partition)
    if window_start is not None:
        store_key = window_store_key(store_key, window_start)
    if isinstance(stores, StaticView):
        store = stores.local_store(tp)
    else:
        store = stores.setdefault(tp, DictStore())
    store.put(store_key, value_codec(table).encode(value))
    return tp[1]
