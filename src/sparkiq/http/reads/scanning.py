"""One page of a scan: each partition's rows read within a budget, then merged in order.

A page of a range or of windows is read from every partition it spans (`scan_partition`)
and merged (`PageMerge`). A scan that keeps only some rows (windows starting in a time
range, the windows of one key among longer keys that start with it) may have to pass over
many rows to find a page's worth; it examines at most `SCAN_BUDGET_ROWS` per partition and
says how far it got (`reached`), so a request never walks a whole store. The merge then
answers only rows up to the lowest point any partition reached (the highest, descending):
past it another partition was not looked at. Such a page may hold fewer rows than asked
and still have a `next_cursor`; the caller pages on until `next_cursor` is null.

Rows are compared by store key: the order of `PartitionStore.scan`, ascending or
descending (`Order`); a cursor is the store key of the last row a page took, or of the last
row a scan examined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sparkiq.core.queries import Order
from sparkiq.http.nodeview import ReadableStore

# Rows one partition's read examines at most for one page when it keeps only some (about
# 10 ms of a node's loop for RocksDB rows; the windows of one key, the default answer, fit).
SCAN_BUDGET_ROWS = 10_000
# Rows asked of the store at a time while a scan keeps only some.
_CHUNK = 256

Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class Scan:
    """Store keys in [lo, hi] (inclusive) that start with `prefix`, past the cursor `after`
    in `order`, of which `keep` says which count (None: all)."""

    lo: bytes | None
    hi: bytes | None
    prefix: bytes | None
    after: bytes | None
    order: Order = Order.ASC
    keep: Callable[[bytes], bool] | None = None


def scan_partition(
    store: ReadableStore, scan: Scan, fetch: int, budget: int | None = None
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """Up to `fetch` rows `scan` keeps, in its order, and the store key the scan examined
    up to when it stopped before the end of its range (None: it reached the end).

    Every kept row up to that key is among the rows returned. At most `budget` rows
    (default `SCAN_BUDGET_ROWS`) are examined when the scan keeps only some.
    """
    if budget is None:
        budget = SCAN_BUDGET_ROWS
    keep = scan.keep
    if keep is None:
        rows = store.scan(
            lo=scan.lo,
            hi=scan.hi,
            prefix=scan.prefix,
            after=scan.after,
            limit=fetch,
            order=scan.order,
        )
        return rows, rows[-1][0] if len(rows) >= fetch else None
    out: list[tuple[bytes, bytes]] = []
    after = scan.after
    examined = 0
    while True:
        chunk = min(max(fetch - len(out), _CHUNK), budget - examined)
        page = store.scan(
            lo=scan.lo, hi=scan.hi, prefix=scan.prefix, after=after, limit=chunk, order=scan.order
        )
        examined += len(page)
        for store_key, value in page:
            if keep(store_key):
                out.append((store_key, value))
                if len(out) >= fetch:
                    return out, store_key
        if len(page) < chunk:
            return out, None
        after = page[-1][0]
        if examined >= budget:
            return out, after


def _as_bytes(store_key: bytes) -> bytes:
    return store_key


@dataclass(slots=True)
class PageMerge(Generic[Row]):
    """The rows of several partitions' (or nodes') reads of one page, and how far each got;
    `page` merges them."""

    order: Order
    # How store keys compare (default: as bytes; windows of many keys: `window_order`).
    sort_key: Callable[[bytes], Any] | None = None
    rows: list[tuple[bytes, Row]] = field(default_factory=list)
    reached: list[bytes] = field(default_factory=list)

    def add(self, rows: list[tuple[bytes, Row]], reached: bytes | None) -> None:
        """One read's rows and where it stopped (None: at the end of the range)."""
        self.rows.extend(rows)
        if reached is not None:
            self.reached.append(reached)

    def page(self, limit: int) -> tuple[list[tuple[bytes, Row]], bytes | None]:
        """The first `limit` rows in order, and the store key to resume after (None: no
        more rows)."""
        descending = self.order is Order.DESC
        order = self.sort_key or _as_bytes
        rows = self.rows
        bound: bytes | None = None
        if self.reached:
            # Past the nearest point a read stopped at, that read's partitions were not seen.
            bound = (max if descending else min)(self.reached, key=order)
            edge = order(bound)
            if descending:
                rows = [row for row in rows if order(row[0]) >= edge]
            else:
                rows = [row for row in rows if order(row[0]) <= edge]
        # Each key lives in one partition, so store keys never repeat across partitions.
        rows.sort(key=lambda row: order(row[0]), reverse=descending)
        page = rows[:limit]
        if len(rows) > limit:
            return page, page[-1][0]
        return page, bound
