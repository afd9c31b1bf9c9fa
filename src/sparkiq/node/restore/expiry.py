"""Window retention: removes the windows of a windowed table that ended too long ago.

A windowed table with a retention keeps a window while it ends no earlier than the newest
window end seen in its partition minus the retention (`TableDef.retention_ms`). Time is the
data's, not the clock's: every replica of a partition holds the same records, so every
replica keeps the same windows, and a pipeline replayed from last month expires as it would
have then.

A store's keys are ordered by key, then window start (`sparkiq.core.serde`), so the expired
windows are spread over the whole key space. `WindowExpiry` sweeps each store of such a
table in passes over all its keys, a chunk at a time on the restorer's own thread (between
two consumed batches, so it never races the writes or the closing of a store): a pass
notes the newest window start it sees and removes the windows that the newest start known
when it began has expired. The first pass of a store only finds that newest start. A pass
that found a newer start is followed by another soon after (the cutoff moved); otherwise the
next one comes after a tenth of the retention (between 1 s and a minute). Windows are thus
removed while the pipeline runs and while a replica restores, and a store holds about the
retention's worth of windows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sparkiq.core.errors import StoreError
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.node.partitionstore import PartitionStore

# Keys looked at per restorer turn (about a millisecond of work: the turn's other work,
# and the HTTP thread waiting for the interpreter, come first).
CHUNK = 1_000
# A pass that found a newer window start is followed by another this soon.
AGAIN_S = 1.0
_MIN_INTERVAL_S, _MAX_INTERVAL_S = 1.0, 60.0
_SIGN64 = 1 << 63


class Swept(Protocol):
    """What a sweep needs of a replica (`replica.Replica`)."""

    tp: TopicPartition
    table: TableDef
    store: PartitionStore


@dataclass
class _Sweep:
    """One store's sweeping: where its pass is, and the newest window start known."""

    store: PartitionStore
    newest: int | None = None  # newest window start known before this pass
    seen: int | None = None  # newest start seen so far in this pass
    cursor: bytes | None = None  # last key of the pass so far (None: between passes)
    in_pass: bool = False
    due: float = 0.0  # monotonic time of the next pass


def interval_s(table: TableDef) -> float:
    """The time between two passes over a store of `table` whose cutoff did not move."""
    return min(max((table.retention_ms or 0) / 10_000, _MIN_INTERVAL_S), _MAX_INTERVAL_S)


class WindowExpiry:
    """Sweeps the stores of windowed tables with a retention; `step` once per restorer turn."""

    def __init__(self, chunk: int = CHUNK) -> None:
        self.chunk = chunk
        self.removed = 0  # windows removed since start (all tables)
        self._sweeps: dict[TopicPartition, _Sweep] = {}

    def step(self, replicas: Sequence[Swept], now: float | None = None) -> int:
        """Sweep up to `chunk` keys of the replicas whose pass is due; the keys looked at."""
        now = time.monotonic() if now is None else now
        budget = self.chunk
        held: set[TopicPartition] = set()
        for replica in replicas:
            if replica.table.retention_ms is None:
                continue
            held.add(replica.tp)
            if budget <= 0:
                continue
            sweep = self._sweeps.get(replica.tp)
            if sweep is None or sweep.store is not replica.store:  # new, or rebuilt
                sweep = self._sweeps[replica.tp] = _Sweep(replica.store, due=now)
            if not sweep.in_pass and now < sweep.due:
                continue
            try:
                budget -= self._sweep(replica.table, sweep, budget, now)
            except StoreError:
                # Closed or failed under the pass: a store that comes back starts over.
                del self._sweeps[replica.tp]
        for tp in [tp for tp in self._sweeps if tp not in held]:
            del self._sweeps[tp]
        return self.chunk - budget

    def _sweep(self, table: TableDef, sweep: _Sweep, limit: int, now: float) -> int:
        sweep.in_pass = True
        page = sweep.store.scan(after=sweep.cursor, limit=limit)
        keep_from = None if sweep.newest is None else sweep.newest - (table.retention_ms or 0)
        seen = sweep.seen
        expired: list[bytes] = []
        for key, _ in page:
            if len(key) < 8:
                continue  # not a window (a record the table's key codec could not read)
            start = int.from_bytes(key[-8:], "big") - _SIGN64
            if seen is None or start > seen:
                seen = start
            if keep_from is not None and start < keep_from:
                expired.append(key)
        if expired:
            sweep.store.remove(expired)
            self.removed += len(expired)
        sweep.seen = seen
        if len(page) == limit:
            sweep.cursor = page[-1][0]
            return len(page)
        # The pass is over.
        first = sweep.newest is None
        moved = seen is not None and (first or seen > (sweep.newest or 0))
        if moved:
            sweep.newest = seen
        sweep.cursor, sweep.seen, sweep.in_pass = None, None, False
        # After the first pass the second removes at once what the newest start expires.
        sweep.due = now if first and moved else now + (AGAIN_S if moved else interval_s(table))
        return max(len(page), 1)
