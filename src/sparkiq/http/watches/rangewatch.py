"""One watch of a range of keys: every change any replica of a table applies to a key in the
range, from every partition, merged into one event stream (`RangeWatcher.chunks`).

The stream:

- `retry: <ms>` first;
- then one `positions` event (`event: positions`): its id is the vector the stream starts
  from and its data `{"table", "positions": {"<partition>": <position>, ...}}`; it comes once
  every partition's start is known, so a client that leaves before any change can resume;
- then one event per change, in changelog order within each partition: its data is the JSON
  of a key's answer (`{"table", "key", "value", "partition", "offset", "node", "standby"}`,
  `value` null for a delete, `start`/`end` added on a windowed table, `offset` the replica's
  position once the change was applied, i.e. the record's offset + 1), its id the vector of
  positions the stream has delivered in every partition (`sparkiq.core.positions`:
  `0-120.1-98.2-301`);
- an idle stream gets a comment every `watch_heartbeat_s`; one that cannot go on ends with an
  `unavailable` event (no replica of a partition within the request budget, or its changelog
  cannot be read), a `dropped` one (the client fell `watch_queue` changes behind) or an
  `error` one, each with the last id and `retry:`.

Resuming with `Last-Event-ID: <vector>` delivers every change in the range past those
positions, none twice: a partition whose replica is further on has the changes in between read
again from its changelog (`NodeView.replay`) before its live ones; a partition the vector does
not name starts at its replica's position, as a new watch does.

Each partition is read where a read would be (`readloop.PartitionRoutes`): this node's
replica if it may answer (watched with `NodeView.watch_range`, subscribed before its position
is read, so nothing falls between the replay and the live changes), else another node's,
whose stream of the partitions it serves is relayed (`sparkiq.http.forwarding.relay`): ONE relay per
node, asked with the internal `partitions=` parameter and the vector of those partitions.
When a source goes (the replica revoked, the node gone or silent) its partitions are routed
again and go on from the last position delivered. Every source is one task feeding one bounded
inbox; the stream keeps each partition's position and drops what is at or before it, and an
item from a source that no longer serves its partition, so no source however far behind makes
the stream go back. When the stream ends (its client gone, the node stopping) its tasks are
cancelled and waited for, and no new one starts: nothing of the watch outlives its stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import orjson

from sparkiq.core import positions
from sparkiq.core.errors import KafkaError
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.forwarding.relay import Refused, Upstream, UpstreamError
from sparkiq.http.messages import sse
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.responses import Response, error_response, failure_response
from sparkiq.http.nodeview import RangeWatch
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.locate import Call, fallback_target
from sparkiq.http.reads.readloop import Ask, PartitionRoutes
from sparkiq.http.watches.rangefeed import (
    POSITIONS_EVENT,
    Inbox,
    Item,
    Source,
    WatchedRange,
    relayed,
)

log = logging.getLogger(__name__)

RETRY_MS = 1_000  # how long a client waits before it resumes an ended watch


@dataclass(slots=True)
class _Round:
    """One search for sources within one request budget (`PartitionRoutes` keeps what was
    asked in vain during it)."""

    call: Call
    routes: PartitionRoutes


class RangeWatcher:
    """The chunks of one watch of a range (`chunks`)."""

    def __init__(
        self,
        api: ApiParts,
        upstream: Upstream,
        watched: WatchedRange,
        call: Call,
        seen: dict[int, int],
        extra: str,
    ) -> None:
        self._api = api
        self._upstream = upstream
        self._watched = watched
        self._hops = call.hops
        self._max_lag = call.max_lag
        self._fallback_lag = call.fallback_lag
        self._extra = extra  # the caller's credentials, repeated on relays
        self._inbox = Inbox(api.settings.watch_queue)
        self._tasks: set[asyncio.Task[None]] = set()
        self._watches: set[RangeWatch] = set()  # of this node's replicas, closed at the end
        self._owner: dict[int, Source] = {}  # partition -> the source that serves it now
        self._relays: dict[Ask, Source] = {}
        # Each partition's last position taken from its source (what a new source of it
        # goes on from), where the stream started it, and the id of the last event sent.
        self._head = {p: o for p, o in seen.items() if p in watched.partitions}
        self._start = dict(self._head)
        self._sent: dict[int, int] | None = None  # None until the `positions` event is sent
        self._pending: list[tuple[int, int, bytes | None]] = []  # taken before that event
        self._ending: tuple[bytes, str] | None = None  # the last event's data and name
        self._closed = False  # the stream ended: no task starts any more

    async def chunks(self) -> AsyncIterator[bytes]:
        api = self._api
        metrics = api.metrics
        heartbeat_s = api.settings.watch_heartbeat_s
        metrics.watches_open += 1
        try:
            yield sse.retry(RETRY_MS)
            self._spawn(self._route(self._watched.partitions, self._new_round()))
            while True:
                out = self._announce()
                if self._ending is not None:
                    body, name = self._ending
                    last = None if self._sent is None else positions.encode(self._sent)
                    yield out + sse.event(last, body, name) + sse.retry(RETRY_MS)
                    return
                if out:
                    yield out
                if not await self._inbox.wait(heartbeat_s):
                    yield sse.HEARTBEAT
                    continue
                out = b"".join([self._take(item) for item in self._inbox.take()])
                if out:
                    yield out
        finally:
            self._closed = True
            for watch in tuple(self._watches):
                watch.close()  # now, not once the tasks' cancellation runs
            tasks = tuple(self._tasks)
            for task in tasks:
                task.cancel()
            try:
                if tasks:
                    # Each ends at its next await; waited for, so that a node that stops has
                    # no relay or replay of this watch left running when it closes its stores.
                    await asyncio.wait(tasks)
            finally:
                metrics.watches_open -= 1

    # -- the stream's positions ---------------------------------------------------------------

    def _take(self, item: Item) -> bytes:
        """`item`'s event, if it is news from its partition's source (b"" otherwise)."""
        p, position = item.partition, item.position
        if self._owner.get(p) is not item.source:
            return b""  # from a source replaced since: its successor goes on from `_head`
        last = self._head.get(p)
        if last is None:
            if item.data is None:  # where the partition starts
                self._head[p] = self._start[p] = position
            return b""
        if position <= last:
            return b""
        self._head[p] = position
        sent = self._sent
        if sent is None:
            # Held until every partition has started (a Last-Event-ID that names only some
            # partitions, and another that is slow to start): as many as a live queue holds.
            if len(self._pending) >= self._api.settings.watch_queue:
                self._dropped(self._api.settings.watch_queue)
            self._pending.append((p, position, item.data))
            return b""
        sent[p] = position
        return b"" if item.data is None else self._event(item.data)

    def _announce(self) -> bytes:
        """The `positions` event and the changes taken before it, once every partition's
        start is known (b"" before, and after it was sent)."""
        if self._sent is not None or len(self._start) < len(self._watched.partitions):
            return b""
        sent = self._sent = dict(self._start)
        doc = {
            "table": self._watched.table.name,
            "positions": {str(p): o for p, o in sorted(sent.items())},
        }
        self._api.metrics.watch_events += 1
        out = sse.event(positions.encode(sent), orjson.dumps(doc), POSITIONS_EVENT)
        for p, position, data in self._pending:
            sent[p] = position
            if data is not None:
                out += self._event(data)
        self._pending.clear()
        return out

    def _event(self, data: bytes) -> bytes:
        assert self._sent is not None
        self._api.metrics.watch_events += 1
        return sse.event(positions.encode(self._sent), data)

    def _finish(self, body: bytes, name: str) -> None:
        """End the watch with a last event `name` (the first reason given wins), after the
        changes taken so far; its id is the last one sent."""
        if self._ending is None:
            self._ending = (body, name)
            self._inbox.wake()

    # -- finding sources ----------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None], source: Source | None = None) -> None:
        """Run `work` in a task of this watch (`source`'s, when it is one)."""
        if self._closed:
            work.close()  # the stream ended: it is not needed, and closed it is not left unrun
            return
        # The coroutine is the task's own (no wrapper around it): a task cancelled before it
        # ran closes it, where a wrapper's would be left "never awaited".
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._reap)
        if source is not None:
            source.task = task

    def _reap(self, task: asyncio.Task[None]) -> None:
        """A task of this watch ended: one that failed ends the watch with an `error` event."""
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("a watch of a range of %s failed", self._watched.table.name, exc_info=exc)
            why = error_response(500, ErrorCode.INTERNAL, "the watch failed; the node logged why")
            self._finish(why.body, "error")

    def _new_round(self) -> _Round:
        settings = self._api.settings
        budget = settings.request_budget_s
        call = Call(self._hops, time.monotonic() + budget, budget, self._max_lag, "")
        call.fallback_lag = self._fallback_lag
        return _Round(call, PartitionRoutes(self._api.locator, call))

    async def _route(self, partitions: Sequence[int], rnd: _Round) -> None:
        """Give each of `partitions` a source: this node's replica or a relay, as the routes
        of `rnd` say, waiting for the view within its budget."""
        api = self._api
        topic = self._watched.table.topic
        pending = list(partitions)
        while pending and self._ending is None:
            remote: dict[Ask, list[int]] = {}
            waiting: list[int] = []
            for p in pending:
                found = rnd.routes.route((topic, p))
                if isinstance(found, Ask):
                    remote.setdefault(found, []).append(p)
                elif found is None:
                    waiting.append(p)
                elif isinstance(found, Failure):
                    self._give_up(rnd, found.message)
                    return
                else:
                    source = self._own(Source((p,)))
                    self._spawn(self._local(p, source), source)
            for ask, group in remote.items():
                self._relay_to(ask, group, rnd)
            pending = waiting
            if pending and not await api.locator.wait(rnd.call, rnd.routes.pause_s()):
                self._give_up(rnd, rnd.routes.last_why)
                return

    def _own(self, source: Source) -> Source:
        for p in source.partitions:
            self._owner[p] = source
        return source

    def _give_up(self, rnd: _Round, why: str) -> None:
        gave_up = self._api.locator.gave_up(rnd.call, why)
        self._finish(failure_response(gave_up).body, "unavailable")

    def _gone(self, source: Source, rnd: _Round | None = None) -> None:
        """`source` stopped: the partitions it still served are routed again (in `rnd`,
        when it is its search that goes on, else in a new one)."""
        if source.ask is not None and self._relays.get(source.ask) is source:
            del self._relays[source.ask]
        orphans = [p for p in source.partitions if self._owner.get(p) is source]
        for p in orphans:
            del self._owner[p]
        if orphans and self._ending is None:
            self._spawn(self._route(orphans, rnd or self._new_round()))

    # -- from this node's replica -------------------------------------------------------------

    async def _local(self, p: int, source: Source) -> None:
        """Partition `p` from this node's replica: what the stream lacks of it read again
        from the changelog, then its live changes, until the replica goes."""
        api = self._api
        settings = api.settings
        watched = self._watched
        tp = (watched.table.topic, p)
        live: deque[tuple[bytes, bytes | None, int]] = deque()
        wake = asyncio.Event()
        ended = False
        cap = settings.watch_queue

        def on_change(store_key: bytes, value: bytes | None, position: int) -> None:
            if len(live) >= cap:
                self._dropped(cap)
            else:
                live.append((store_key, value, position))
            wake.set()

        def on_end() -> None:
            nonlocal ended
            ended = True
            wake.set()

        watch = api.view.watch_range(tp, watched.accepts, on_change, on_end)
        if watch is None:  # the replica went between the route and now
            await asyncio.sleep(settings.reconnect_pause_s)
            self._gone(source)
            return
        inbox = self._inbox
        self._watches.add(watch)
        try:
            last = watch.position
            since = self._head.get(p)
            if since is not None and since < last:
                try:
                    async for batch in api.view.replay(tp, since, last, watched.accepts):
                        for store_key, value, position in batch:
                            await inbox.put(
                                Item(
                                    source,
                                    p,
                                    position,
                                    self._render(tp, store_key, value, position),
                                )
                            )
                except KafkaError as exc:
                    why = Failure(
                        FailureReason.UNAVAILABLE,
                        f"{api.view.url} cannot read the changes of partition {p} since "
                        f"position {since} again ({exc}); retry later",
                        retry_after_s=float(settings.retry_after_s),
                    )
                    self._finish(failure_response(why).body, "unavailable")
                    return
            last = max(last, since or 0)
            await inbox.put(Item(source, p, last, None))
            while not ended:
                await wake.wait()
                wake.clear()
                while live:
                    store_key, value, position = live.popleft()
                    if position > last:
                        last = position
                        data = self._render(tp, store_key, value, position)
                        await inbox.put(Item(source, p, position, data))
        finally:
            watch.close()
            self._watches.discard(watch)
        self._gone(source)

    def _dropped(self, cap: int) -> None:
        if self._ending is None:
            self._api.metrics.watches_dropped += 1
            why = Failure(
                FailureReason.UNAVAILABLE,
                f"the watch fell more than {cap} changes behind; resume it with Last-Event-ID",
            )
            self._finish(failure_response(why).body, "dropped")

    def _render(
        self, tp: TopicPartition, store_key: bytes, value: bytes | None, position: int
    ) -> bytes:
        view = self._api.view
        standby = not view.placement(tp).is_local_active
        return self._watched.change(tp[1], store_key, value, position, view.url, standby)

    # -- through other nodes ------------------------------------------------------------------

    def _relay_to(self, ask: Ask, partitions: Sequence[int], rnd: _Round) -> None:
        """Relay `ask`'s node for `partitions`: one relay per node, so one already open to it
        is replaced by one for its partitions and these."""
        group = set(partitions)
        current = self._relays.get(ask)
        if current is not None:
            group.update(p for p in current.partitions if self._owner.get(p) is current)
            if current.task is not None:
                current.task.cancel()
        source = self._own(Source(tuple(sorted(group)), ask))
        self._relays[ask] = source
        self._spawn(self._relay(source, rnd), source)

    async def _relay(self, source: Source, rnd: _Round) -> None:
        """Relay the stream of `source`'s node until it ends; then route its partitions
        again (in the same search if the node could not answer at all)."""
        api = self._api
        ask = source.ask
        assert ask is not None
        began = False  # the other node's stream began (its first chunk came)
        failure: Response | Unreachable | None = None
        try:
            async for _ in self._relayed(source, rnd.routes.bound):
                began = True
        except Refused as refused:
            failure = Response(refused.status, refused.body)
        except UpstreamError as exc:
            failure = Unreachable(ask.url, str(exc))
        if failure is None or began:
            if not began:  # ended at once: do not spin on it
                await asyncio.sleep(api.settings.reconnect_pause_s)
            self._gone(source)
            return
        if isinstance(failure, Response) and failure.status not in (503, 508):
            self._finish(failure.body, "error")
            return
        if isinstance(failure, Unreachable):
            api.metrics.forward_failed(failure)
        topic = self._watched.table.topic
        rnd.routes.unanswered(ask, [(topic, p) for p in source.partitions], failure)
        if rnd.call.remaining() > 0:
            self._gone(source, rnd)
        else:
            if self._relays.get(ask) is source:
                del self._relays[ask]
            self._give_up(rnd, rnd.routes.last_why)

    def _relayed(self, source: Source, bound: int) -> AsyncIterator[None]:
        """The relay of `source`'s node (`rangefeed.relayed`): for its partitions, resumed
        from where the stream is in each."""
        api = self._api
        settings = api.settings
        ask = source.ask
        assert ask is not None
        if self._hops >= settings.hop_limit:
            loop = api.locator.loop_detected(self._new_round().call, ask.url)
            raise Refused(508, failure_response(loop).body)
        query = {**self._watched.query, "partitions": ",".join(map(str, source.partitions))}
        target = f"{self._watched.path}?{urlencode(query)}"
        if ask.as_stand_in:
            target = fallback_target(target, bound)
        since = {p: self._head[p] for p in source.partitions if p in self._head}
        return relayed(
            self._upstream,
            settings,
            source,
            target,
            hops=self._hops,
            extra=self._extra,
            since=since,
            inbox=self._inbox,
        )
