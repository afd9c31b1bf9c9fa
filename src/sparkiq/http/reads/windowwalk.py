"""The windows of a range of keys in one partition, in (key, window start) order.

A windowed store keys each window by the key's bytes followed by the 8-byte start, so its
order is not quite (key, start): the windows of a key sort by their start's first byte
against the next byte of every longer key that begins with it. For `S1` and `S10` (starts
after 1970 begin with byte 0x80, above any ASCII byte) the store holds `S10`'s windows before
`S1`'s. Everywhere else the orders agree: two keys of which neither begins the other compare
at a byte inside both.

So the walk goes key by key. Ascending, the key after A is found from the first row past A's
own in store order: that row's key K, unless a key that begins K (and comes after A) has
windows, the shortest of them (only those can sort after K's row and before it in key
order). Descending, the key before an upper bound U is the last row's key K below U, unless
a key that begins U (and comes after K) has windows, the longest of them; else the last of
the keys that begin with K, looked for the same way below U, else K itself. Each key's
windows in [first, last] are then one scan of its own interval.

A walk examines at most `budget` rows beyond the first key it reaches, and stops only
between keys or after one of a key's windows; it returns where it got (a store key: the
last window it took, or a key with the start 0xff.. ascending, 0x00.. descending: that key
is done), from which the next page resumes. Keys whose bytes begin others are rare in
practice; for them the walk costs a few more seeks, cached per walk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sparkiq.core.queries import Order
from sparkiq.http.nodeview import ReadableStore

_FIRST_CHUNK, _CHUNK = 8, 512  # rows asked of the store at a time: a few first, then more
_LAST_START = b"\xff" * 8
_FIRST_START = b"\x00" * 8


def window_order(store_key: bytes) -> tuple[bytes, bytes]:
    """The sort key of a windowed store key: (key, start), compared as bytes each."""
    return store_key[:-8], store_key[-8:]


def _common(a: bytes, b: bytes) -> int:
    """The length of the bytes `a` and `b` begin with alike."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest bytes greater than every bytes starting with *prefix* (None: none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _lowest(*bounds: bytes | None) -> bytes | None:
    given = [b for b in bounds if b is not None]
    return min(given) if given else None


def _highest(*bounds: bytes | None) -> bytes | None:
    given = [b for b in bounds if b is not None]
    return max(given) if given else None


@dataclass(frozen=True, slots=True)
class KeySpan:
    """Keys (store form) in [lo, hi] that start with `prefix`; windows whose stored start
    (`sparkiq.core.serde.window_store_key(b"", ms)`) lies in [first, last]."""

    lo: bytes | None
    hi: bytes | None
    prefix: bytes | None
    first: bytes = _FIRST_START
    last: bytes = _LAST_START

    def holds(self, key: bytes) -> bool:
        return (
            (self.lo is None or key >= self.lo)
            and (self.hi is None or key <= self.hi)
            and (self.prefix is None or key.startswith(self.prefix))
        )


