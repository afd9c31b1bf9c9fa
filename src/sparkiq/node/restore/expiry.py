"""Window retention: removes the windows of a windowed table that ended too long ago.

A windowed table with a retention keeps a window while it ends no earlier than the newest
window end seen in its partition minus the retention (`TableDef.retention_ms`). Time is the
data's, not the clock's: every replica of a partition holds the same records, so every
replica keeps the same windows, and a pipeline replayed from last month expires as it would
have then.

`WindowExpiry` sweeps each store of such a table in passes over all its keys, a step per
restorer turn on the restorer's own thread (between two consumed batches, so it never races
the writes or the closing of a store). A caught-up restorer turns once per record or few,
and a node may hold thousands of replicas, so a step costs what is under way, not what is
held: passes under way go on, and whether a pass is due is looked at for `LOOK_EVERY_S`'s
share of the held replicas since the last step (each one at least every `LOOK_EVERY_S`; all
of them at the first step after `hold`). A pass removes the windows that start before its
cutoff, the newest window start known when it began minus the retention. The newest start
comes from the records the restorer reads (`batches.NewestStart`, noted by the key function
that makes their store keys); the first pass of a store also reads it from the store, which
may hold windows from before the node started, and the pass after it removes what that
expires.

A pass costs about as much per key as per window it removes (a seek past each key's kept
windows), so passes wait until the cutoff has moved by `1 / STEP_OF_RETENTION` of the
retention since the last one, and at least `AGAIN_S`: each pass then removes a few windows
per key (in bench_tablekinds' feed, whose data time runs 20x the clock, three every 1.5 s
instead of two every second, for half the sweep's CPU). A store thus holds up to a quarter
of the retention's worth of windows past it. Every `interval_s` (a tenth of the retention,
within 1 s and a minute) a pass comes all the same, which removes late records of windows
already expired and, once the data stops, everything past the cutoff.

The node's HTTP thread waits for the interpreter while the sweep runs, so a pass is built
to hold it briefly and seldom (`benchmarks/bench_expiry.py` measures it):

- A step works in slices of `SLICE_S` and sleeps `YIELD_S` between two, which hands the
  interpreter to the HTTP thread, up to `STEP_S` per turn; the restorer comes back sooner
  while a pass is under way (`sweeping`). One iterator serves the whole step: making it and
  seeking to where the pass stood costs as much as looking at twenty keys.
- A store's keys are ordered by key, then window start (`sparkiq.core.serde`), so a key's
  expired windows come first among its windows. A pass removes them, then, at the key's
  first window within the retention, seeks past the key's windows to the next key: a few
  windows per key, not all of them (`_seeks_past_kept`). The first pass of a store seeks to
  each key's last window instead, to read the newest start. Every `FULL_EVERY`-th pass looks
  at every window all the same.
- Expired windows are deleted `REMOVE_AT` at a time, and a pass that removed windows asks
  the store to flush a memtable mostly of deletes (`PartitionStore.flush_deletes`), whose
  files are then compacted away (`sparkiq.node.stores.storeoptions`). Deletes left in memory cost
  every iterator that steps over them, the sweep's own included (its CPU grew without end
  as they piled up), and memory, the write-ahead log and the files on disk follow the
  retention too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sparkiq.core.errors import StoreError
from sparkiq.core.tables import Format, TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore.batches import NewestStart
from sparkiq.node.stores.partitionstore import PartitionStore

# A step works in slices of SLICE_S, about the longest the HTTP thread waits for the
# interpreter because of it, and sleeps YIELD_S between two (the HTTP thread takes the
# interpreter meanwhile); it ends after STEP_S of wall time, or CHUNK keys.
SLICE_S = 0.000_1
YIELD_S = 0.000_1
STEP_S = 0.01
CHUNK = 10_000
_CLOCK_EVERY = 8  # keys looked at between two readings of the clock
# Whether a replica's pass is due is looked at least this often (a pass starts up to this
# late), by a step's share of the replicas: about 1 us a replica.
LOOK_EVERY_S = 1.0
# Expired windows are deleted once this many are found (or the pass ends): a write costs
# as much as looking at ten keys or so whatever it holds, and 64 deletes keep it within
# about a slice.
REMOVE_AT = 64
# A pass is due once the cutoff has moved by this fraction of the retention since the last
# one, and this long after it ended; or after `interval_s` in any case.
STEP_OF_RETENTION = 4
AGAIN_S = 1.0
_MIN_INTERVAL_S, _MAX_INTERVAL_S = 1.0, 60.0
# Every this many passes of a store, one looks at every window (see `_seeks_past_kept`).
FULL_EVERY = 16
# A pass that removed windows flushes its store when the memtable holds this many deletes,
# and more than the store holds windows (`PartitionStore.flush_deletes`).
FLUSH_AT_DELETES = 1_000
_SIGN64 = 1 << 63
# Store keys of windows that start in [0, 2**56) ms (up to the year 2,280,000) have this
# byte before their last 7; the last window of a key is at most `key + _LAST_IN_BAND`.
_BAND = 0x80
_LAST_IN_BAND = bytes([_BAND]) + b"\xff" * 7
_PAST_BAND = _LAST_IN_BAND + b"\x00"  # the smallest key after `key + _LAST_IN_BAND`


class Swept(Protocol):
    """What a sweep needs of a replica (`replica.Replica`); its table, store and newest start
    are read at every step, so a replica rebuilt (another store) starts its sweep over."""

    tp: TopicPartition
    table: TableDef
    store: PartitionStore

    @property
    def newest_start(self) -> NewestStart | None:
        """The newest window start of the records written to the store (None: not kept)."""


@dataclass
class _Sweep:
    """One store's sweeping: where its pass is, and the newest window start known."""

    replica: Swept
    store: PartitionStore
    newest: int | None = None  # newest window start known (records, the first pass)
    keep_from: int | None = None  # this pass's cutoff (None: it removes nothing)
    cutoff: int | None = None  # the last pass's cutoff
    seen: int | None = None  # newest start seen so far in this pass
    cursor: bytes | None = None  # the next key to look at (None: the first)
    in_pass: bool = False
    due: float = 0.0  # monotonic time of the next pass, whether the cutoff moved or not
    after: float = 0.0  # monotonic time before which the cutoff does not start a pass
    passes: int = 0  # passes finished
    expired: list[bytes] = field(default_factory=list)  # found, not yet deleted
    removed: int = 0  # windows removed in this pass

    def note(self, newest: NewestStart | None) -> None:
        """Take the newest window start of the records written since."""
        ms = None if newest is None else newest.ms
        if ms is not None and (self.newest is None or ms > self.newest):
            self.newest = ms

    def is_due(self, retention_ms: int, now: float) -> bool:
        """Whether a pass should start: its time has come, or the cutoff moved enough."""
        if now >= self.due:
            return True
        if now < self.after or self.newest is None:
            return False
        if self.cutoff is None:
            return True
        return self.newest - retention_ms - self.cutoff >= retention_ms // STEP_OF_RETENTION


