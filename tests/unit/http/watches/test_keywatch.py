"""Watches of a key (http/keywatch.py, http/watches.py): the state, then every change, from
the node's own replica or relayed from another node, across a lost owner.

Real servers (`HttpServer`) on loopback over `StaticView`s, whose `apply` changes a key as the
restorer would; a dead node is a closed server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import orjson
import pytest

from sparkiq.auth import EVERYONE
from sparkiq.core.partitioner import partition_for
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.app.dispatch import HttpApi
from sparkiq.http.messages.sse import Event, EventReader
from sparkiq.http.seam import Stream
from sparkiq.http.staticview import DictStore, StaticView

USERS = TableDef("users", "users-changelog", 4)
KEY = "user-7"
TP = (USERS.topic, partition_for(KEY.encode(), USERS.partitions))
WATCH = f"/v1/tables/users/keys/{KEY}/watch"
SETTINGS = HttpSettings(
    request_budget_s=2.0,
    reconnect_pause_s=0.02,
    active_timeout_s=0.3,
    watch_heartbeat_s=0.2,
)


def url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def view_of(me: str, active: str | None, standbys: list[str], *, offset: int = 0) -> StaticView:
    view = StaticView(me, [USERS])
    holds = me == active or me in standbys
    view.set_placement(
        TP, active, standbys, store=DictStore() if holds else None, offset=offset, lag=0
    )
    return view


async def start(
    stack: AsyncExitStack, view: StaticView, settings: HttpSettings = SETTINGS
) -> HttpServer:
    server = HttpServer(view, "127.0.0.1", int(view.url.rsplit(":", 1)[1]), settings)
    await stack.enter_async_context(server)
    return server


class Watch:
    """One open watch, read event by event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._chunks = response.aiter_bytes()
        self._reader = EventReader()
        self._events: list[Event] = []

    async def next(self, timeout_s: float = 5.0) -> Event:
        async with asyncio.timeout(timeout_s):
            while not self._events:
                self._events.extend(self._reader.feed(await anext(self._chunks)))
        return self._events.pop(0)

    async def values(self, n: int) -> list[tuple[str | None, object]]:
        out = []
        for _ in range(n):
            ev = await self.next()
            out.append((ev.event_id, orjson.loads(ev.data)["value"]))
        return out


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def open_watch(
    stack: AsyncExitStack, base: str, headers: dict[str, str] | None = None
) -> Watch:
    client = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=10.0))
    response = await stack.enter_async_context(client.stream("GET", WATCH, headers=headers))
    assert response.status_code == 200, await response.aread()
    assert response.headers["content-type"] == "text/event-stream"
    return Watch(response)


async def test_a_watch_sends_the_state_then_every_change_in_order(stack: AsyncExitStack) -> None:
    me = url()
    view = view_of(me, me, [])
    view.apply(USERS, KEY, {"n": 0})
    await start(stack, view)
    watch = await open_watch(stack, me)
    first = await watch.next()
    doc = orjson.loads(first.data)
    assert (first.event_id, doc["value"], doc["node"]) == (f"{TP[1]}-1", {"n": 0}, me)
    assert doc["standby"] is False
    assert doc["offset"] == 1
    for n in range(1, 6):
        view.apply(USERS, KEY, {"n": n})
    view.apply(USERS, "someone-else", {"n": 99})  # another key: no event
    view.apply(USERS, KEY, None)
    expected = [(f"{TP[1]}-{n + 1}", {"n": n}) for n in range(1, 6)]
    assert await watch.values(5) == expected
    assert await watch.values(1) == [(f"{TP[1]}-8", None)]  # deleted, after the other key


async def test_a_watch_through_another_node_relays_the_owners_events(
    stack: AsyncExitStack,
) -> None:
    owner, other = url(), url()
    owner_view = view_of(owner, owner, [])
    owner_view.apply(USERS, KEY, {"n": 0})
    await start(stack, owner_view)
    await start(stack, view_of(other, owner, []))
    watch = await open_watch(stack, other)
    assert await watch.values(1) == [(f"{TP[1]}-1", {"n": 0})]
    for n in range(1, 41):
        owner_view.apply(USERS, KEY, {"n": n})
    assert await watch.values(40) == [(f"{TP[1]}-{n + 1}", {"n": n}) for n in range(1, 41)]
    assert owner_view.watcher_count() == 1


