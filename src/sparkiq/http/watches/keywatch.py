"""One watch of one key: its state now, then every change, from whichever replica can tell.

The stream (`KeyWatcher.chunks`) finds its source as a read does (`readloop.PartitionRoutes`):
this node's replica if it may answer, else the active on another node, else a standby within
the lag bound (asked with `fallback_lag`), else it waits for the view within the request
budget. From a local replica it takes the key's snapshot and then every change the replica
applies (`NodeView.watch_key`); from another node it relays that node's stream
(`sparkiq.http.forwarding.relay`), asking with `Last-Event-ID`. When its source goes -- the replica
revoked, the other node gone or silent past two heartbeats -- it finds the next one and goes
on. When none can be found within the budget, it ends with an `unavailable` event and a
`retry:` hint; the client resumes with `Last-Event-ID`. The stream's parts are generators
closed with it (`aclosing`), so a watch that ends -- its client gone, the node stopping --
closes its replica's subscription or its relay then, not when the garbage collector runs.

Every event's id is `<partition>-<position>`: the replica's position (next changelog offset)
once the event's state was applied. The watch only ever sends an event past the last one it
sent, so no source, however far behind, can make it send an older value after a newer one.
A watch resumed with `Last-Event-ID` starts with the key's state only if its partition has
moved on since (the key may have changed; an unchanged partition means an unchanged key).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from sparkiq.core import positions
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.forwarding.relay import Refused, Upstream, UpstreamError
from sparkiq.http.messages import sse
from sparkiq.http.messages.params import codecs
from sparkiq.http.messages.responses import Response, failure_response
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.locate import Call, LocalReplica, fallback_target
from sparkiq.http.reads.readloop import Ask, PartitionRoutes

RETRY_MS = 1_000  # how long a client waits before it resumes an ended watch


@dataclass(frozen=True, slots=True)
class WatchedKey:
    """What one watch reads: the key of one table, and where it lives."""

    table: TableDef
    partition: int
    key_json: bytes  # the key as the answers render it
    store_key: bytes
    path: str  # the watch's raw path, for relays

    @property
    def tp(self) -> TopicPartition:
        return (self.table.topic, self.partition)


def parse_event_id(text: str, partition: int) -> int | Failure:
    """The position in a `Last-Event-ID` of a watch of a key in `partition`."""
    head, sep, tail = text.strip().partition("-")
    if not sep or not head.isdigit() or not tail.isdigit():
        return Failure(
            FailureReason.BAD_REQUEST,
            f"Last-Event-ID {text[:64]!r} is not <partition>-<position> (an event id)",
        )
    if int(head) != partition:
        return Failure(
            FailureReason.BAD_REQUEST,
            f"Last-Event-ID {text[:64]!r} is of partition {head}; this key is in {partition}",
        )
    return int(tail)


class KeyWatcher:
    """The chunks of one watch's event stream (`chunks`)."""

    def __init__(
        self,
        api: ApiParts,
        upstream: Upstream,
        key: WatchedKey,
        call: Call,
        seen: int | None,
        extra: str,
    ) -> None:
        self._api = api
        self._upstream = upstream
        self._key = key
        self._hops = call.hops
        self._max_lag = call.max_lag
        self._fallback_lag = call.fallback_lag
        self._query = call.target.partition("?")[2]
        self._seen = seen  # position of the last event sent (or the client had)
        self._extra = extra  # the caller's credentials, repeated on relays
        self._render_value = codecs(key.table)[1].render
        self._finished = False

    async def chunks(self) -> AsyncIterator[bytes]:
        metrics = self._api.metrics
        metrics.watches_open += 1
        try:
            yield sse.retry(RETRY_MS)
            while not self._finished:
                async with contextlib.aclosing(self._next_source()) as source:
                    async for chunk in source:
                        yield chunk
        finally:
            metrics.watches_open -= 1

    # -- finding a source ---------------------------------------------------------------------

    def _call(self) -> Call:
        settings = self._api.settings
        budget = settings.request_budget_s
        call = Call(self._hops, time.monotonic() + budget, budget, self._max_lag, self._target())
        call.fallback_lag = self._fallback_lag
        return call

    def _target(self) -> str:
        return f"{self._key.path}?{self._query}" if self._query else self._key.path

    async def _next_source(self) -> AsyncGenerator[bytes]:
        """Stream from the first source the routes give, until it goes."""
        api = self._api
        call = self._call()
        routes = PartitionRoutes(api.locator, call)
        tp = self._key.tp
        while True:
            found = routes.route(tp)
            if isinstance(found, LocalReplica):
                async with contextlib.aclosing(self._local(found)) as local:
                    async for chunk in local:
                        yield chunk
                return
            if isinstance(found, Ask):
                began = False  # the other node's stream began (its first chunk came)
                failure: Response | Unreachable | None = None
                try:
                    async with contextlib.aclosing(self._relay(found, routes.bound)) as relay:
                        async for chunk in relay:
                            began = True
                            yield chunk
                except Refused as refused:
                    failure = Response(refused.status, refused.body)
                except UpstreamError as exc:
                    failure = Unreachable(found.url, str(exc))
                if failure is None or began:
                    if not began:  # ended at once: do not spin on it
                        await asyncio.sleep(api.settings.reconnect_pause_s)
                    return
                if isinstance(failure, Response) and failure.status not in (503, 508):
                    yield self._end(failure.body)
                    return
                if isinstance(failure, Unreachable):
                    api.metrics.forward_failed(failure)
                routes.unanswered(found, (tp,), failure)
                if call.remaining() > 0:
                    continue
                why = routes.last_why
            elif found is None:
                if await api.locator.wait(call, routes.pause_s()):
                    continue
                why = routes.last_why
            else:
                why = found.message
            gave_up = api.locator.gave_up(call, why)
            yield self._end(failure_response(gave_up).body, "unavailable")
            return

    def _end(self, body: bytes, name: str = "error") -> bytes:
        """The last event: why the watch ends, then when to come back."""
        self._finished = True
        last = None if self._seen is None else self._event_id(self._seen)
        return sse.event(last, body, name) + sse.retry(RETRY_MS)

    # -- from this node's replica -------------------------------------------------------------

    async def _local(self, replica: LocalReplica) -> AsyncGenerator[bytes]:
        api = self._api
        settings = api.settings
        changes: deque[tuple[bytes | None, int]] = deque()
        wake = asyncio.Event()
        state = {"ended": False, "dropped": False}
        cap = settings.watch_queue

        def on_change(value: bytes | None, position: int) -> None:
            if len(changes) >= cap:
                state["dropped"] = True
            else:
                changes.append((value, position))
            wake.set()

        def on_end() -> None:
            state["ended"] = True
            wake.set()

        key = self._key
        watch = api.view.watch_key(key.tp, key.store_key, on_change, on_end)
        if watch is None:  # the replica went between the route and now
            await asyncio.sleep(settings.reconnect_pause_s)
            return
        try:
            if self._seen is None or watch.position > self._seen:
                yield self._event(watch.value, watch.position)
            while True:
                try:
                    async with asyncio.timeout(settings.watch_heartbeat_s):
                        await wake.wait()
                except TimeoutError:
                    yield sse.HEARTBEAT
                    continue
                wake.clear()
                out = b""
                while changes:
                    value, position = changes.popleft()
                    if self._seen is None or position > self._seen:
                        out += self._event(value, position)
                if out:
                    yield out
                if state["dropped"]:
                    api.metrics.watches_dropped += 1
                    why = failure_response(
                        Failure(
                            FailureReason.UNAVAILABLE,
                            f"the watch fell more than {cap} changes behind; resume it with "
                            "Last-Event-ID",
                        )
                    )
                    yield self._end(why.body, "dropped")
                    return
                if state["ended"]:
                    return
        finally:
            watch.close()

    def _event(self, value: bytes | None, position: int) -> bytes:
        api = self._api
        key = self._key
        placement = api.view.placement(key.tp)
        doc: dict[str, Any] = {
            "table": key.table.name,
            "key": orjson.Fragment(key.key_json),
            "value": None if value is None else self._render_value(value),
            "partition": key.partition,
            "offset": position,
            "token": self._event_id(position),
            "node": api.view.url,
            "standby": not placement.is_local_active,
        }
        self._seen = position
        api.metrics.watch_events += 1
        return sse.event(self._event_id(position), orjson.dumps(doc))

    def _event_id(self, position: int) -> str:
        return positions.one(self._key.partition, position)

    # -- through another node -----------------------------------------------------------------

    async def _relay(self, ask: Ask, bound: int) -> AsyncGenerator[bytes]:
        """The events of `ask`'s node past the last one sent (a heartbeat for a chunk
        without one), a chunk for each chunk of its stream."""
        api = self._api
        settings = api.settings
        target = self._target()
        if ask.as_stand_in:
            target = fallback_target(target, bound)
        if self._hops >= settings.hop_limit:
            raise Refused(
                508, failure_response(api.locator.loop_detected(self._call(), ask.url)).body
            )
        last = None if self._seen is None else self._event_id(self._seen)
        reader = sse.EventReader()
        stream: AsyncGenerator[bytes] = self._upstream.stream(
            ask.url,
            target,
            hops=self._hops,
            budget_s=settings.request_budget_s,
            extra=self._extra,
            last_event_id=last,
            connect_timeout_s=settings.active_timeout_s,
            idle_timeout_s=2 * settings.watch_heartbeat_s + 1,
        )
        async with contextlib.aclosing(stream):
            async for chunk in stream:
                out = b""
                for ev in reader.feed(chunk):
                    if ev.name != "message":
                        return  # the other node's watch ended (its source went): find another
                    position = _position(ev.event_id)
                    if position is not None and (self._seen is None or position > self._seen):
                        self._seen = position
                        api.metrics.watch_events += 1
                        out += sse.event(self._event_id(position), ev.data)
                yield out or sse.HEARTBEAT


def _position(event_id: str | None) -> int | None:
    if event_id is None:
        return None
    tail = event_id.rpartition("-")[2]
    return int(tail) if tail.isdigit() else None