def interval_s(table: TableDef) -> float:
    """The longest time between two passes over a store of `table`."""
    return min(max((table.retention_ms or 0) / 10_000, _MIN_INTERVAL_S), _MAX_INTERVAL_S)


def _seeks_past_kept(table: TableDef) -> bool:
    """Whether a pass may seek from a key's first window within the retention to its last.

    Everything between is that key's (newer windows, all kept) if no other key's windows
    sort between them. Keys of fixed length (long, int) cannot. Text keys (string, json)
    are UTF-8: another key's window there would need a key that is this one followed by the
    byte 0x80, which UTF-8 never puts after a whole character (or, for a shorter key, a
    window start before the year 2,280,000 BC). A key of other bytes could; a record whose
    text key is not UTF-8 (the producer wrote another format) could too, so every
    `FULL_EVERY`-th pass looks at every window, and such windows go a few passes late.
    """
    return table.key_format in (Format.STRING, Format.JSON, Format.LONG, Format.INT)


class _Slices:
    """A step's time: slices of work with a sleep between two, within the step's time."""

    def __init__(self, slice_s: float, yield_s: float, step_s: float) -> None:
        began = time.perf_counter()
        self.slice_s, self.yield_s = slice_s, yield_s
        self.slice_end, self.step_end = began + slice_s, began + step_s

    def go_on(self) -> bool:
        """Whether the step may go on (after a sleep if the slice is over)."""
        now = time.perf_counter()
        if now < self.slice_end:
            return True
        if now + self.yield_s >= self.step_end:
            return False
        time.sleep(self.yield_s)  # releases the interpreter
        self.slice_end = time.perf_counter() + self.slice_s
        return True


