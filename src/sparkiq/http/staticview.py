"""A node's view over placements set by hand, and a store over a dict: the HTTP layer
without Kafka or RocksDB, for its benchmarks and tests.

`StaticView` implements `NodeView` with placements set by hand: each partition's active and
standbys, and this node's replica (role, ready, offset, lag); `apply` changes a key as the
restorer would, telling its watchers and keeping the change in an in-memory changelog
(`log`) that `replay` reads again. `DictStore` implements the read
side of `PartitionStore` over a sorted dict. Both live in the package because the benchmarks
(`bench_http.py`, `bench_placement.py`, `bench_lane.py`) serve them; what only tests use is in
`tests/support/`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable, Sequence

from sparkiq.core.progress import PipelineProgress
from sparkiq.core.queries import Order, ReplicaRole
from sparkiq.core.serde import key_codec, window_store_key
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.core.value_codecs import value_codec
from sparkiq.http.nodeview import ChangeRow, Placement, ReadableStore


class DictStore:
    """`ReadableStore` over a dict, with PartitionStore's scan semantics (hi inclusive)."""

    def __init__(self, items: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self.data: dict[bytes, bytes] = dict(items)
        self._keys: list[bytes] | None = None
        self.reads = 0  # get/multi_get/scan calls, for tests that check who read

    def put(self, store_key: bytes, value: bytes) -> None:
        self.data[store_key] = value
        self._keys = None

    def delete(self, store_key: bytes) -> None:
        self.data.pop(store_key, None)
        self._keys = None

    def get(self, store_key: bytes) -> bytes | None:
        self.reads += 1
        return self.data.get(store_key)

    def multi_get(self, store_keys: Sequence[bytes]) -> list[bytes | None]:
        self.reads += 1
        return [self.data.get(k) for k in store_keys]

    def scan(
        self,
        *,
        lo: bytes | None = None,
        hi: bytes | None = None,
        prefix: bytes | None = None,
        after: bytes | None = None,
        limit: int,
        order: Order = Order.ASC,
    ) -> list[tuple[bytes, bytes]]:
        self.reads += 1
        if self._keys is None:
            self._keys = sorted(self.data)
        keys = self._keys
        if order is Order.DESC:
            found = [
                (key, self.data[key])
                for key in reversed(keys)
                if (lo is None or key >= lo)
                and (hi is None or key <= hi)
                and (prefix is None or key.startswith(prefix))
                and (after is None or key < after)
            ]
            return found[:limit]
        start = max(k for k in (lo or b"", prefix or b"", after or b"") if k is not None)
        out: list[tuple[bytes, bytes]] = []
        for key in keys[bisect.bisect_left(keys, start) :]:
            if len(out) >= limit or (hi is not None and key > hi):
                break
            if prefix is not None and not key.startswith(prefix):
                break
            if after is not None and key <= after:
                continue
            out.append((key, self.data[key]))
        return out


class StaticView:
    """`NodeView` whose placements and stores are set by the test."""

    def __init__(self, url: str, tables: Sequence[TableDef] = ()) -> None:
        self._url = url
        self._tables = {t.name: t for t in tables}
        self._placements: dict[TopicPartition, Placement] = {}
        self._stores: dict[TopicPartition, ReadableStore] = {}
        self._changed = asyncio.Event()
        self.ready = True
        # The `kafka` object of /readyz and /v1/metadata: a test may say the brokers are away.
        self.kafka: dict[str, object] = {"reachable": True}
        self.loaded = True  # catalog_loaded()
        self.progress = PipelineProgress()  # batches a pipeline committed, added by tests
        self.misplaced: dict[str, int] = {}  # misplaced_records() by table name
        self._watches: dict[tuple[TopicPartition, bytes], list[StaticWatch]] = {}
        self._range_watches: dict[TopicPartition, list[StaticRangeWatch]] = {}
        # Each partition's changes applied here, in order: its changelog, as far as this
        # replica knows it (a test may drop the oldest, as compaction would).
        self.log: dict[TopicPartition, list[ChangeRow]] = {}
        self.replays: list[tuple[TopicPartition, int, int]] = []  # (tp, since, until) asked

    @property
    def url(self) -> str:
        return self._url

    # -- set up ------------------------------------------------------------------------------

    def add_table(self, table: TableDef) -> None:
        self._tables[table.name] = table
        self._notify()

    def set_placement(
        self,
        tp: TopicPartition,
        active: str | None,
        standbys: Sequence[str] = (),
        *,
        store: ReadableStore | None = None,
        ready: bool = True,
        offset: int | None = 0,
        lag: int | None = 0,
        lag_known: bool = True,
    ) -> None:
        """Who holds `tp`; this node's role follows from its URL in active/standbys."""
        role = None
        if active == self._url:
            role = ReplicaRole.ACTIVE
        elif self._url in standbys:
            role = ReplicaRole.STANDBY
        self._placements[tp] = Placement(
            tp,
            active,
            tuple(standbys),
            local_role=role,
            local_ready=ready and role is not None,
            local_offset=offset if role is not None else None,
            local_lag=lag if role is not None else None,
            local_lag_known=lag_known,
        )
        if store is not None:
            self._stores[tp] = store
        self._notify()

    def place_all(self, table: TableDef, owner_of: dict[int, str]) -> None:
        """Each partition of `table` active on the URL given for it; a DictStore if local."""
        for p, url in owner_of.items():
            tp = (table.topic, p)
            store = self._stores.get(tp) or (DictStore() if url == self._url else None)
            self.set_placement(tp, url, store=store)

    def apply(
        self,
        table: TableDef,
        key: object,
        value: object | None,
        *,
        window_start: int | None = None,
    ) -> int:
        """A change applied to this node's replica, as the restorer would: `key` (its window
        at `window_start` on a windowed table) set to `value` (None: deleted) in its
        partition's store, the replica's position one further, its watchers told. Returns
        the new position."""
        tp, store_key = where(table, key)
        if window_start is not None:
            store_key = window_store_key(store_key, window_start)
        encoded = None if value is None else value_codec(table).encode(value)
        store = self.local_store(tp)
        if encoded is None:
            store.delete(store_key)
        else:
            store.put(store_key, encoded)
        placement = self._placements[tp]
        position = (placement.local_offset or 0) + 1
        self._placements[tp] = dataclasses.replace(placement, local_offset=position)
        self.log.setdefault(tp, []).append((store_key, encoded, position))
        for watch in tuple(self._watches.get((tp, store_key), ())):
            watch.on_change(encoded, position)
        for ranged in tuple(self._range_watches.get(tp, ())):
            if ranged.accepts(store_key):
                ranged.on_change(store_key, encoded, position)
        return position

    def end_watches(self, tp: TopicPartition) -> None:
        """This node's replica of `tp` is gone: its watchers hear of it."""
        for (watched, _), watches in list(self._watches.items()):
            if watched == tp:
                for watch in tuple(watches):
                    watch.close()
                    watch.on_end()
        for ranged in self._range_watches.pop(tp, []):
            ranged.on_end()

    def watcher_count(self) -> int:
        """Watches of keys and of ranges open on this view."""
        keys = sum(len(w) for w in self._watches.values())
        return keys + sum(len(w) for w in self._range_watches.values())

    def local_store(self, tp: TopicPartition) -> DictStore:
        store = self._stores.setdefault(tp, DictStore())
        assert isinstance(store, DictStore)
        return store

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- NodeView ----------------------------------------------------------------------------

    def table(self, name: str) -> TableDef | None:
        return self._tables.get(name)

    def tables(self) -> Sequence[TableDef]:
        return list(self._tables.values())

    def placement(self, tp: TopicPartition) -> Placement:
        return self._placements.get(tp) or Placement(tp, None)

    def store(self, tp: TopicPartition) -> ReadableStore | None:
        return self._stores.get(tp)

    def local_active(self, tp: TopicPartition) -> tuple[ReadableStore, int | None] | None:
        placement = self._placements.get(tp)
        if placement is None or not placement.is_local_active:
            return None
        store = self._stores.get(tp)
        return None if store is None else (store, placement.local_offset)

    def metadata(self) -> dict[str, object]:
        return {
            "node": self._url,
            "partitions": {
                f"{tp[0]}:{tp[1]}": {"active": p.active, "standbys": list(p.standbys)}
                for tp, p in sorted(self._placements.items())
            },
        }

    def table_summary(self, table: TableDef) -> dict[str, object]:
        return {**table.summary(), "misplaced_records": self.misplaced_records(table.name)}

    def misplaced_records(self, table: str) -> int:
        return self.misplaced.get(table, 0)

    def is_ready(self) -> bool:
        return self.ready

    def watch_key(
        self,
        tp: TopicPartition,
        store_key: bytes,
        on_change: Callable[[bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> StaticWatch | None:
        placement = self._placements.get(tp)
        store = self._stores.get(tp)
        if placement is None or placement.local_role is None or store is None:
            return None
        watch = StaticWatch(self, (tp, store_key), on_change, on_end)
        watch.value = store.get(store_key)
        watch.position = placement.local_offset or 0
        self._watches.setdefault((tp, store_key), []).append(watch)
        return watch

    def watch_range(
        self,
        tp: TopicPartition,
        accepts: Callable[[bytes], bool],
        on_change: Callable[[bytes, bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> StaticRangeWatch | None:
        placement = self._placements.get(tp)
        if placement is None or placement.local_role is None or tp not in self._stores:
            return None
        watch = StaticRangeWatch(self, tp, accepts, on_change, on_end)
        watch.position = placement.local_offset or 0
        self._range_watches.setdefault(tp, []).append(watch)
        return watch

    async def replay(
        self, tp: TopicPartition, since: int, until: int, accepts: Callable[[bytes], bool]
    ) -> AsyncIterator[list[ChangeRow]]:
        """The changes in `log` at offsets [since, until) that `accepts` takes, one batch."""
        self.replays.append((tp, since, until))
        await asyncio.sleep(0)  # the changelog is read elsewhere: changes may come meanwhile
        rows = [row for row in self.log.get(tp, ()) if since < row[2] <= until and accepts(row[0])]
        if rows:
            yield rows

    def _unwatch_range(self, watch: StaticRangeWatch) -> None:
        watches = self._range_watches.get(watch.tp, [])
        if watch in watches:
            watches.remove(watch)
            if not watches:
                del self._range_watches[watch.tp]

    def _unwatch(self, watch: StaticWatch) -> None:
        watches = self._watches.get(watch.where, [])
        if watch in watches:
            watches.remove(watch)
            if not watches:
                del self._watches[watch.where]

    def unready_reason(self) -> str | None:
        return None if self.ready else "the test's view is not ready"

    def kafka_contact(self) -> dict[str, object]:
        return dict(self.kafka)

    def catalog_loaded(self) -> bool:
        return self.loaded

    def pipeline_progress(self) -> PipelineProgress:
        return self.progress

    async def changed(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)


def where(
    table: TableDef, key: object, partition: int | None = None
) -> tuple[TopicPartition, bytes]:
    """The partition (the table's partitioner's, unless given) and store key of `key` (its
    JSON form)."""
    codec = key_codec(table)
    wire = codec.parse_json(key)
    if partition is None:
        partition = table.partition_of(wire)
        if partition is None:
            raise ValueError(f"table {table.name!r} has no fixed placement: pass partition=")
    return (table.topic, partition), codec.wire_to_store(wire)


class StaticWatch:
    """A watch of one key of a `StaticView` (`KeyWatch`)."""

    def __init__(
        self,
        view: StaticView,
        where: tuple[TopicPartition, bytes],
        on_change: Callable[[bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> None:
        self._view = view
        self.where = where
        self.on_change = on_change
        self.on_end = on_end
        self.value: bytes | None = None
        self.position = 0

    def close(self) -> None:
        self._view._unwatch(self)


class StaticRangeWatch:
    """A watch of the keys of one partition of a `StaticView` in a range (`RangeWatch`)."""

    def __init__(
        self,
        view: StaticView,
        tp: TopicPartition,
        accepts: Callable[[bytes], bool],
        on_change: Callable[[bytes, bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> None:
        self._view = view
        self.tp = tp
        self.accepts = accepts
        self.on_change = on_change
        self.on_end = on_end
        self.position = 0

    def close(self) -> None:
        self._view._unwatch_range(self)
