"""Restores changelog partitions into their stores, follows them, and reports state and lag.

One `Restorer` per node runs one thread with one confluent-kafka consumer in `assign()` mode
(no group: the sparkiq group member decides who holds what; this only fetches). `assign()`
may be called from any thread at any time; the restorer thread reconciles the consumer with
the wanted set on its next turn:

- an added partition gets its store opened (resuming from the store's checkpoint) and is
  fetched from there;
- a removed partition is unassigned and its store closed, left on disk for a later return;
- a partition that changes role (active <-> standby) keeps its store and position.

An active partition is RESTORING until its position reaches the true end offset measured
when it was assigned (`sparkiq.kafka.offsets.true_end_offsets`, which also works on the dev
broker whose reported end is short), then ACTIVE. Standbys are STANDBY and follow forever.
Each consumed batch becomes one `PartitionStore.apply` per partition: data and checkpoint
in one write.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence, Set
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import TopicPartition as CTopicPartition
from rocksdict import WriteBatch

from sparkiq.errors import SparkiqError, StoreError
from sparkiq.kafka.offsets import probe_consumer, true_end_offsets
from sparkiq.serde import KeyCodec, key_codec, split_window_wire_key, window_store_key
from sparkiq.store import PartitionStore, StoreRegistry
from sparkiq.tables import TableDef
from sparkiq.topology import TopicPartition

log = logging.getLogger(__name__)

# Tuned for restore throughput on a 2-core box (../shared/BASELINES.md): large fetches, a deep
# local queue, and a short fetch wait so a standby sees new records within ~100 ms.
_CONSUMER_CONF: Mapping[str, str | int | float | bool] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 100,
    "max.partition.fetch.bytes": 10 * 1024 * 1024,
    "fetch.max.bytes": 60 * 1024 * 1024,
    "queued.min.messages": 1_000_000,
}

BATCH_SIZE = 10_000
_POLL_TIMEOUT_S = 0.1
_WATERMARK_EVERY_S = 1.0
_DISK_LAGS_EVERY_S = 5.0
_RETRY_AFTER_FAILURE_S = 1.0

StoreKeyFn = Callable[[bytes], bytes]
_T = TypeVar("_T")


class ReplicaState(StrEnum):
    """What a node's copy of a partition is doing."""

    RESTORING = "restoring"  # active role, catching up to the end seen at assignment
    ACTIVE = "active"  # active role, caught up: serves reads
    STANDBY = "standby"  # follows the changelog; may answer reads within a lag bound


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """A snapshot of one assigned partition."""

    tp: TopicPartition
    table: str
    state: ReplicaState
    position: int  # next offset to apply
    end: int  # true end offset last seen
    lag: int  # end - position, >= 0


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


class _Run:
    """The records of one partition within one consumed batch, already in a write batch."""

    __slots__ = ("batch", "key_fn", "last", "replica")

    def __init__(self, replica: _Replica | None) -> None:
        self.replica = replica
        # A partition no longer assigned still gets a batch (never written) to keep the
        # record loop free of checks.
        self.batch: WriteBatch = (
            replica.store.new_batch() if replica is not None else WriteBatch(raw_mode=True)
        )
        self.key_fn = replica.key_fn if replica is not None else None
        self.last: int | None = None  # offset of the run's last record


