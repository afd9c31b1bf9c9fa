"""The parts of a watch of a range (`sparkiq.http.watches.rangewatch`): what it watches, the
items its sources hand it through one bounded inbox, the JSON of a change, and the reading of
another node's stream that it relays.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from sparkiq.core import positions
from sparkiq.core.kstreams import window_end_and_value
from sparkiq.core.serde import split_window_store_key
from sparkiq.core.tables import TableDef
from sparkiq.http.forwarding.relay import Upstream, UpstreamError
from sparkiq.http.messages import sse
from sparkiq.http.messages.params import codecs
from sparkiq.http.reads.readloop import Ask
from sparkiq.http.settings import HttpSettings

POSITIONS_EVENT = "positions"  # the name of the event that says where a stream starts


@dataclass(frozen=True, slots=True)
class WatchedRange:
    """What one watch of a range reads: the keys of a table within store-key bounds (lo, hi
    inclusive, prefix; None: no bound), in `partitions`."""

    table: TableDef
    partitions: tuple[int, ...]
    lo: bytes | None
    hi: bytes | None
    prefix: bytes | None
    path: str  # the watch's raw path, for relays
    query: dict[str, str]  # the parameters a relay repeats (bounds, max_lag)

    def accepts(self, store_key: bytes) -> bool:
        """Whether a key (its store form) is in the range: on a windowed table, whether the
        key of the window is (all of a key's windows are in a range that ends at the key)."""
        lo, hi, prefix = self.lo, self.hi, self.prefix
        if self.table.is_windowed:
            store_key = store_key[:-8]  # less the window start (`split_window_store_key`)
        return (
            (lo is None or store_key >= lo)
            and (hi is None or store_key <= hi)
            and (prefix is None or store_key.startswith(prefix))
        )

    def change(
        self,
        partition: int,
        store_key: bytes,
        value: bytes | None,
        position: int,
        node: str,
        standby: bool,
    ) -> bytes:
        """A change's event data: the JSON of a key's answer, with the window's `start` and
        `end` on a windowed table (as a range item has them)."""
        table = self.table
        codec, value_codec = codecs(table)
        doc: dict[str, Any] = {"table": table.name}
        if table.is_windowed:
            key_store, start = split_window_store_key(store_key)
            doc["key"] = codec.render(codec.store_to_wire(key_store))
            doc["start"] = start
            doc["end"] = start + (table.window_size_ms or 0)
            if value is not None:
                doc["end"], value = window_end_and_value(table, start, value)
        else:
            doc["key"] = codec.render(codec.store_to_wire(store_key))
        doc["value"] = None if value is None else value_codec.render(value)
        doc["partition"] = partition
        doc["offset"] = position
        doc["node"] = node
        doc["standby"] = standby
        return orjson.dumps(doc)


class Source:
    """One source of some partitions' changes: this node's replica (`ask` None) or the
    stream of the node `ask` names, relayed."""

    __slots__ = ("ask", "partitions", "task")

    def __init__(self, partitions: tuple[int, ...], ask: Ask | None = None) -> None:
        self.partitions = partitions
        self.ask = ask
        self.task: asyncio.Task[None] | None = None


class Item(NamedTuple):
    """What a source tells the stream: partition `partition` is at `position`, with the
    event data of a change, or without (None: where the source starts, or how far it has
    read with nothing in the range)."""

    source: Source
    partition: int
    position: int
    data: bytes | None


class Inbox:
    """The items of every source, in the order they came; at most `cap` waiting (a source
    that would add more waits: the client reads slower than the changes come)."""

    def __init__(self, cap: int) -> None:
        self._items: deque[Item] = deque()
        self._cap = cap
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    async def put(self, item: Item) -> None:
        while len(self._items) >= self._cap:
            self._room.clear()
            await self._room.wait()
        self._items.append(item)
        self._wake.set()

    def wake(self) -> None:
        """Wake the reader without an item (the watch must end)."""
        self._wake.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait for items (or `wake`) at most `timeout_s`; False on the timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    def take(self) -> list[Item]:
        items = list(self._items)
        self._items.clear()
        self._wake.clear()
        self._room.set()
        return items


async def relayed(
    upstream: Upstream,
    settings: HttpSettings,
    source: Source,
    target: str,
    *,
    hops: int,
    extra: str,
    since: dict[int, int],
    inbox: Inbox,
) -> AsyncIterator[None]:
    """Put the items of the stream of `source`'s node (`GET target`, resumed from `since`)
    into `inbox`, yielding once per chunk read; return when that stream ends (its watch
    ended: a source of its went). Raises what `Upstream.stream` raises, and
    `UpstreamError` for a stream that is not a watch of a range."""
    assert source.ask is not None
    url = source.ask.url
    wanted: Collection[int] = frozenset(source.partitions)
    reader = sse.EventReader()
    stream: AsyncGenerator[bytes] = upstream.stream(
        url,
        target,
        hops=hops,
        budget_s=settings.request_budget_s,
        extra=extra,
        last_event_id=positions.encode(since) if since else None,
        connect_timeout_s=settings.active_timeout_s,
        idle_timeout_s=2 * settings.watch_heartbeat_s + 1,
    )
    async with contextlib.aclosing(stream):
        async for chunk in stream:
            for ev in reader.feed(chunk):
                if ev.name == POSITIONS_EVENT:
                    for p, position in _starts(url, ev.event_id).items():
                        if p in wanted:
                            await inbox.put(Item(source, p, position, None))
                elif ev.name == "message":
                    p, position = _where(url, ev.data)
                    if p in wanted:
                        await inbox.put(Item(source, p, position, ev.data))
                else:
                    return
            yield None


def _starts(url: str, event_id: str | None) -> positions.Positions:
    try:
        return positions.decode(event_id or "")
    except positions.BadPositions as exc:
        raise UpstreamError(f"{url} sent a positions event whose id {exc}") from exc


def _where(url: str, data: bytes) -> tuple[int, int]:
    """The partition and position of a relayed change's event."""
    try:
        doc = orjson.loads(data)
        return int(doc["partition"]), int(doc["offset"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UpstreamError(f"{url} sent an event that is not a change: {data[:80]!r}") from exc
