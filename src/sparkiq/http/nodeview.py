"""What the HTTP layer may see of its node: tables, placements, readable stores, metadata.

`sparkiq.node.node.Node` implements `NodeView`; tests may implement it with real stores and a
fixed placement. The HTTP layer decides, per request, to read locally, forward, wait or fail;
the view only reports facts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from sparkiq.core.progress import PipelineProgress
from sparkiq.core.queries import Order
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import Placement, TopicPartition

__all__ = ["ChangeRow", "KeyWatch", "NodeView", "Placement", "RangeWatch", "ReadableStore"]

# One change a replica applied: its store key, new value (None: deleted) and the replica's
# position after it (the record's offset + 1).
ChangeRow = tuple[bytes, bytes | None, int]


class ReadableStore(Protocol):
    """The read side of `sparkiq.node.stores.partitionstore.PartitionStore`: all the HTTP
    layer ever calls.

    Typing the view against this instead of the concrete class lets tests serve from small
    dict-backed stores, and keeps the HTTP layer from reaching for the write methods.
    """

    def get(self, store_key: bytes) -> bytes | None: ...

    def multi_get(self, store_keys: Sequence[bytes]) -> list[bytes | None]: ...

    def scan(
        self,
        *,
        lo: bytes | None,
        hi: bytes | None,
        prefix: bytes | None,
        after: bytes | None,
        limit: int,
        order: Order = ...,
    ) -> list[tuple[bytes, bytes]]: ...


class KeyWatch(Protocol):
    """A watch of one key in this node's replica (`NodeView.watch_key`)."""

    @property
    def value(self) -> bytes | None:
        """The key's stored value when the watch began (None: absent)."""
        ...

    @property
    def position(self) -> int:
        """The replica's position then: the next changelog offset it applies."""
        ...

    def close(self) -> None:
        """Stop the watch (idempotent)."""
        ...


class RangeWatch(Protocol):
    """A watch of the keys of one partition in a range, in this node's replica
    (`NodeView.watch_range`)."""

    @property
    def position(self) -> int:
        """The replica's position when the watch began: changes before it are in the
        changelog (`NodeView.replay`), changes after it come to the watch."""
        ...

    def close(self) -> None:
        """Stop the watch (idempotent)."""
        ...


class NodeView(Protocol):
    """The facts the HTTP layer reads from its node."""

    @property
    def url(self) -> str: ...

    def table(self, name: str) -> TableDef | None: ...

    def tables(self) -> Sequence[TableDef]: ...

    def placement(self, tp: TopicPartition) -> Placement: ...

    def store(self, tp: TopicPartition) -> ReadableStore | None: ...

    def local_active(self, tp: TopicPartition) -> tuple[ReadableStore, int | None] | None:
        """This node's ready active replica of `tp` (its store and next changelog offset),
        or None: then `placement()` says who answers. The key path asks this first; it must
        agree with `placement(tp).is_local_active` and cost no more than a dict lookup."""
        ...

    def metadata(self) -> dict[str, object]: ...

    def table_summary(self, table: TableDef) -> dict[str, object]:
        """`GET /v1/tables`' entry of `table`: its definition's summary, and
        `misplaced_records` (see `misplaced_records`)."""
        ...

    def misplaced_records(self, table: str) -> int:
        """Records of `table` the cluster found outside the partition its partitioner gives
        their keys; while any are known, a lookup that misses asks every partition."""
        ...

    def is_ready(self) -> bool: ...

    def unready_reason(self) -> str | None:
        """Why the node is not ready (None when it is), for `/readyz`."""
        ...

    def kafka_contact(self) -> dict[str, object]:
        """Whether the node reaches its Kafka brokers, and since when it does not (the
        `kafka` object of `/readyz` and `/v1/metadata`)."""
        ...

    def catalog_loaded(self) -> bool:
        """False until the node has read the catalog once (it knows no table before that)."""
        ...

    def pipeline_progress(self) -> PipelineProgress:
        """What each table's pipeline has committed, as far as this node has heard
        (`after_source` reads)."""
        ...

    async def changed(self, timeout_s: float) -> None:
        """Return when the cluster map or a local replica's state changes, or after timeout_s."""
        ...

    def watch_key(
        self,
        tp: TopicPartition,
        store_key: bytes,
        on_change: Callable[[bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> KeyWatch | None:
        """Watch `store_key` in this node's replica of `tp`: its value and the replica's
        position now, then `on_change(value, position)` for every change of it applied
        after that, in order, and `on_end()` once if the replica goes. None when this node
        has no replica of `tp`. The callbacks run on the event loop."""
        ...

    def watch_range(
        self,
        tp: TopicPartition,
        accepts: Callable[[bytes], bool],
        on_change: Callable[[bytes, bytes | None, int], None],
        on_end: Callable[[], None],
    ) -> RangeWatch | None:
        """Watch every key of `tp` whose store key `accepts` takes, in this node's replica:
        the replica's position now, then `on_change(store_key, value, position)` for every
        such change applied after that, in order, and `on_end()` once if the replica goes.
        None when this node has no replica of `tp`. The callbacks run on the event loop."""
        ...

    def replay(
        self, tp: TopicPartition, since: int, until: int, accepts: Callable[[bytes], bool]
    ) -> AsyncIterator[Sequence[ChangeRow]]:
        """The changes of `tp` at changelog offsets [`since`, `until`) whose store key
        `accepts` takes, read again from the changelog, in order, in batches (from the
        earliest record left if `since` is older). Raises `sparkiq.core.errors.KafkaError`
        when the changelog cannot be read."""
        ...