async def test_a_resumed_watch_sends_the_state_only_if_the_partition_moved_on(
    stack: AsyncExitStack,
) -> None:
    me = url()
    view = view_of(me, me, [])
    view.apply(USERS, KEY, {"n": 0})
    view.apply(USERS, KEY, {"n": 1})
    await start(stack, view)
    caught_up = await open_watch(stack, me, {"last-event-id": f"{TP[1]}-2"})
    behind = await open_watch(stack, me, {"last-event-id": f"{TP[1]}-1"})
    assert await behind.values(1) == [(f"{TP[1]}-2", {"n": 1})]
    view.apply(USERS, KEY, {"n": 2})
    assert await caught_up.values(1) == [(f"{TP[1]}-3", {"n": 2})]  # no state first
    assert await behind.values(1) == [(f"{TP[1]}-3", {"n": 2})]


async def test_a_relayed_watch_goes_on_from_a_standby_and_never_goes_back(
    stack: AsyncExitStack,
) -> None:
    owner, standby, other = url(), url(), url()
    owner_view = view_of(owner, owner, [standby])
    standby_view = view_of(standby, owner, [standby])
    for n in range(3):
        owner_view.apply(USERS, KEY, {"n": n})
    standby_view.apply(USERS, KEY, {"n": 0})  # one change behind the owner's three
    async with AsyncExitStack() as owner_stack:
        await start(owner_stack, owner_view)
        await start(stack, standby_view)
        await start(stack, view_of(other, owner, [standby]))
        watch = await open_watch(stack, other)
        assert await watch.values(1) == [(f"{TP[1]}-3", {"n": 2})]
    # The owner is gone (its server closed); the standby catches up and goes on.
    standby_view.apply(USERS, KEY, {"n": 1})  # position 2: older than what was sent
    standby_view.apply(USERS, KEY, {"n": 2})  # position 3: sent already
    standby_view.apply(USERS, KEY, {"n": 3})
    event = await watch.next()
    doc = orjson.loads(event.data)
    assert (event.event_id, doc["value"], doc["node"]) == (f"{TP[1]}-4", {"n": 3}, standby)
    assert doc["standby"] is True


async def test_a_watch_past_the_limit_is_refused(stack: AsyncExitStack) -> None:
    me = url()
    await start(stack, view_of(me, me, []), SETTINGS.model_copy(update={"max_watchers": 1}))
    await open_watch(stack, me)
    await asyncio.sleep(0.05)  # the first stream has begun
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        r = await client.get(WATCH)
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "too_many_watches"
    assert r.headers["retry-after"] == "1"


async def test_bad_watches_are_refused_in_the_error_shape(stack: AsyncExitStack) -> None:
    me = url()
    await start(stack, view_of(me, me, []))
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        bad_id = await client.get(WATCH, headers={"last-event-id": "yesterday"})
        other_partition = await client.get(WATCH, headers={"last-event-id": f"{(TP[1] + 1) % 4}-3"})
        unknown = await client.get(f"/v1/tables/nope/keys/{KEY}/watch")
        internal = await client.get(f"{WATCH}?fallback_lag=3")
    assert (bad_id.status_code, bad_id.json()["error"]["code"]) == (400, "bad_request")
    assert other_partition.status_code == 400
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_table")
    assert internal.status_code == 400


async def test_an_idle_watch_gets_heartbeats(stack: AsyncExitStack) -> None:
    me = url()
    await start(stack, view_of(me, me, []))
    async with (
        httpx.AsyncClient(base_url=me, timeout=5.0) as client,
        client.stream("GET", WATCH) as response,
    ):
        seen = b""
        async with asyncio.timeout(5):
            async for chunk in response.aiter_bytes():
                seen += chunk
                if b": keep-alive" in seen:
                    break
    assert b"data: " in seen  # the state came first


async def test_a_watch_that_falls_behind_ends_with_a_dropped_event() -> None:
    me = url()
    view = view_of(me, me, [])
    api = HttpApi(view, SETTINGS.model_copy(update={"watch_queue": 3}))
    answer = api.watches.answer(WATCH, "", {}, EVERYONE)
    assert isinstance(answer, Stream)
    chunks = answer.chunks
    assert (await anext(chunks)).startswith(b"retry:")
    assert b"data: " in await anext(chunks)  # the state; the watch now waits for changes
    for n in range(10):  # the client reads nothing meanwhile
        view.apply(USERS, KEY, {"n": n})
    reader = EventReader()
    events = [ev for chunk in [c async for c in chunks] for ev in reader.feed(chunk)]
    assert [orjson.loads(ev.data)["value"] for ev in events[:3]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert events[3].name == "dropped"
    assert orjson.loads(events[3].data)["error"]["code"] == "unavailable"
    assert len(events) == 4
    assert api.metrics.watches_dropped == 1
    assert api.metrics.watches_open == 0
    assert view.watcher_count() == 0
