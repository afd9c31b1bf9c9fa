"""The node's side of live reads: watches of one key, of a range of a partition's keys, and
the changelog read again for a watch that resumes (`Watching`, a part of `Node`).

The HTTP layer calls these through `sparkiq.http.nodeview.NodeView`. A watch subscribes to the
node's `ChangeFeed` first and reads its replica (the key's value, or only the position) under
the restorer's lock after, so every change is either in what it read or delivered after it
(`sparkiq.node.changes`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.node.changes import Change, ChangeFeed, RangeSubscription, Subscription
from sparkiq.node.replay import replay
from sparkiq.node.restore import Restorer, store_key_fn
from sparkiq.node.settings import NodeSettings


class Watching:
    """Watches of this node's replicas (mixed into `sparkiq.node.node.Node`)."""

    settings: NodeSettings
    changes: ChangeFeed
    restorer: Restorer

    def _table_for_topic(self, topic: str) -> TableDef | None:
        raise NotImplementedError  # the node's

    def watch_key(
        self,
        tp: TopicPartition,
        store_key: bytes,
        on_change: Callable[[bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> Subscription | None:
        # Subscribed before the snapshot: a change applied in between is in both, and the
        # watcher keeps only changes past the snapshot's position (`sparkiq.node.changes`).
        sub = self.changes.subscribe(tp, store_key, on_change, on_end)
        snapshot = self.restorer.snapshot(tp, store_key)
        if snapshot is None:
            sub.close()
            return None
        sub.value, sub.position = snapshot
        return sub

    def watch_range(
        self,
        tp: TopicPartition,
        accepts: Callable[[bytes], bool],
        on_change: Callable[[bytes, bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> RangeSubscription | None:
        # As `watch_key`: subscribed first, then the position read under the restorer's lock.
        sub = self.changes.subscribe_range(tp, accepts, on_change, on_end)
        snapshot = self.restorer.snapshot(tp, None)
        if snapshot is None:
            sub.close()
            return None
        sub.position = snapshot[1]
        return sub

    def replay(
        self, tp: TopicPartition, since: int, until: int, accepts: Callable[[bytes], bool]
    ) -> AsyncIterator[list[Change]]:
        table = self._table_for_topic(tp[0])
        key_fn = None if table is None else store_key_fn(table)
        settings = self.settings
        return replay(
            settings.bootstrap_servers, settings.kafka_config, tp, since, until, key_fn, accepts
        )
