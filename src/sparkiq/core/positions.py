"""Positions in a table's changelog, as the text of consistency tokens and event ids.

A *position* is a replica's next changelog offset in one partition: every record before it
is applied. A set of them -- partition -> position -- says how far an answer (or a stream of
changes) has seen the table. It travels as text, URL-safe with no escaping:
`<partition>-<position>` per partition, joined by `.` in partition order, e.g.
`0-1200.3-877`. A read answer's `token`, an `after=` parameter and the id of a watch's
event are all this text; clients treat it as opaque.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

Positions = dict[int, int]

# The most partitions one token may name (a table has at most this many partitions).
MAX_PARTITIONS = 10_000


class BadPositions(ValueError):
    """Text that is not a set of positions (or names a partition the table has not)."""


def encode(positions: Mapping[int, int | None]) -> str:
    """`positions` as text; partitions whose position is unknown (None) are left out."""
    return ".".join(f"{p}-{o}" for p, o in sorted(positions.items()) if o is not None)


def one(partition: int, position: int) -> str:
    """The text of a single partition's position (a key's answer, a key watch's event)."""
    return f"{partition}-{position}"


def decode(text: str, partitions: int | None = None) -> Positions:
    """The positions `text` names; `partitions`: the table's count, to check against.

    Raises `BadPositions` with what is wrong. An empty text names no position.
    """
    out: Positions = {}
    if not text:
        return out
    parts = text.split(".")
    if len(parts) > MAX_PARTITIONS:
        raise BadPositions(f"names more than {MAX_PARTITIONS} partitions")
    for part in parts:
        p_text, sep, o_text = part.partition("-")
        if not (sep and _number(p_text) and _number(o_text)):
            raise BadPositions(f"{part!r} is not <partition>-<offset>")
        p, o = int(p_text), int(o_text)
        if partitions is not None and p >= partitions:
            raise BadPositions(f"partition {p} is past the table's {partitions}")
        if p in out:
            raise BadPositions(f"partition {p} is named twice")
        out[p] = o
    return out


def _number(text: str) -> bool:
    return 0 < len(text) <= 19 and text.isascii() and text.isdigit()


def merge(into: Positions, other: Mapping[int, int]) -> Positions:
    """`into` raised to `other` partition by partition (the newer of the two); `into`."""
    for p, o in other.items():
        if o > into.get(p, -1):
            into[p] = o
    return into


def covers(have: Mapping[int, int], want: Mapping[int, int], partitions: Iterable[int]) -> bool:
    """Whether `have` is at or past `want` in each of `partitions` `want` names."""
    return all(have.get(p, -1) >= want[p] for p in partitions if p in want)


class TokenBook:
    """The newest positions seen per table (a client's consistency tokens); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[str, Positions] = {}

    def observe(self, table: str, token: str) -> None:
        """Merge an answer's `token` (raises `BadPositions` if it is not one)."""
        seen = decode(token)
        if seen:
            with self._lock:
                merge(self._tables.setdefault(table, {}), seen)

    def token(self, table: str, partitions: Iterable[int] | None = None) -> str:
        """The token of `table` (of `partitions` only, if given); "" when none is known."""
        with self._lock:
            known = self._tables.get(table)
            if not known:
                return ""
            if partitions is None:
                return encode(known)
            return encode({p: known[p] for p in partitions if p in known})