class _EndProbe:
    """Runs true-end-offset reads off the restorer thread.

    A read waits on short fetches (~0.2 s on the dev broker) that would otherwise stall
    restoring. One worker thread owns the probe consumer, so it is never used concurrently.
    """

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="sparkiq-restorer-ends")
        self._consumer: Consumer | None = None

    def submit(self, fn: Callable[[Consumer], _T]) -> Future[_T]:
        return self._pool.submit(self._call, fn)

    def _call(self, fn: Callable[[Consumer], _T]) -> _T:
        if self._consumer is None:
            self._consumer = probe_consumer(self._bootstrap)
        return fn(self._consumer)

    def _close_consumer(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pool.submit(self._close_consumer)
        self._pool.shutdown(wait=True, cancel_futures=False)


class _Replica:
    """Restorer-side bookkeeping of one assigned partition (guarded by the restorer lock)."""

    __slots__ = (
        "end",
        "is_active",
        "key_fn",
        "measuring",
        "position",
        "role_epoch",
        "skipped",
        "state",
        "store",
        "table",
        "target",
        "tp",
    )

    def __init__(self, tp: TopicPartition, table: TableDef, store: PartitionStore) -> None:
        self.tp = tp
        self.table = table
        self.store = store
        self.key_fn = store_key_fn(table)
        self.position = store.next_offset or 0
        self.end = self.position
        self.target: int | None = None  # true end measured when the active role arrived
        self.role_epoch = 0  # bumped on every role change; stale end measurements are dropped
        self.measuring: int | None = None  # role_epoch of the end measurement under way
        self.is_active = False
        self.state = ReplicaState.STANDBY
        self.skipped = 0

    def set_role(self, active: bool) -> None:
        if active == self.is_active:
            return
        self.is_active = active
        self.state = ReplicaState.RESTORING if active else ReplicaState.STANDBY
        self.target = None
        self.role_epoch += 1

    def advance(self, position: int) -> None:
        self.position = position
        if position > self.end:
            self.end = position

    def check_caught_up(self) -> bool:
        """Moves RESTORING -> ACTIVE once the target is reached; True if it did."""
        if (
            self.state is ReplicaState.RESTORING
            and self.target is not None
            and self.position >= self.target
        ):
            self.state = ReplicaState.ACTIVE
            return True
        return False

    def status(self) -> PartitionStatus:
        return PartitionStatus(
            tp=self.tp,
            table=self.table.name,
            state=self.state,
            position=self.position,
            end=self.end,
            lag=max(self.end - self.position, 0),
        )


class Restorer:
    """Follows the assigned changelog partitions into their stores; reports state and lag."""

    def __init__(
        self,
        bootstrap: str,
        registry: StoreRegistry,
        table_for_topic: Callable[[str], TableDef | None],
        on_change: Callable[[], None] | None = None,
        kafka_config: Mapping[str, str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.registry = registry
        self._table_for_topic = table_for_topic
        self._on_change = on_change
        self._kafka_config = dict(kafka_config or {})
        self._lock = threading.Lock()
        self._replicas: dict[TopicPartition, _Replica] = {}
        self._closing: dict[TopicPartition, _Replica] = {}
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Published snapshots, replaced whole so readers need no lock.
        self._statuses: dict[TopicPartition, PartitionStatus] = {}
        self._stores: dict[TopicPartition, PartitionStore] = {}
        self._disk_lags: dict[TopicPartition, int] = {}
        self._measured: list[tuple[_Replica, int, int]] = []  # (replica, role_epoch, end)
        self.records_applied = 0  # records written to stores since start (tombstones too)
        self.skipped_records = 0  # records without a usable key, since start

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping.clear()
        # Measured once here so a node joining its group at once can report its stores.
        self._refresh_disk_lags(None)
        self._thread = threading.Thread(target=self._run, name="sparkiq-restorer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop fetching and close every store this restorer opened (left on disk)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping.set()
        self._dirty.set()
        thread.join()

    # -- assignment (any thread) ----------------------------------------------------------

    def assign(self, actives: Set[TopicPartition], standbys: Set[TopicPartition]) -> None:
        """Follow exactly *actives* and *standbys* from now on (a TP in both is active).

        Stores of added partitions are opened here, so a state dir written for another
        table definition raises `StateDirMismatchError` to the caller.
        """
        wanted: dict[TopicPartition, bool] = {tp: False for tp in standbys}
        wanted.update((tp, True) for tp in actives)
        opened: list[tuple[TopicPartition, TableDef]] = []
        with self._lock:
            try:
                for tp, active in wanted.items():
                    replica: _Replica | None = self._replicas.get(tp) or self._closing.pop(tp, None)
                    if replica is None:
                        table = self._table_for_topic(tp[0])
                        if table is None:
                            log.warning(
                                "no table is registered for changelog topic %r; partition "
                                "%d is not restored until the catalog lists it",
                                tp[0],
                                tp[1],
                            )
                            continue
                        store = self.registry.open(table, tp[1])
                        opened.append((tp, table))
                        replica = _Replica(tp, table, store)
                        replica.set_role(active)
                    elif replica.is_active != active:
                        replica.set_role(active)
                    self._replicas[tp] = replica
            except SparkiqError:
                for tp, table in opened:
                    self._replicas.pop(tp, None)
                    self.registry.close(table.name, tp[1])
                raise
            for tp in list(self._replicas):
                if tp not in wanted:
                    self._closing[tp] = self._replicas.pop(tp)
            self._publish()
        self._dirty.set()

    # -- views (any thread) ---------------------------------------------------------------

    def status(self, tp: TopicPartition) -> PartitionStatus | None:
        return self._statuses.get(tp)

    def statuses(self) -> dict[TopicPartition, PartitionStatus]:
        return dict(self._statuses)

    def store(self, tp: TopicPartition) -> PartitionStore | None:
        return self._stores.get(tp)

    def lags(self) -> dict[TopicPartition, int]:
        """Lag of every assigned partition and of every store left on disk."""
        out = dict(self._disk_lags)
        out.update((tp, st.lag) for tp, st in self._statuses.items())
        return out

    # -- restorer thread ------------------------------------------------------------------

    def _run(self) -> None:
        conf: dict[str, str | int | float | bool] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": f"sparkiq-restore-{uuid.uuid4()}",  # required by librdkafka, never joined
        }
        conf.update(_CONSUMER_CONF)
        conf.update(self._kafka_config)
        consumer = Consumer(conf)
        ends = _EndProbe(self.bootstrap)
        fetching: set[TopicPartition] = set()
        next_marks = next_disk = time.monotonic() + _DISK_LAGS_EVERY_S
        disk_job: Future[None] | None = None
        try:
            while not self._stopping.is_set():
                try:
                    if self._dirty.is_set():
                        self._dirty.clear()
                        self._reconcile(consumer, ends, fetching)
                    if not fetching:
                        self._dirty.wait(_POLL_TIMEOUT_S)
                    else:
                        messages = consumer.consume(BATCH_SIZE, _POLL_TIMEOUT_S)
                        if messages:
                            self._apply(consumer, messages)
                    now = time.monotonic()
                    if now >= next_marks and fetching:
                        next_marks = now + _WATERMARK_EVERY_S
                        self._update_ends_from_watermarks(consumer)
                    if now >= next_disk and (disk_job is None or disk_job.done()):
                        next_disk = now + _DISK_LAGS_EVERY_S
                        disk_job = ends.submit(self._refresh_disk_lags)
                except Exception:
                    log.exception("restorer turn failed; retrying")
                    self._stopping.wait(_RETRY_AFTER_FAILURE_S)
        finally:
            with contextlib.suppress(Exception):
                consumer.close()
            ends.close()
            with self._lock:
                replicas = [*self._replicas.values(), *self._closing.values()]
                self._replicas.clear()
                self._closing.clear()
                for replica in replicas:
                    self.registry.close(replica.table.name, replica.tp[1])
                self._publish()

    def _reconcile(
        self, consumer: Consumer, ends: _EndProbe, fetching: set[TopicPartition]
    ) -> None:
        """Bring the consumer in line with the wanted partitions; measure restore targets."""
        with self._lock:
            wanted = dict(self._replicas)
            closing, self._closing = self._closing, {}
        gone = [tp for tp in fetching if tp not in wanted]
        if gone:
            consumer.incremental_unassign([CTopicPartition(t, p) for t, p in gone])
            fetching.difference_update(gone)
        added = [tp for tp in wanted if tp not in fetching]
        with self._lock:
            # Under the lock: an assign() racing with this must not reopen a store that is
            # being closed (the registry would hand it the same, soon closed, instance).
            left: dict[TopicPartition, int] = {}
            for tp, leaving in closing.items():
                if tp not in self._replicas:
                    self.registry.close(leaving.table.name, tp[1])
                    if leaving.store.next_offset is not None:
                        left[tp] = max(leaving.end - leaving.position, 0)
            if left:
                # Reported at once, not only at the next on-disk scan, so a rejoin that
                # follows this unassignment already offers the store.
                self._disk_lags = {**self._disk_lags, **left}
            for replica, epoch, end in self._measured:
                if (
                    self._replicas.get(replica.tp) is replica
                    and replica.role_epoch == epoch
                    and replica.state is ReplicaState.RESTORING
                ):
                    if end < replica.position:
                        log.warning(
                            "the store of %s[%d] is at offset %d, past the changelog end %d: "
                            "was the topic deleted and created again? Delete %s to restore it "
                            "from scratch",
                            replica.tp[0],
                            replica.tp[1],
                            replica.position,
                            end,
                            replica.store.path,
                        )
                    replica.target = end
                    replica.end = max(replica.end, end)
                    replica.check_caught_up()
            self._measured.clear()
            to_measure = [
                (r, r.role_epoch)
                for r in self._replicas.values()
                if r.state is ReplicaState.RESTORING
                and r.target is None
                and r.measuring != r.role_epoch
            ]
            for r, epoch in to_measure:
                r.measuring = epoch
            starts = [
                CTopicPartition(t, p, self._replicas[(t, p)].store.next_offset or OFFSET_BEGINNING)
                for t, p in added
                if (t, p) in self._replicas
            ]
            self._publish()
        if starts:
            consumer.incremental_assign(starts)
            fetching.update((tp.topic, tp.partition) for tp in starts)
        if to_measure:
            tps = [r.tp for r, _ in to_measure]
            job = ends.submit(lambda probe: true_end_offsets(self.bootstrap, tps, consumer=probe))
            job.add_done_callback(lambda done: self._measured_ends(done, to_measure))
        self._notify()

    def _measured_ends(
        self, job: Future[dict[TopicPartition, int]], asked: list[tuple[_Replica, int]]
    ) -> None:
        """Hand measured end offsets to the restorer thread (runs on the probe's thread)."""
        try:
            found = job.result()
        except Exception as exc:
            log.warning("cannot read changelog end offsets (%s); retrying", exc)
            time.sleep(_RETRY_AFTER_FAILURE_S)
            with self._lock:
                for replica, epoch in asked:
                    if replica.measuring == epoch:
                        replica.measuring = None
        else:
            with self._lock:
                self._measured.extend(
                    (replica, epoch, found[replica.tp])
                    for replica, epoch in asked
                    if replica.tp in found
                )
        self._dirty.set()

    def _apply(self, consumer: Consumer, messages: Sequence[Message]) -> None:
        """Apply one consumed batch: one store write per partition.

        This loop is the restore ceiling (../shared/BASELINES.md), so it does per record only
        what it must: read topic, partition, key and value, and put them straight into the
        partition's write batch. Messages come in runs per partition, so the partition's
        batch is looked up only when the run changes, and an offset is read only at a run's
        last record.
        """
        with self._lock:
            replicas = dict(self._replicas)
        runs: dict[TopicPartition, _Run] = {}
        eofs: dict[TopicPartition, int] = {}
        run: _Run | None = None
        put: Callable[[bytes, bytes], None] = _ignore_put
        delete: Callable[[bytes], None] = _ignore_delete
        fn: StoreKeyFn | None = None
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
                    run = runs[(t, p)] = _Run(replicas.get((t, p)))
                put, delete, fn = run.batch.put, run.batch.delete, run.key_fn
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
                self._skip_record((t, p), msg.offset(), "has no key")
                prev = msg
                continue
            if fn is not None:
                try:
                    key = fn(key)
                except (SparkiqError, ValueError) as exc:
                    self._skip_record((t, p), msg.offset(), f"has a malformed key ({exc})")
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

        changed = False
        with self._lock:
            for tp, done in runs.items():
                replica = self._replicas.get(tp)
                # Skipped: a partition unassigned (or replaced) while this batch was in flight.
                if done.last is None or replica is None or replica is not done.replica:
                    continue
                count = len(done.batch)
                try:
                    replica.store.write(done.batch, done.last + 1)
                except StoreError:
                    # Fetch this partition again from its last applied offset.
                    consumer.seek(CTopicPartition(tp[0], tp[1], replica.position))
                    raise
                self.records_applied += count
                replica.advance(done.last + 1)
                changed |= replica.check_caught_up()
            for tp, offset in eofs.items():
                replica = self._replicas.get(tp)
                if replica is None:
                    continue
                if offset > replica.position:
                    # Offsets past the last record (compaction, transaction markers): the
                    # checkpoint moves with them, so the gap is not fetched again.
                    replica.store.apply((), offset)
                    replica.advance(offset)
                replica.end = max(replica.end, offset)
                changed |= replica.check_caught_up()
            self._publish()
        if changed:
            self._notify()

    def _skip_record(self, tp: TopicPartition, offset: int, why: str) -> None:
        """Count a record that cannot be stored; log the first one of each partition."""
        self.skipped_records += 1
        replica = self._replicas.get(tp)
        if replica is None:
            return
        replica.skipped += 1
        if replica.skipped == 1:
            log.warning(
                "changelog %s[%d]: the record at offset %d %s and is skipped, as are later "
                "ones like it (a table changelog needs a key in the table's key format on "
                "every record); check the pipeline that writes this topic",
                tp[0],
                tp[1],
                offset,
                why,
            )

    def _update_ends_from_watermarks(self, consumer: Consumer) -> None:
        """Raise each partition's known end from the high watermark of recent fetches."""
        with self._lock:
            tps = list(self._replicas)
        marks: dict[TopicPartition, int] = {}
        for t, p in tps:
            with contextlib.suppress(Exception):
                _, high = consumer.get_watermark_offsets(CTopicPartition(t, p), cached=True)
                if high >= 0:
                    marks[(t, p)] = high
        with self._lock:
            for tp, high in marks.items():
                replica = self._replicas.get(tp)
                if replica is not None and high > replica.end:
                    replica.end = high
            self._publish()

    def _refresh_disk_lags(self, probe: Consumer | None) -> None:
        """Lags of stores on disk that are not assigned, for the node's join metadata."""
        with self._lock:
            assigned = set(self._replicas)
        stored: dict[TopicPartition, int] = {}
        for (_, partition), (table, offset) in self.registry.on_disk_tables().items():
            tp = (table.topic, partition)
            current = self._table_for_topic(table.topic)
            if tp in assigned or current is None or current.partitions != table.partitions:
                continue
            stored[tp] = offset
        if not stored:
            self._disk_lags = {}
            return
        try:
            ends = true_end_offsets(self.bootstrap, list(stored), consumer=probe)
        except Exception as exc:
            log.warning("cannot read end offsets for stores on disk: %s", exc)
            return
        self._disk_lags = {tp: max(ends.get(tp, off) - off, 0) for tp, off in stored.items()}

    def _publish(self) -> None:
        """Replace the snapshots readers see (caller holds the lock)."""
        self._statuses = {tp: r.status() for tp, r in self._replicas.items()}
        self._stores = {tp: r.store for tp, r in self._replicas.items()}

    def _notify(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:
                log.exception("restorer on_change callback failed")