class WindowExpiry:
    """Sweeps the stores of windowed tables with a retention: `hold` the replicas, `step`
    once per restorer turn."""

    def __init__(
        self,
        chunk: int = CHUNK,
        *,
        slice_s: float = SLICE_S,
        yield_s: float = YIELD_S,
        step_s: float = STEP_S,
    ) -> None:
        self.chunk = chunk
        self.slice_s, self.yield_s, self.step_s = slice_s, yield_s, step_s
        self.removed = 0  # windows removed since start (all tables)
        self._sweeps: dict[TopicPartition, _Sweep] = {}
        self._passing: dict[TopicPartition, _Sweep] = {}  # those whose pass is under way
        self._held: list[Swept] = []  # the replicas with a retention, in the order looked at
        self._next = 0  # index in `_held` of the next replica to look at
        self._owed = 0.0  # looks owed to `_held` (a look each per `LOOK_EVERY_S`)
        self._stepped: float | None = None  # monotonic time of the last step

    @property
    def sweeping(self) -> bool:
        """Whether a pass is under way (the restorer then comes back sooner)."""
        return bool(self._passing)

    def hold(self, replicas: Sequence[Swept]) -> None:
        """Sweep `replicas` (those of tables with a retention) from now on, until the next
        call: the replicas of a store that closed or failed are dropped with their sweeps."""
        self._held = [r for r in replicas if r.table.retention_ms is not None]
        held = {r.tp for r in self._held}
        for tp in [tp for tp in self._sweeps if tp not in held]:
            self._drop(tp)
        for replica in self._held:
            sweep = self._sweeps.get(replica.tp)
            if sweep is not None and sweep.store is not replica.store:  # rebuilt
                self._drop(replica.tp)
            elif sweep is not None:
                sweep.replica = replica  # the same store, perhaps assigned anew
        self._next = 0
        self._owed = len(self._held)  # every one looked at by the next step

    def step(self, replicas: Sequence[Swept] | None = None, now: float | None = None) -> int:
        """Sweep the replicas whose pass is under way or due, up to `chunk` keys or `step_s`
        of wall time, in slices of `slice_s`; the keys looked at. *replicas*: `hold` them
        first."""
        if replicas is not None:
            self.hold(replicas)
        slices = _Slices(self.slice_s, self.yield_s, self.step_s)
        now = time.monotonic() if now is None else now
        budget = self.chunk
        went_on = list(self._passing.items())  # a sweep goes on once a step
        gone_on = {tp for tp, _ in went_on}
        for tp, sweep in went_on:
            if budget <= 0 or (budget < self.chunk and not slices.go_on()):
                break
            budget -= self._go_on(tp, sweep, budget, slices, now)
        held = self._held
        if self._stepped is not None and held:
            self._owed = min(
                self._owed + len(held) * (now - self._stepped) / LOOK_EVERY_S, len(held)
            )
        self._stepped = now
        while self._owed >= 1 and held:
            if budget <= 0 or (budget < self.chunk and not slices.go_on()):
                break
            self._owed -= 1
            replica = held[self._next]
            self._next = (self._next + 1) % len(held)
            found = self._sweeps.get(replica.tp)
            if found is None or found.store is not replica.store:  # new, or rebuilt
                self._drop(replica.tp)
                found = self._sweeps[replica.tp] = _Sweep(replica, replica.store, due=now)
            sweep = found
            sweep.replica = replica
            retention = replica.table.retention_ms
            sweep.note(replica.newest_start)
            if sweep.in_pass or retention is None or not sweep.is_due(retention, now):
                continue
            if replica.tp in gone_on:
                continue  # its pass ended in this step: the next begins at the next one
            budget -= self._go_on(replica.tp, sweep, budget, slices, now)
        return self.chunk - budget

    def _go_on(
        self, tp: TopicPartition, sweep: _Sweep, budget: int, slices: _Slices, now: float
    ) -> int:
        """Start or continue the pass of `sweep`; the keys looked at."""
        replica = sweep.replica
        if sweep.store is not replica.store:  # rebuilt: a look starts it over
            self._drop(tp)
            return 0
        sweep.note(replica.newest_start)
        try:
            looked = self._sweep(replica.table, sweep, budget, slices, now)
        except StoreError:
            # Closed or failed under the pass: a store that comes back starts over.
            self._drop(tp)
            return 0
        if sweep.in_pass:
            self._passing[tp] = sweep
        else:
            self._passing.pop(tp, None)
        return looked

    def _drop(self, tp: TopicPartition) -> None:
        self._sweeps.pop(tp, None)
        self._passing.pop(tp, None)

    def _sweep(
        self, table: TableDef, sweep: _Sweep, limit: int, slices: _Slices, now: float
    ) -> int:
        if not sweep.in_pass:
            sweep.in_pass = True
            retention = table.retention_ms or 0
            sweep.keep_from = None if sweep.newest is None else sweep.newest - retention
        store = sweep.store
        keep_from = sweep.keep_from
        seeks = _seeks_past_kept(table) and sweep.passes % FULL_EVERY != FULL_EVERY - 1
        # The store may hold windows newer than any record read since it opened: the first
        # pass reads each key's last window.
        reads_last = sweep.passes == 0
        seen = sweep.seen
        expired = sweep.expired
        looked = 0
        with store.reading("sweeping"):
            it = store.key_iterator()
            if sweep.cursor is None:
                it.seek_to_first()
            else:
                it.seek(sweep.cursor)
            while it.valid():
                if looked >= limit or (
                    looked % _CLOCK_EVERY == 0 and looked and not slices.go_on()
                ):
                    break
                if len(expired) >= REMOVE_AT:
                    self._remove(sweep)  # the iterator goes on as it was
                    expired = sweep.expired
                key: bytes = it.key()
                looked += 1
                if len(key) < 8:
                    it.next()  # not a window (a record the table's key codec could not read)
                    continue
                start = int.from_bytes(key[-8:], "big") - _SIGN64
                if keep_from is not None and start < keep_from:
                    expired.append(key)
                elif seeks and key[-8] == _BAND:
                    # The key's later windows are newer, so kept: on to the next key, or to
                    # this one's last window while the newest start is read from the store.
                    if not reads_last:
                        it.seek(key[:-8] + _PAST_BAND)
                        continue
                    it.seek_for_prev(key[:-8] + _LAST_IN_BAND)
                    start = int.from_bytes(it.key()[-8:], "big") - _SIGN64
                if seen is None or start > seen:
                    seen = start
                it.next()
            cursor: bytes | None = it.key() if it.valid() else None
            it.status()
            del it  # an iterator pins what it reads
        sweep.seen = seen
        if cursor is not None:
            sweep.cursor = cursor
            return looked
        self._remove(sweep)
        return self._end_pass(table, sweep, now, looked)

    def _remove(self, sweep: _Sweep) -> None:
        if sweep.expired:
            sweep.store.remove(sweep.expired)
            self.removed += len(sweep.expired)
            sweep.removed += len(sweep.expired)
            sweep.expired = []

    def _end_pass(self, table: TableDef, sweep: _Sweep, now: float, looked: int) -> int:
        first = sweep.passes == 0
        newest = sweep.newest
        if sweep.seen is not None and (newest is None or sweep.seen > newest):
            sweep.newest = sweep.seen
        if sweep.removed:
            sweep.store.flush_deletes(FLUSH_AT_DELETES)
        sweep.cutoff = sweep.keep_from
        sweep.cursor, sweep.seen, sweep.in_pass, sweep.removed = None, None, False, 0
        sweep.passes += 1
        sweep.after = now + AGAIN_S
        # After the first pass the second removes at once what the newest start it read
        # expires.
        moved = sweep.newest is not None and (newest is None or sweep.newest > newest)
        sweep.due = now if first and moved else now + interval_s(table)
        return max(looked, 1)
