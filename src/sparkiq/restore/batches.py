"""Turns one consumed batch of changelog records into one store write batch per partition.

This is the restore ceiling (../shared/BASELINES.md), so the loop does per record only what
it must: read topic, partition, key and value, check that the table's partitioner puts the
key in this partition, and put them straight into the partition's write batch. Messages come
in runs per partition, so the partition's batch is looked up only when the run changes, and
an offset is read only at a run's last record.

A record in the wrong partition (its producer used another partitioner than the table's) is
stored all the same, where it is, and counted in its run (`Run.misplaced`, with the first
such key): lookups of tables with misplaced records ask every partition before answering
"absent", so the record stays findable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import Message
from rocksdict import WriteBatch

from sparkiq.errors import SparkiqError
from sparkiq.partitioner import PlaceFn
from sparkiq.serde import KeyCodec, key_codec, split_window_wire_key, window_store_key
from sparkiq.tables import TableDef
from sparkiq.topology import TopicPartition

if TYPE_CHECKING:
    from sparkiq.restore.replica import Replica

log = logging.getLogger(__name__)

StoreKeyFn = Callable[[bytes], bytes]
SkipFn = Callable[[TopicPartition, int, str], None]  # (tp, offset, why) of a skipped record


def store_key_fn(table: TableDef) -> StoreKeyFn | None:
    """The wire key -> store key transform of *table* (None: the identity)."""
    codec = key_codec(table)
    # Most formats store the wire bytes as they are; then the record loop skips the call.
    is_identity = type(codec).wire_to_store is KeyCodec.wire_to_store
    if not table.is_windowed:
        return None if is_identity else codec.wire_to_store
    key_to_store = codec.wire_to_store

    def windowed(wire: bytes) -> bytes:
        key_wire, start_ms = split_window_wire_key(wire)
        return window_store_key(key_to_store(key_wire), start_ms)

    return windowed


def _ignore_put(key: bytes, value: bytes) -> None:
    pass


def _ignore_delete(key: bytes) -> None:
    pass


class Run:
    """The records of one partition within one consumed batch, already in a write batch."""

    __slots__ = ("batch", "example", "key_fn", "last", "misplaced", "place", "replica")

    def __init__(self, replica: Replica | None) -> None:
        self.replica = replica
        # A partition no longer assigned still gets a batch (never written) to keep the
        # record loop free of checks.
        self.batch: WriteBatch = (
            replica.store.new_batch() if replica is not None else WriteBatch(raw_mode=True)
        )
        self.key_fn = replica.key_fn if replica is not None else None
        self.place = replica.place if replica is not None else None
        self.last: int | None = None  # offset of the run's last record (None: no record)
        self.misplaced = 0  # records whose key the table's partitioner puts elsewhere
        self.example: bytes | None = None  # the wire key of the first of them


def _misplaced(run: Run, key: bytes) -> None:
    run.misplaced += 1
    if run.example is None:
        run.example = key


def split_batch(
    messages: Sequence[Message], replicas: Mapping[TopicPartition, Replica], skip: SkipFn
) -> tuple[dict[TopicPartition, Run], dict[TopicPartition, int]]:
    """One `Run` per partition in *messages*, and the end-of-partition offsets seen.

    A record without a usable key is passed to *skip* and still counts as the run's last
    record: the checkpoint moves past it.
    """
    runs: dict[TopicPartition, Run] = {}
    eofs: dict[TopicPartition, int] = {}
    run: Run | None = None
    put: Callable[[bytes, bytes], None] = _ignore_put
    delete: Callable[[bytes], None] = _ignore_delete
    fn: StoreKeyFn | None = None
    place: PlaceFn | None = None
    count = 1
    windowed = False
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
            topic, partition, prev = t, p, None
            run = runs.get((t, p))
            if run is None:
                run = runs[(t, p)] = Run(replicas.get((t, p)))
            put, delete, fn, place = run.batch.put, run.batch.delete, run.key_fn, run.place
            if run.replica is not None:
                count = run.replica.table.partitions
                windowed = run.replica.table.is_windowed
        key = msg.key()
        if key is None:
            # Rare: an error event (end of partition) or a record without a key.
            err = msg.error()
            if err is not None:
                if err.code() == CKafkaError._PARTITION_EOF:
                    eofs[(t, p)] = msg.offset()
                else:
                    log.warning("changelog fetch error on %s[%s]: %s", t, p, err)
                continue
            skip((t, p), msg.offset(), "has no key")
            prev = msg
            continue
        # A windowed key ends with its 8-byte window start; its key alone decides.
        if place is not None and place(key[:-8] if windowed else key, count) != p:
            _misplaced(runs[(t, p)], key)
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
        else:
            put(key, value)
        prev = msg
    if prev is not None and run is not None:
        run.last = prev.offset()
    return runs, eofs
