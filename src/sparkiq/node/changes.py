"""The changes a node's replicas apply, handed to those who watch keys (live reads).

The restorer thread applies each consumed batch under its lock; right after a watched
partition's records are written it passes them here (`ChangeFeed.publish`), and the feed
hands them to the event loop, in the order they were applied, where each watcher of one of
their keys hears of it. A watch starts with `ChangeFeed.subscribe` and then a snapshot of the
key taken under the same lock (`Restorer.snapshot`): every change applied before the
snapshot is in it (its position is past the change), every one after comes through the feed,
so a watcher that keeps only changes past the snapshot misses none and repeats none.

A watch of a range of keys subscribes to a whole partition instead (`subscribe_range`: every
change whose store key its predicate accepts) and then reads the replica's position under
the same lock: changes up to it are in the changelog before it (`sparkiq.node.replay` reads
them again for a watch that resumes from further back), changes past it come through here.

Only partitions someone watches cost anything: the restorer asks `watched` per written run,
one dict lookup whether a partition is watched by key, by range, or not at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sparkiq.core.errors import SparkiqError
from sparkiq.core.kstreams import stored_value
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


class RangeSubscription:
    """One watcher of the keys of one partition that `accepts` takes
    (`ChangeFeed.subscribe_range`).

    `position` is the replica's position once the node read it; `on_change(store_key, value,
    position)` hears of every accepted change after that, `on_end` once the replica is gone
    (revoked), both on the event loop.
    """

    __slots__ = ("_feed", "accepts", "on_change", "on_end", "position", "tp")

    def __init__(
        self,
        feed: ChangeFeed,
        tp: TopicPartition,
        accepts: Callable[[bytes], bool],
        on_change: Callable[[bytes, bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> None:
        self._feed = feed
        self.tp = tp
        self.accepts = accepts
        self.on_change = on_change
        self.on_end = on_end
        self.position = 0

    def close(self) -> None:
        """Stop hearing of changes (idempotent)."""
        self._feed.unsubscribe_range(self)


class _Watchers:
    """The watchers of one partition: of single keys, and of ranges of its keys."""

    __slots__ = ("by_key", "ranges")

    def __init__(self) -> None:
        self.by_key: dict[bytes, list[Subscription]] = {}
        self.ranges: list[RangeSubscription] = []

    def __bool__(self) -> bool:
        return bool(self.by_key or self.ranges)


class ChangeFeed:
    """Watchers by partition (and key); changes from the restorer thread to the event loop."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        # tp -> its watchers. Changed on the loop only; the restorer thread reads whether a
        # partition is in it (one dict lookup, safe under the GIL).
        self._watched: dict[TopicPartition, _Watchers] = {}

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
        self._watchers(tp).by_key.setdefault(key, []).append(sub)
        return sub

    def subscribe_range(
        self,
        tp: TopicPartition,
        accepts: Callable[[bytes], bool],
        on_change: Callable[[bytes, bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> RangeSubscription:
        """Watch every key of `tp` that `accepts` (a predicate on the store key) takes (on
        the loop). Read the replica's position after this, not before."""
        sub = RangeSubscription(self, tp, accepts, on_change, on_end)
        self._watchers(tp).ranges.append(sub)
        return sub

    def _watchers(self, tp: TopicPartition) -> _Watchers:
        watchers = self._watched.get(tp)
        if watchers is None:
            watchers = self._watched[tp] = _Watchers()
        return watchers

    def unsubscribe(self, sub: Subscription) -> None:
        watchers = self._watched.get(sub.tp)
        if watchers is None:
            return
        subs = watchers.by_key.get(sub.key)
        if subs is None or sub not in subs:
            return
        subs.remove(sub)
        if not subs:
            del watchers.by_key[sub.key]
            self._forget_if_unwatched(sub.tp, watchers)

    def unsubscribe_range(self, sub: RangeSubscription) -> None:
        watchers = self._watched.get(sub.tp)
        if watchers is None or sub not in watchers.ranges:
            return
        watchers.ranges.remove(sub)
        self._forget_if_unwatched(sub.tp, watchers)

    def _forget_if_unwatched(self, tp: TopicPartition, watchers: _Watchers) -> None:
        if not watchers and self._watched.get(tp) is watchers:
            del self._watched[tp]

    def watcher_count(self) -> int:
        """Watchers of keys and of ranges, on every partition."""
        return sum(
            len(w.ranges) + sum(len(subs) for subs in w.by_key.values())
            for w in self._watched.values()
        )

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
        watchers = self._watched.get(tp)
        if watchers is None:
            return
        by_key = watchers.by_key
        for change in changes:
            subs = by_key.get(change.store_key)
            if subs is None:
                continue
            for sub in tuple(subs):
                try:
                    sub.on_change(change.value, change.position)
                except Exception:
                    log.exception("a watcher of %s[%d] failed on a change", *tp)
        for ranged in tuple(watchers.ranges):
            accepts, on_change = ranged.accepts, ranged.on_change
            try:
                for change in changes:
                    if accepts(change.store_key):
                        on_change(change.store_key, change.value, change.position)
            except Exception:
                log.exception("a watcher of a range of %s[%d] failed on a change", *tp)

    def _end(self, tps: Sequence[TopicPartition]) -> None:
        for tp in tps:
            watchers = self._watched.pop(tp, None)
            if watchers is None:
                continue
            ends = [sub.on_end for subs in watchers.by_key.values() for sub in subs]
            ends += [sub.on_end for sub in watchers.ranges]
            for on_end in ends:
                try:
                    on_end()
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
        out[tp].append(Change(key, stored_value(fn, msg.key(), msg.value()), offset + 1))
    return out
