"""The changes a node's replicas apply, handed to those who watch keys (live reads).

The restorer thread applies each consumed batch under its lock; right after a watched
partition's records are written it passes them here (`ChangeFeed.publish`), and the feed
hands them to the event loop, in the order they were applied, where each watcher of one of
their keys hears of it. A watch starts with `ChangeFeed.subscribe` and then a snapshot of the
key taken under the same lock (`Restorer.snapshot`): every change applied before the
snapshot is in it (its position is past the change), every one after comes through the feed,
so a watcher that keeps only changes past the snapshot misses none and repeats none.

Only partitions someone watches cost anything: the restorer asks `watched` per written run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sparkiq.core.errors import SparkiqError
from sparkiq.core.topology import TopicPartition

log = logging.getLogger(__name__)

StoreKeyFn = Callable[[bytes], bytes]


class Change(NamedTuple):
    """One record a replica applied: its store key, new value (None: deleted) and the
    replica's position after it (the record's offset + 1)."""

    store_key: bytes
    value: bytes | None
    position: int


class Subscription:
    """One watcher of one key of one partition (`ChangeFeed.subscribe`).

    `value` and `position` are the key's snapshot once the node took it; `on_change(value,
    position)` hears of every change of the key after that, `on_end` once the replica is
    gone (revoked), both on the event loop.
    """

    __slots__ = ("_feed", "key", "on_change", "on_end", "position", "tp", "value")

    def __init__(
        self,
        feed: ChangeFeed,
        tp: TopicPartition,
        key: bytes,
        on_change: Callable[[bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> None:
        self._feed = feed
        self.tp = tp
        self.key = key
        self.on_change = on_change
        self.on_end = on_end
        self.value: bytes | None = None
        self.position = 0

    def close(self) -> None:
        """Stop hearing of changes (idempotent)."""
        self._feed.unsubscribe(self)


class ChangeFeed:
    """Watchers by partition and key; changes from the restorer thread to the event loop."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        # tp -> store key -> subscriptions. Changed on the loop only; the restorer thread
        # reads whether a partition is in it (one dict lookup, safe under the GIL).
        self._watched: dict[TopicPartition, dict[bytes, list[Subscription]]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop subscribers live on (the node's)."""
        self._loop = loop

    def watched(self, tp: TopicPartition) -> bool:
        """Whether anyone watches a key of `tp` (any thread)."""
        return tp in self._watched

    def subscribe(
        self,
        tp: TopicPartition,
        key: bytes,
        on_change: Callable[[bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> Subscription:
        """Watch `key` of `tp` (on the loop). Take the snapshot after this, not before."""
        sub = Subscription(self, tp, key, on_change, on_end)
        self._watched.setdefault(tp, {}).setdefault(key, []).append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        by_key = self._watched.get(sub.tp)
        if by_key is None:
            return
        subs = by_key.get(sub.key)
        if subs is None or sub not in subs:
            return
        subs.remove(sub)
        if not subs:
            del by_key[sub.key]
            if not by_key:
                del self._watched[sub.tp]

    def watcher_count(self) -> int:
        return sum(len(subs) for by_key in self._watched.values() for subs in by_key.values())

    def publish(
        self,
        messages: Sequence[Any],
        written: Mapping[TopicPartition, tuple[StoreKeyFn | None, int, int]],
    ) -> None:
        """The records of `messages` just written to watched partitions (`changes_of`), to
        their watchers (the restorer thread, under its lock, so a snapshot taken under it
        is before or after all of them)."""
        loop = self._loop
        if loop is None:
            return
        for tp, changes in changes_of(messages, written).items():
            if changes:
                loop.call_soon_threadsafe(self._deliver, tp, changes)

    def end(self, tps: Iterable[TopicPartition]) -> None:
        """This node's replicas of `tps` are gone (any thread): their watchers hear of it."""
        loop = self._loop
        gone = [tp for tp in tps if tp in self._watched]
        if loop is not None and gone:
            loop.call_soon_threadsafe(self._end, gone)

    def _deliver(self, tp: TopicPartition, changes: Sequence[Change]) -> None:
        by_key = self._watched.get(tp)
        if by_key is None:
            return
        for change in changes:
            subs = by_key.get(change.store_key)
            if subs is None:
                continue
            for sub in tuple(subs):
                try:
                    sub.on_change(change.value, change.position)
                except Exception:
                    log.exception("a watcher of %s[%d] failed on a change", *tp)

    def _end(self, tps: Sequence[TopicPartition]) -> None:
        for tp in tps:
            by_key = self._watched.pop(tp, None)
            if by_key is None:
                continue
            for subs in by_key.values():
                for sub in subs:
                    try:
                        sub.on_end()
                    except Exception:
                        log.exception("a watcher of %s[%d] failed at its end", *tp)


def changes_of(
    messages: Sequence[Any],
    wanted: Mapping[TopicPartition, tuple[StoreKeyFn | None, int, int]],
) -> dict[TopicPartition, list[Change]]:
    """The changes in `messages` of each partition in `wanted`, which maps it to its key
    function (wire key -> store key, None: the same) and the offsets written [first, last].

    Records without a key, or whose key the function refuses, are not changes (the restorer
    skipped them too).
    """
    out: dict[TopicPartition, list[Change]] = {tp: [] for tp in wanted}
    for msg in messages:
        if msg.error() is not None:
            continue
        tp = (msg.topic(), msg.partition())
        want = wanted.get(tp)
        key = msg.key()
        if want is None or key is None:
            continue
        fn, first, last = want
        offset = msg.offset()
        if offset < first or offset > last:
            continue
        if fn is not None:
            try:
                key = fn(key)
            except (SparkiqError, ValueError):
                continue
        out[tp].append(Change(key, msg.value(), offset + 1))
    return out
