"""Turns one consumed batch of changelog records into one store write batch per partition.

This is the restore ceiling (../shared/BASELINES.md), so the loop does per record only what
it must: read topic, partition, key and value, keep the key for the placement check, and put
them straight into the partition's write batch. Messages come in runs per partition, so the
partition's batch is looked up only when the run changes, and an offset is read only at a
run's last record.

Every record's partition is checked against the table's partitioner. A record in the wrong
partition (its producer used another partitioner than the table's) is stored all the same,
where it is, and counted in its run (`Run.misplaced`, with the first such key). The loop
only collects each run's keys; they are checked together after it (`check_placement`, in
bulk), which costs restore a few percent where a check per record cost about a fifth.
Lookups of tables with misplaced records ask every partition before answering "absent", so
the record stays findable.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import Message
from rocksdict import WriteBatch

from sparkiq.core.bulk_partitions import partitions_of
from sparkiq.core.errors import SparkiqError
from sparkiq.core.kstreams import SessionKeys, session_value, window_splitter
from sparkiq.core.partitioner import placer
from sparkiq.core.serde import KeyCodec, key_codec, window_store_key
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.kafka.consumers import says_nothing_wrong
from sparkiq.node.stores.partitionstore import PartitionStore

log = logging.getLogger(__name__)

StoreKeyFn = Callable[[bytes], bytes]


class Target(Protocol):
    """What a run needs of the replica its records go to (`replica.Replica` in this package)."""

    table: TableDef
    store: PartitionStore
    key_fn: StoreKeyFn | None


SkipFn = Callable[[TopicPartition, int, str], None]  # (tp, offset, why) of a skipped record

_BULK_FROM = 32  # keys of one table in a batch from which they are placed in bulk


class NewestStart:
    """The newest window start (ms) among the records a windowed table's key function turned
    into store keys (`store_key_fn`): what window retention measures its cutoff from
    (`sparkiq.node.restore.expiry`), known without reading the store."""

    __slots__ = ("ms",)

    def __init__(self) -> None:
        self.ms: int | None = None  # None: no record yet


def store_key_fn(table: TableDef, newest: NewestStart | None = None) -> StoreKeyFn | None:
    """The wire key -> store key transform of *table* (None: the identity); for a windowed
    table, *newest* is kept up to date with every record's window start. A session table's
    is a `SessionKeys`."""
    fn = _store_key_fn(table, newest)
    return SessionKeys(fn) if fn is not None and table.has_session_ends else fn


def _store_key_fn(table: TableDef, newest: NewestStart | None) -> StoreKeyFn | None:
    codec = key_codec(table)
    # Most formats store the wire bytes as they are; then the record loop skips the call.
    is_identity = type(codec).wire_to_store is KeyCodec.wire_to_store
    if not table.is_windowed:
        return None if is_identity else codec.wire_to_store
    key_to_store = codec.wire_to_store
    split = window_splitter(table.window_layout)
    if newest is None:

        def windowed(wire: bytes) -> bytes:
            key_wire, start_ms = split(wire)
            return window_store_key(key_to_store(key_wire), start_ms)

        return windowed

    def noting(wire: bytes) -> bytes:
        key_wire, start_ms = split(wire)
        # Made before the start is noted: a record whose key does not convert is skipped,
        # and must not move the retention's cutoff.
        store_key = window_store_key(key_to_store(key_wire), start_ms)
        # A comparison per record (~15 ns of a windowed record's ~400 ns here).
        known = newest.ms
        if known is None or start_ms > known:
            newest.ms = start_ms
        return store_key

    return noting


def _ignore_put(key: bytes, value: bytes) -> None:
    pass


def _ignore_delete(key: bytes) -> None:
    pass


class Run:
    """The records of one partition within one consumed batch, already in a write batch."""

    __slots__ = (
        "batch",
        "example",
        "key_fn",
        "keys",
        "last",
        "last_time_ms",
        "misplaced",
        "replica",
    )

    def __init__(self, replica: Target | None) -> None:
        self.replica = replica
        # A partition no longer assigned still gets a batch (never written) to keep the
        # record loop free of checks.
        self.batch: WriteBatch = (
            replica.store.new_batch() if replica is not None else WriteBatch(raw_mode=True)
        )
        self.key_fn = replica.key_fn if replica is not None else None
        # Wire keys of the run's records, checked against the partitioner after the loop
        # (`check_placement`); None when the placement is unknown (`any`).
        self.keys: list[bytes] | None = (
            [] if replica is not None and replica.table.has_fixed_placement else None
        )
        self.last: int | None = None  # offset of the run's last record (None: no record)
        # Kafka timestamp (ms) of the run's last record; 0 when it has none.
        self.last_time_ms = 0
        self.misplaced = 0  # records whose key the table's partitioner puts elsewhere
        self.example: bytes | None = None  # the wire key of the first of them


def check_placement(runs: Mapping[TopicPartition, Run]) -> None:
    """Count each run's records that the table's partitioner puts in another partition.

    The keys of all runs of one table are hashed together: one bulk call per table and
    consumed batch (`sparkiq.core.bulk_partitions`), whose fixed cost is then spread over up to
    a whole batch of keys; fewer than `_BULK_FROM` keys are placed one by one.
    """
    by_table: dict[int, list[tuple[int, Run, list[bytes], TableDef]]] = defaultdict(list)
    for (_, p), run in runs.items():
        if run.keys and run.replica is not None:
            table = run.replica.table
            by_table[id(table)].append((p, run, run.keys, table))
    for group in by_table.values():
        table = group[0][3]
        wires = [key for _, _, keys, _ in group for key in keys]
        # A window's key decides, without the window.
        keys = [table.key_of_window_key(k) for k in wires] if table.is_windowed else wires
        place = placer(table.partitioner) if len(keys) < _BULK_FROM else None
        if place is not None:
            # A caught-up restorer's batch of a record or a few: numpy's fixed costs (~50 us
            # a batch) would be most of the batch's cost.
            n = table.partitions
            start = 0
            for p, run, run_keys, _ in group:
                end = start + len(run_keys)
                wrong_at = [i for i in range(start, end) if place(keys[i], n) != p]
                run.misplaced = len(wrong_at)
                if wrong_at:
                    run.example = wires[wrong_at[0]]
                start = end
            continue
        placed = partitions_of(table.partitioner, keys, table.partitions)
        start = 0
        for p, run, run_keys, _ in group:
            end = start + len(run_keys)
            wrong = np.flatnonzero(placed[start:end] != p)
            run.misplaced = len(wrong)
            if run.misplaced:
                run.example = wires[start + int(wrong[0])]
            start = end


def split_batch(
    messages: Sequence[Message], replicas: Mapping[TopicPartition, Target], skip: SkipFn
) -> tuple[dict[TopicPartition, Run], dict[TopicPartition, int], dict[TopicPartition, int]]:
    """One `Run` per partition in *messages*, the end-of-partition offsets seen, and the
    offsets the broker found out of range (the consumer stopped fetching those partitions).

    A record without a usable key is passed to *skip* and still counts as the run's last
    record: the checkpoint moves past it.
    """
    runs: dict[TopicPartition, Run] = {}
    eofs: dict[TopicPartition, int] = {}
    out_of_range: dict[TopicPartition, int] = {}
    run: Run | None = None
    put: Callable[[bytes, bytes], None] = _ignore_put
    delete: Callable[[bytes], None] = _ignore_delete
    fn: StoreKeyFn | None = None
    with_end = False  # a session table's run: the stored value keeps the session's end
    collect: Callable[[bytes], None] | None = None
    topic: str | None = None
    partition = -1
    prev: Any = None
    # Typed as Any: a consumed message always carries topic, partition and offset, and
    # this loop runs per record, so it does no Optional checks.
    batch: Sequence[Any] = messages
    for msg in batch:
        p = msg.partition()
        t = msg.topic()
        if p != partition or t != topic:
            if prev is not None and run is not None:
                run.last = prev.offset()
                run.last_time_ms = max(prev.timestamp()[1], 0)
            topic, partition, prev = t, p, None
            run = runs.get((t, p))
            if run is None:
                run = runs[(t, p)] = Run(replicas.get((t, p)))
            put, delete, fn = run.batch.put, run.batch.delete, run.key_fn
            with_end = isinstance(fn, SessionKeys)
            collect = None if run.keys is None else run.keys.append
        key = msg.key()
        if key is None:
            # Rare: an error event (end of partition) or a record without a key.
            err = msg.error()
            if err is not None:
                if err.code() == CKafkaError._PARTITION_EOF:
                    eofs[(t, p)] = msg.offset()
                elif err.code() == CKafkaError._AUTO_OFFSET_RESET:
                    out_of_range[(t, p)] = msg.offset()
                elif err.code() == CKafkaError.TOPIC_AUTHORIZATION_FAILED:
                    # A table registered after the node started, which it may not read.
                    log.error(
                        "changelog %s[%s]: this node's principal may not READ topic %s (%s); "
                        "grant it READ on the topic",
                        t,
                        p,
                        t,
                        err.name(),
                    )
                elif not says_nothing_wrong(err):
                    log.warning("changelog fetch error on %s[%s]: %s", t, p, err)
                continue
            skip((t, p), msg.offset(), "has no key")
            prev = msg
            continue
        if collect is not None:
            collect(key)
        if fn is not None:
            try:
                key = fn(key)
            except (SparkiqError, ValueError) as exc:
                skip((t, p), msg.offset(), f"has a malformed key ({exc})")
                prev = msg
                continue
        value = msg.value()
        if value is None:
            delete(key)
        elif with_end:
            put(key, session_value(msg.key(), value))
        else:
            put(key, value)
        prev = msg
    if prev is not None and run is not None:
        run.last = prev.offset()
        run.last_time_ms = max(prev.timestamp()[1], 0)
    check_placement(runs)
    return runs, eofs, out_of_range
