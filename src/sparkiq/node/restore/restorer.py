"""The `Restorer`: follows the assigned changelog partitions into their stores.

One `Restorer` per node runs one thread with one confluent-kafka consumer in `assign()` mode
(no group: the sparkiq group member decides who holds what; this only fetches). `assign()`
may be called from any thread at any time; the restorer thread reconciles the consumer with
the wanted set on its next turn:

- an added partition gets its store opened (resuming from the store's checkpoint) and is
  fetched from there;
- a removed partition is unassigned and its store closed, left on disk for a later return;
- a partition that changes role (active <-> standby) keeps its store and position;
- a replica whose store's files fail it turns FAILED at once, so no read uses it, and is
  rebuilt from the changelog, or reopened once a full disk has space
  (`sparkiq.node.restore.healing`);
- the stores of windowed tables with a retention are swept of expired windows between two
  batches (`sparkiq.node.restore.expiry`).

Records the consumer returns for a partition that is unassigned at that moment are not
written; if the partition comes back before the consumer lets go of it, it is fetched again
from its checkpoint (`Fetching`), so a checkpoint never moves past a record not written.

An active partition is RESTORING until its position reaches the true end offset measured
when it was assigned (`sparkiq.kafka.offsets.true_end_offsets`, which also works on the dev
broker whose reported end is short), then ACTIVE. Standbys are STANDBY and follow forever.
Each consumed batch becomes one `PartitionStore.write` per partition: data and checkpoint
in one write, without the write-ahead log while RESTORING; those writes are flushed in
RocksDB's background once the partition is ACTIVE (it serves reads meanwhile), and writes
use the log again from then on.

A node holds hundreds to thousands of replicas, and a caught-up restorer turns once per record
or few, so a turn's work follows what changed, not what is held: it finishes the restores and
settles the stores of the replicas noted as unsettled (RESTORING, or written without the log;
every replica is looked at all the same every `_ALL_SETTLED_EVERY_S`), hands window expiry its
replicas only when they change, and publishes the statuses of the partitions it touched.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from concurrent.futures import Future

from confluent_kafka import Consumer, Message
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.errors import SparkiqError, StorageFault, StoreError
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.kafka.offsets import true_end_offsets
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.node.changes import ChangeFeed
from sparkiq.node.restore.batches import StoreKeyFn, split_batch
from sparkiq.node.restore.ends import EndProbe, disk_lags
from sparkiq.node.restore.expiry import WindowExpiry
from sparkiq.node.restore.fetch import Fetching, new_consumer, next_batch
from sparkiq.node.restore.healing import HEAL_RETRY_S, Healing
from sparkiq.node.restore.replica import PartitionStatus, Replica, ReplicaState
from sparkiq.node.restore.truncation import go_on_from_log_start, log_bounds
from sparkiq.node.stores.partitionstore import PartitionStore
from sparkiq.node.stores.registry import StoreRegistry

log = logging.getLogger(__name__)

_POLL_TIMEOUT_S = 0.1
# While a store flushes before its partition turns ACTIVE, or a sweep's pass is under way
# (it goes on a step per turn: `sparkiq.node.restore.expiry`).
_BUSY_POLL_S = 0.01
_WATERMARK_EVERY_S = 1.0
_DISK_LAGS_EVERY_S = 5.0
# Every replica is looked at by `_finish_restores` this often, whether noted as unsettled or
# not (a safety net: none should be missed).
_ALL_SETTLED_EVERY_S = 5.0
_RETRY_AFTER_FAILURE_S = 1.0
_FAILED = ReplicaState.FAILED


class Restorer(Healing):
    """Follows the assigned changelog partitions into their stores; reports state and lag."""

    def __init__(
        self,
        bootstrap: str,
        registry: StoreRegistry,
        table_for_topic: Callable[[str], TableDef | None],
        on_change: Callable[[], None] | None = None,
        kafka_config: Mapping[str, str] | None = None,
        security: KafkaSecurity = PLAINTEXT,
        feed: ChangeFeed | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._feed = feed  # watchers of keys hear of the records written (live reads)
        self.security = security
        self.registry = registry
        self._table_for_topic = table_for_topic
        self._on_change = on_change
        self._kafka_config = dict(kafka_config or {})
        # Reentrant: a store write under the lock may report its own fault (`_on_fault`).
        self._lock = threading.RLock()
        self._replicas: dict[TopicPartition, Replica] = {}
        self._closing: dict[TopicPartition, Replica] = {}
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Published snapshots, replaced whole so readers need no lock.
        self._statuses: dict[TopicPartition, PartitionStatus] = {}
        self._stores: dict[TopicPartition, PartitionStore] = {}
        self._disk_lags: dict[TopicPartition, int] = {}
        self._measured: list[tuple[Replica, int, int]] = []  # (replica, role_epoch, end)
        self.records_applied = 0  # records written to stores since start (tombstones too)
        self.skipped_records = 0  # records without a usable key, since start
        self.refetches = 0  # partitions fetched again from their checkpoint, since start
        self.storage_faults = 0  # replicas whose store's files failed them, since start
        self.rebuilds = 0  # stores rebuilt from the changelog after a fault, since start
        # (table, partition) -> offsets skipped because the log start had moved past the
        # replica's position (`sparkiq.node.restore.truncation`), since start.
        self.truncated_offsets: dict[tuple[str, int], int] = {}
        self.expiry = WindowExpiry()  # removes expired windows (`expiry.removed` of them)
        self._heal_at = 0.0  # monotonic time of the next attempt to reopen a full disk's store
        self._restoring = False  # whether a replica was RESTORING at the last turn's end
        # Replicas that may be RESTORING or hold writes made without the WAL: those
        # `_finish_restores` looks at (restorer lock). Every RESTORING replica is in it.
        self._unsettled: set[TopicPartition] = set()
        # Whether window expiry should be handed the replicas again (assigned, failed, healed).
        self._expiry_stale = True
        registry.on_fault = self._on_fault

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
                    replica: Replica | None = self._replicas.get(tp) or self._closing.pop(tp, None)
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
                        store, rebuilt = self._open_or_rebuild(table, tp[1])
                        opened.append((tp, table))
                        replica = Replica(tp, table, store)
                        replica.rebuilds = int(rebuilt)
                        replica.set_role(active)
                        self._unsettled.add(tp)
                    elif replica.is_active != active:
                        replica.set_role(active)
                        self._unsettled.add(tp)
                    self._replicas[tp] = replica
            except SparkiqError:
                for tp, table in opened:
                    self._replicas.pop(tp, None)
                    self.registry.close(table.name, tp[1])
                raise
            for tp in list(self._replicas):
                if tp not in wanted:
                    self._closing[tp] = self._replicas.pop(tp)
            if self._feed is not None:
                self._feed.end(self._closing)
            self._expiry_stale = True
            self._publish()
        self._dirty.set()

    # -- views (any thread) ---------------------------------------------------------------

    def status(self, tp: TopicPartition) -> PartitionStatus | None:
        return self._statuses.get(tp)

    def statuses(self) -> dict[TopicPartition, PartitionStatus]:
        return dict(self._statuses)

    def store(self, tp: TopicPartition) -> PartitionStore | None:
        return self._stores.get(tp)

    def snapshot(
        self, tp: TopicPartition, store_key: bytes | None
    ) -> tuple[bytes | None, int] | None:
        """The value of `store_key` (None: no key, only the position) in this node's replica
        of `tp` and the replica's position, taken between two written batches (a watch's
        start: `sparkiq.node.changes`)."""
        with self._lock:
            replica = self._replicas.get(tp)
            if replica is None or replica.state is _FAILED:
                return None
            value = None if store_key is None else replica.store.get(store_key)
            return value, replica.position

    @property
    def windows_expired(self) -> int:
        return self.expiry.removed

    def lags(self) -> dict[TopicPartition, int]:
        """Lag of every assigned partition and of every store left on disk."""
        out = dict(self._disk_lags)
        out.update((tp, st.lag) for tp, st in self._statuses.items())
        return out

    # -- restorer thread ------------------------------------------------------------------

    def _run(self) -> None:
        consumer = new_consumer(self.bootstrap, self._kafka_config, self.security)
        fetching = Fetching(consumer)
        ends = EndProbe(self.bootstrap, self.security)
        next_marks = next_disk = time.monotonic() + _DISK_LAGS_EVERY_S
        next_heal = next_all = 0.0
        disk_job: Future[None] | None = None
        poll_s = _POLL_TIMEOUT_S
        try:
            while not self._stopping.is_set():
                try:
                    if self._dirty.is_set():
                        self._dirty.clear()
                        self._reconcile(fetching, ends)
                    if not fetching:
                        self._dirty.wait(poll_s)
                    else:
                        messages = next_batch(consumer, poll_s)
                        if messages:
                            self._apply(fetching, messages)
                    busy = self._upkeep()  # then come back soon
                    poll_s = _BUSY_POLL_S if busy else _POLL_TIMEOUT_S
                    now = time.monotonic()
                    if now >= next_marks and fetching:
                        next_marks = now + _WATERMARK_EVERY_S
                        self._update_ends_from_watermarks(consumer)
                    if now >= next_heal:
                        # A fault wakes the loop itself (`_on_fault`); this is for the retries.
                        next_heal = now + HEAL_RETRY_S
                        if self._healing_due():
                            self._dirty.set()  # `_heal` decides what is due
                    if now >= next_all:
                        next_all = now + _ALL_SETTLED_EVERY_S
                        with self._lock:
                            self._unsettled.update(self._replicas)
                    if now >= next_disk and (disk_job is None or disk_job.done()):
                        next_disk = now + _DISK_LAGS_EVERY_S
                        disk_job = ends.submit(self._refresh_disk_lags)
                except Exception:
                    log.exception("restorer turn failed; retrying")
                    self._dirty.set()  # fetch any partition left out of step again
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

    def _reconcile(self, fetching: Fetching, ends: EndProbe) -> None:
        """Bring the consumer in line with the wanted partitions; measure restore targets."""
        with self._lock:
            self._heal()
            wanted = {tp: r for tp, r in self._replicas.items() if r.state is not _FAILED}
            closing, self._closing = self._closing, {}
        # Positions move on this thread only, so they are read here without the lock.
        out_of_step = [
            tp for tp, at in fetching.cursors.items() if tp in wanted and at != wanted[tp].position
        ]
        self.refetches += len(out_of_step)
        fetching.stop([tp for tp in fetching.cursors if tp not in wanted] + out_of_step)
        added = [tp for tp in wanted if tp not in fetching.cursors]
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
            self._take_measured_ends()
            to_measure = [
                (r, r.role_epoch)
                for r in self._replicas.values()
                if r.state is ReplicaState.RESTORING
                and r.target is None
                and r.measuring != r.role_epoch
            ]
            for r, epoch in to_measure:
                r.measuring = epoch
            checkpoints = {
                tp: self._replicas[tp].store.next_offset
                for tp in added
                if tp in self._replicas and self._replicas[tp].state is not _FAILED
            }
            self._publish()
        fetching.start(checkpoints)
        if to_measure:
            tps = [r.tp for r, _ in to_measure]
            job = ends.submit(
                lambda probe: true_end_offsets(
                    self.bootstrap, tps, consumer=probe, security=self.security
                )
            )
            job.add_done_callback(lambda done: self._measured_ends(done, to_measure))
        self._notify()

    def _take_measured_ends(self) -> None:
        """Set the restore targets measured since the last turn (caller holds the lock)."""
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
        self._measured.clear()

    def _measured_ends(
        self, job: Future[dict[TopicPartition, int]], asked: list[tuple[Replica, int]]
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

    def _apply(self, fetching: Fetching, messages: Sequence[Message]) -> None:
        """Apply one consumed batch: one store write per partition.

        A partition's records are written only if the consumer returned them right after
        the store's position and for the replica still assigned; otherwise none are, and
        the next turn fetches the partition again from its checkpoint.
        """
        # Read without the lock (a `get` per partition of the batch, not a copy of every
        # replica): a replica replaced meanwhile is found out below (`run.replica`).
        runs, eofs, out_of_range = split_batch(messages, self._replicas, self._skip_record)
        bounds = log_bounds(fetching.consumer, out_of_range) if out_of_range else {}
        out_of_step = False
        failure: StoreError | None = None
        watched: dict[TopicPartition, tuple[StoreKeyFn | None, int, int]] = {}
        feed = self._feed
        with self._lock:
            for tp in runs.keys() | eofs.keys():
                run = runs.get(tp)
                last = run.last if run is not None else None
                eof = eofs.get(tp)
                before = fetching.delivered(tp, last, eof)
                replica = self._replicas.get(tp)
                if before is None or replica is None:
                    continue  # not fetched or not assigned any more: nothing to write
                if replica.state is _FAILED:
                    out_of_step = True  # fetched again from its checkpoint once healed
                    continue
                if eof is not None:
                    replica.end = max(replica.end, eof)
                if before != replica.position or (
                    run is not None and last is not None and run.replica is not replica
                ):
                    out_of_step = True
                    continue
                try:
                    if run is not None and last is not None:
                        count = len(run.batch)
                        replica.store.write(
                            run.batch, last + 1, wal=replica.wal, misplaced=run.misplaced
                        )
                        self.records_applied += count
                        replica.advance(last + 1)
                        if run.last_time_ms > (replica.newest_record_ms or 0):
                            replica.newest_record_ms = run.last_time_ms
                        if feed is not None and feed.watched(tp):
                            watched[tp] = (replica.key_fn, before, last)
                        if run.misplaced:
                            replica.note_misplaced(run.example)
                    if eof is not None and eof > replica.position:
                        # Offsets past the last record (compaction, transaction markers): the
                        # checkpoint moves with them, so the gap is not fetched again.
                        replica.store.apply((), eof, wal=replica.wal)
                        replica.advance(eof)
                    if eof is not None and eof == replica.position:
                        replica.reach_tail(eof)
                    if not replica.wal:  # RESTORING, or its store holds unflushed writes
                        self._unsettled.add(tp)
                except StorageFault:
                    out_of_step = True  # the replica is FAILED (`_on_fault`); healed later
                except StoreError as exc:
                    out_of_step = True  # the cursor moved on, the position did not
                    failure = failure or exc
            for tp, offset in out_of_range.items():
                # The consumer stopped fetching *tp*: fetched again from its checkpoint,
                # moved to the log start where it was before it.
                fetching.stop([tp])
                self.refetches += 1
                out_of_step = True
                replica = self._replicas.get(tp)
                bound = bounds.get(tp)
                if replica is None or replica.state is _FAILED or bound is None:
                    continue
                if offset != replica.position:
                    continue  # the consumer was out of step: fetched again all the same
                try:
                    skipped = go_on_from_log_start(replica, *bound)
                    if not replica.wal:
                        self._unsettled.add(tp)
                except StorageFault:
                    continue  # the replica is FAILED (`_on_fault`); healed later
                except StoreError as exc:
                    failure = failure or exc
                    continue
                if skipped:
                    key = (replica.table.name, tp[1])
                    self.truncated_offsets[key] = self.truncated_offsets.get(key, 0) + skipped
            if watched and feed is not None:
                feed.publish(messages, watched)
            self._publish(runs.keys() | eofs.keys() | out_of_range.keys())
        if out_of_step:
            self._dirty.set()
        if failure is not None:
            raise failure

    def _upkeep(self) -> bool:
        """A turn's work after its batch: restores finished, stores settled, a step of window
        expiry. True while some of it is under way (the next turn should come soon)."""
        flushing = self._finish_restores()
        if self._expiry_stale:
            with self._lock:
                self._expiry_stale = False
                self.expiry.hold([r for r in self._replicas.values() if r.state is not _FAILED])
        self.expiry.step()
        return flushing or self.expiry.sweeping

    def _finish_restores(self) -> bool:
        """Turn RESTORING replicas at their target ACTIVE; persist what the stores of the
        others wrote without the write-ahead log (`Replica.settle`), once no replica restores
        or within `SETTLE_WITHIN_S`.

        Looks at the replicas noted as unsettled only (every RESTORING one is), and drops
        those that are settled. True while a store is still flushing, so the caller comes
        back soon.
        """
        changed: list[TopicPartition] = []
        flushing = restoring = False
        now = time.monotonic()
        under_way = self._restoring  # as of the last turn
        with self._lock:
            try:
                settled: list[TopicPartition] = []
                for tp in self._unsettled:
                    replica = self._replicas.get(tp)
                    if replica is None:
                        settled.append(tp)
                        continue
                    try:
                        if replica.check_caught_up(now):
                            changed.append(tp)
                        restoring |= replica.state is ReplicaState.RESTORING
                        flushing |= replica.settle(now, restore_under_way=under_way)
                    except StorageFault:
                        pass  # the replica is FAILED (`_on_fault`); healed later
                    if replica.state is _FAILED or (
                        replica.state is not ReplicaState.RESTORING and not replica.store.unflushed
                    ):
                        settled.append(tp)  # a heal or a write without the WAL notes it again
                if settled:
                    # A new set: a set keeps its table when emptied, and iterating it goes
                    # over the whole table (thousands of slots after a node's restore).
                    self._unsettled = self._unsettled.difference(settled)
                self._restoring = restoring
            finally:
                if changed:
                    self._publish(changed)
        if changed:
            self._notify()
        return flushing

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
            raised: list[TopicPartition] = []
            for tp, high in marks.items():
                replica = self._replicas.get(tp)
                if replica is not None:
                    end = replica.end
                    replica.raise_end(high)
                    if replica.end != end:
                        raised.append(tp)
            if raised:
                self._publish(raised)

    def _refresh_disk_lags(self, probe: Consumer | None) -> None:
        """Lags of stores on disk that are not assigned, for the node's join metadata."""
        with self._lock:
            assigned = set(self._replicas)
        lags = disk_lags(
            self.bootstrap, self.registry, assigned, self._table_for_topic, probe, self.security
        )
        if lags is not None:
            self._disk_lags = lags

    def _publish(self, changed: Iterable[TopicPartition] | None = None) -> None:
        """Replace the snapshots readers see (caller holds the lock); *changed*: only the
        statuses of those partitions changed, not which replicas and stores there are (a
        caught-up restorer applies a batch per record or few, so its cost stays per batch,
        not per replica: those statuses are replaced in place, which keeps the map's size, so
        a reader iterating it meanwhile sees each entry old or new and never fails)."""
        if changed is None:
            self._statuses = {tp: r.status() for tp, r in self._replicas.items()}
            self._stores = {tp: r.store for tp, r in self._replicas.items()}
            return
        statuses = self._statuses
        added: dict[TopicPartition, PartitionStatus] = {}  # not published yet: in a new map
        for tp in changed:
            replica = self._replicas.get(tp)
            if replica is None:
                continue
            if tp in statuses:
                statuses[tp] = replica.status()
            else:
                added[tp] = replica.status()
        if added:
            self._statuses = {**statuses, **added}

    def _notify(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:
                log.exception("restorer on_change callback failed")