@dataclass(slots=True)
class _Walk:
    store: ReadableStore
    span: KeySpan
    examined: int = 0
    empty: set[bytes] = field(default_factory=set)  # keys found without windows in range

    def rows(
        self, lo: bytes | None, hi: bytes | None, prefix: bytes | None, after: bytes | None,
        order: Order,
    ) -> Iterator[bytes]:  # fmt: skip
        """Store keys in the bounds, in `order`, read a growing chunk at a time; each one
        taken is counted as examined."""
        chunk = _FIRST_CHUNK
        while True:
            page = self.store.scan(
                lo=lo, hi=hi, prefix=prefix, after=after, limit=chunk, order=order
            )
            for store_key, _ in page:
                self.examined += 1
                yield store_key
            if len(page) < chunk:
                return
            after = page[-1][0]
            chunk = min(chunk * 8, _CHUNK)

    def windows(
        self, key: bytes, after: bytes | None, order: Order
    ) -> Iterator[tuple[bytes, bytes]]:
        """The windows of `key` in the span's starts, past `after`, in `order`."""
        width = len(key) + 8
        lo, hi = key + self.span.first, key + self.span.last
        chunk = _FIRST_CHUNK
        while True:
            page = self.store.scan(lo=lo, hi=hi, prefix=key, after=after, limit=chunk, order=order)
            for row in page:
                self.examined += 1
                # A longer key that begins with this one may sort among its windows.
                if len(row[0]) == width:
                    yield row
            if len(page) < chunk:
                return
            after = page[-1][0]
            chunk = min(chunk * 8, _CHUNK)

    def has_windows(self, key: bytes) -> bool:
        if key in self.empty:
            return False
        for _ in self.windows(key, None, Order.ASC):
            return True
        self.empty.add(key)
        return False

    def next_key(self, after: bytes | None) -> bytes | None:
        """The first key of the span past `after` (None: from the start), in key order."""
        span = self.span
        floor = _highest(span.lo, span.prefix)
        start = _highest(None if after is None else after + b"\x00", floor) or b""
        top = None if span.hi is None else span.hi + _LAST_START
        found: bytes | None = None
        for row in self.rows(start, top, span.prefix, None, Order.ASC):
            key = row[:-8]
            if (after is not None and key <= after) or (floor is not None and key < floor):
                continue  # `after`'s own windows, or those of keys that begin it or `floor`
            if span.hi is None or key <= span.hi:
                found = key
            break  # past `hi`: only keys that begin `hi` (or it) may still be in the span
        base = found if found is not None else span.hi
        if base is None:
            return None
        shortest = 0 if after is None else _common(after, base) + 1
        longest = len(base) if found is not None else len(base) + 1
        for n in range(shortest, longest):
            candidate = base[:n]
            if (
                (after is None or candidate > after)
                and span.holds(candidate)
                and self.has_windows(candidate)
            ):
                return candidate
        return found

    def previous_key(self, before: bytes | None) -> bytes | None:
        """The last key of the span before `before` (None: from the end), in key order."""
        span = self.span
        upper = before
        if span.hi is not None:
            upper = _lowest(upper, span.hi + b"\x00")  # below hi + 0x00: at most hi
        if span.prefix is not None:
            upper = _lowest(upper, _prefix_end(span.prefix))
        floor = _highest(span.lo, span.prefix)
        fallback: bytes | None = None
        while True:
            found: bytes | None = None
            for row in self.rows(floor, None, None, upper, Order.DESC):
                key = row[:-8]
                if floor is None or key >= floor:
                    found = key
                    break
            # Keys that begin `upper` sort at or past it in the store, yet may come before
            # it in key order, after `found` (unless `found` begins `upper`: then they begin
            # with `found` and the next round looks at them).
            if upper is not None and not (found is not None and upper.startswith(found)):
                shortest = -1 if found is None else _common(found, upper)
                for n in range(len(upper) - 1, shortest, -1):
                    candidate = upper[:n]
                    if (
                        (floor is None or candidate >= floor)
                        and span.holds(candidate)
                        and self.has_windows(candidate)
                    ):
                        return candidate
            if found is None:
                return fallback
            # The last key that begins with `found` (and is before `upper`), else `found`.
            fallback = found
            upper = _lowest(upper, _prefix_end(found))
            floor = found + b"\x00"


def walk_windows(
    store: ReadableStore,
    span: KeySpan,
    order: Order,
    cursor: bytes | None,
    fetch: int,
    budget: int,
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """Up to `fetch` windows of the span past `cursor` (a store key) in (key, start) order
    (reversed for DESC), and where the walk stopped (None: at the end of the span)."""
    walk = _Walk(store, span)
    descending = order is Order.DESC
    out: list[tuple[bytes, bytes]] = []
    key: bytes | None = None
    if cursor is not None and len(cursor) >= 8:
        key = cursor[:-8]
        if span.holds(key):
            for row in walk.windows(key, cursor, order):
                out.append(row)
                if len(out) >= fetch or walk.examined >= budget:
                    return out, row[0]
    while True:
        key = walk.previous_key(key) if descending else walk.next_key(key)
        if key is None:
            return out, None
        for row in walk.windows(key, None, order):
            out.append(row)
            if len(out) >= fetch or walk.examined >= budget:
                return out, row[0]
        if walk.examined >= budget:
            return out, key + (_FIRST_START if descending else _LAST_START)
