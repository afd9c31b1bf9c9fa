"""Watches of a range of keys (http/rangewatch.py, http/rangefeed.py, http/watches.py): every
change in the range from every partition, in order per partition, from the node's own
replicas or relayed from other nodes; resumed with a vector of positions, exactly the changes
missed.

Real servers (`HttpServer`) on loopback over `StaticView`s, whose `apply` changes a key as the
restorer would and keeps it in an in-memory changelog that `replay` reads again; a dead node
is a closed server. The expected events are computed in plain Python from what was applied.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack
from typing import Any

import httpx
import orjson
import pytest

from sparkiq.auth import EVERYONE
from sparkiq.core import positions
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.app.dispatch import HttpApi
from sparkiq.http.messages.sse import Event, EventReader
from sparkiq.http.seam import Stream
from sparkiq.http.staticview import StaticView, where
from tests.support.mapview import wait_until

USERS = TableDef("users", "users-changelog", 4)
CHANGES = "/v1/tables/users/changes"
SETTINGS = HttpSettings(
    request_budget_s=2.0,
    reconnect_pause_s=0.02,
    active_timeout_s=0.3,
    watch_heartbeat_s=0.2,
)

Change = tuple[str, Any, int, int]  # key, value, partition, offset (position)


def url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def partition_of(key: str, table: TableDef = USERS) -> int:
    return where(table, key)[0][1]


def keys_in_every_partition(prefix: str, per_partition: int) -> list[str]:
    """Keys starting with `prefix`, `per_partition` in each partition of USERS."""
    found: dict[int, list[str]] = {p: [] for p in range(USERS.partitions)}
    n = 0
    while any(len(keys) < per_partition for keys in found.values()):
        key = f"{prefix}{n}"
        keys = found[partition_of(key)]
        if len(keys) < per_partition:
            keys.append(key)
        n += 1
    return [k for keys in found.values() for k in keys]


def views(
    owners: dict[int, str], urls: Iterable[str], standby: dict[int, str] | None = None
) -> dict[str, StaticView]:
    """A StaticView per URL, each partition active on `owners[p]` (and a standby on
    `standby[p]`)."""
    out: dict[str, StaticView] = {}
    for me in urls:
        view = StaticView(me, [USERS])
        for p, active in owners.items():
            standbys = [standby[p]] if standby and p in standby else []
            holds = me == active or me in standbys
            view.set_placement((USERS.topic, p), active, standbys)
            if holds:
                view.local_store((USERS.topic, p))
        out[me] = view
    return out


async def start(
    stack: AsyncExitStack, view: StaticView, settings: HttpSettings = SETTINGS
) -> HttpServer:
    server = HttpServer(view, "127.0.0.1", int(view.url.rsplit(":", 1)[1]), settings)
    await stack.enter_async_context(server)
    return server


class Watch:
    """One open watch of changes, read event by event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._chunks = response.aiter_bytes()
        self._reader = EventReader()
        self._events: list[Event] = []
        self.last_id: str | None = None

    async def next(self, timeout_s: float = 5.0) -> Event:
        async with asyncio.timeout(timeout_s):
            while not self._events:
                self._events.extend(self._reader.feed(await anext(self._chunks)))
        event = self._events.pop(0)
        if event.event_id is not None:
            self.last_id = event.event_id
        return event

    async def start(self) -> dict[int, int]:
        """The `positions` event's vector."""
        event = await self.next()
        assert event.name == "positions", event
        doc = orjson.loads(event.data)
        vector = positions.decode(event.event_id or "")
        assert {int(p): o for p, o in doc["positions"].items()} == vector
        return vector

    async def changes(self, n: int) -> list[Change]:
        """The next `n` changes; checks that each id is the vector after it: the change's
        partition at its position, no partition going back (one may move on past changes
        outside the range)."""
        out: list[Change] = []
        vector = positions.decode(self.last_id or "")
        for _ in range(n):
            event = await self.next()
            assert event.name == "message", event
            doc = orjson.loads(event.data)
            now = positions.decode(event.event_id or "")
            assert now[doc["partition"]] == doc["offset"]
            assert now.keys() == vector.keys()
            assert all(now[p] >= vector[p] for p in now)
            vector = now
            out.append((doc["key"], doc["value"], doc["partition"], doc["offset"]))
        return out


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def open_watch(
    stack: AsyncExitStack, base: str, query: str = "", headers: dict[str, str] | None = None
) -> Watch:
    client = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=10.0))
    target = f"{CHANGES}?{query}" if query else CHANGES
    response = await stack.enter_async_context(client.stream("GET", target, headers=headers))
    assert response.status_code == 200, await response.aread()
    assert response.headers["content-type"] == "text/event-stream"
    return Watch(response)


class Cluster:
    """The views of a test, and what was applied to them: the oracle of the changes."""

    def __init__(self, views: dict[str, StaticView], owners: dict[int, str]) -> None:
        self.views = views
        self.owners = owners
        self.applied: list[Change] = []

    def apply(self, key: str, value: Any) -> None:
        """`key` set on every replica of its partition (in step, as if caught up)."""
        p = partition_of(key)
        offsets = {
            view.apply(USERS, key, value)
            for view in self.views.values()
            if view.placement((USERS.topic, p)).local_role is not None
        }
        assert len(offsets) == 1
        self.applied.append((key, value, p, offsets.pop()))

    def expected(self, prefix: str, after: dict[int, int] | None = None) -> list[Change]:
        return [
            c
            for c in self.applied
            if c[0].startswith(prefix) and c[3] > (after or {}).get(c[2], -1)
        ]


def by_partition(changes: Iterable[Change]) -> dict[int, list[Change]]:
    out: dict[int, list[Change]] = {}
    for c in changes:
        out.setdefault(c[2], []).append(c)
    return out


def updates(cluster: Cluster, keys: list[str], rounds: range) -> None:
    for n in rounds:
        for key in keys:
            cluster.apply(key, None if n % 5 == 4 else {"n": n})


# -- one node -------------------------------------------------------------------------------------


async def test_changes_in_the_prefix_come_from_every_partition_in_order(
    stack: AsyncExitStack,
) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    inside = keys_in_every_partition("user-", 2)
    outside = keys_in_every_partition("other-", 1)
    updates(cluster, inside + outside, range(2))  # before the watch: not sent
    await start(stack, cluster.views[me])
    watch = await open_watch(stack, me, "prefix=user-")
    assert await watch.start() == {p: 2 * 3 for p in range(4)}  # 3 keys per partition x 2
    before = len(cluster.applied)
    updates(cluster, inside + outside, range(2, 8))
    expected = [c for c in cluster.applied[before:] if c[0].startswith("user-")]
    got = await watch.changes(len(expected))
    assert by_partition(got) == by_partition(expected)
    assert {c[1] is None for c in got} == {True, False}  # deletes come as null values
    with pytest.raises(TimeoutError):
        await watch.next(0.5)  # nothing more (heartbeats are comments)


async def test_from_and_to_bound_the_keys_and_no_bound_is_the_whole_table(
    stack: AsyncExitStack,
) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    await start(stack, cluster.views[me])
    bounded = await open_watch(stack, me, "from=k-b&to=k-d")
    everything = await open_watch(stack, me)
    await bounded.start()
    await everything.start()
    for key in ("k-a", "k-b", "k-c", "k-d", "k-d2", "k-e"):
        cluster.apply(key, {"k": key})
    got = await bounded.changes(3)
    assert sorted(c[0] for c in got) == ["k-b", "k-c", "k-d"]
    assert by_partition(await everything.changes(6)) == by_partition(cluster.applied)


async def test_a_resumed_watch_gets_exactly_the_changes_it_missed(stack: AsyncExitStack) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    view = cluster.views[me]
    inside = keys_in_every_partition("user-", 2)
    outside = keys_in_every_partition("other-", 1)
    await start(stack, view)
    async with AsyncExitStack() as first:
        watch = await open_watch(first, me, "prefix=user-")
        await watch.start()
        updates(cluster, inside + outside, range(3))
        await watch.changes(len(cluster.expected("user-")))
        # Left after a change in partitions 0..3 only partly read: resumed from its id.
        cluster.apply(inside[0], {"n": 100})
        got = await watch.changes(1)
        last = watch.last_id
    assert last is not None
    seen = positions.decode(last)
    assert got[0][3] == seen[got[0][2]]
    updates(cluster, inside + outside, range(3, 6))  # while nobody watches
    resumed = await open_watch(stack, me, "prefix=user-", {"last-event-id": last})
    assert await resumed.start() == seen
    missed = cluster.expected("user-", seen)
    assert by_partition(await resumed.changes(len(missed))) == by_partition(missed)
    assert sorted((tp[1], since) for tp, since, _ in view.replays) == sorted(seen.items())
    before = len(cluster.applied)
    updates(cluster, inside, range(6, 8))  # and live after the replay
    live = cluster.applied[before:]
    assert by_partition(await resumed.changes(len(live))) == by_partition(live)


async def test_the_positions_event_lets_a_watch_that_saw_no_change_resume(
    stack: AsyncExitStack,
) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    inside = keys_in_every_partition("user-", 1)
    updates(cluster, inside, range(2))
    await start(stack, cluster.views[me])
    async with AsyncExitStack() as first:
        watch = await open_watch(first, me, "prefix=user-")
        start_at = await watch.start()
        last = watch.last_id
    assert last == positions.encode(start_at)
    updates(cluster, inside, range(2, 4))
    resumed = await open_watch(stack, me, "prefix=user-", {"last-event-id": last})
    await resumed.start()
    missed = cluster.expected("user-", start_at)
    assert len(missed) == 8
    assert by_partition(await resumed.changes(8)) == by_partition(missed)


async def test_a_position_older_than_the_log_replays_what_is_left(stack: AsyncExitStack) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    view = cluster.views[me]
    key = keys_in_every_partition("user-", 1)[0]
    tp = (USERS.topic, partition_of(key))
    for n in range(6):
        cluster.apply(key, {"n": n})
    del view.log[tp][:4]  # compacted away: the oldest left is the 5th change
    await start(stack, view)
    vector = positions.encode({p: 0 for p in range(4)})
    watch = await open_watch(stack, me, "prefix=user-", {"last-event-id": vector})
    await watch.start()
    assert [c[1] for c in await watch.changes(2)] == [{"n": 4}, {"n": 5}]


async def test_a_windowed_tables_changes_carry_their_window(stack: AsyncExitStack) -> None:
    me = url()
    clicks = TableDef(
        "clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60_000
    )
    view = StaticView(me, [clicks])
    for p in range(2):
        view.set_placement((clicks.topic, p), me, store=None)
        view.local_store((clicks.topic, p))
    await start(stack, view)
    client = await stack.enter_async_context(httpx.AsyncClient(base_url=me, timeout=10.0))
    response = await stack.enter_async_context(
        client.stream("GET", "/v1/tables/clicks/changes?prefix=pa")
    )
    watch = Watch(response)
    await watch.next()  # positions
    view.apply(clicks, "page-1", 3, window_start=120_000)
    view.apply(clicks, "other", 4, window_start=120_000)
    doc = orjson.loads((await watch.next()).data)
    assert (doc["key"], doc["start"], doc["end"], doc["value"]) == ("page-1", 120_000, 180_000, 3)


# -- across nodes ---------------------------------------------------------------------------------


async def test_a_watch_relays_each_other_node_once_for_all_its_partitions(
    stack: AsyncExitStack,
) -> None:
    a, b, c = url(), url(), url()
    owners = {0: a, 1: b, 2: b, 3: c}
    cluster = Cluster(views(owners, [a, b, c]), owners)
    servers = {u: await start(stack, cluster.views[u]) for u in (a, b, c)}
    inside = keys_in_every_partition("user-", 2)
    outside = keys_in_every_partition("other-", 1)
    updates(cluster, inside + outside, range(1))
    watch = await open_watch(stack, a, "prefix=user-")
    assert await watch.start() == {0: 3, 1: 3, 2: 3, 3: 3}
    assert servers[b].api.metrics.watches_open == 1  # one relay for partitions 1 and 2
    assert servers[c].api.metrics.watches_open == 1
    before = len(cluster.applied)
    updates(cluster, inside + outside, range(1, 11))
    expected = [ch for ch in cluster.applied[before:] if ch[0].startswith("user-")]
    got = await watch.changes(len(expected))
    assert by_partition(got) == by_partition(expected)


async def test_a_resumed_watch_through_another_node_replays_there(stack: AsyncExitStack) -> None:
    a, b = url(), url()
    owners = {0: a, 1: a, 2: b, 3: b}
    cluster = Cluster(views(owners, [a, b]), owners)
    for u in (a, b):
        await start(stack, cluster.views[u])
    inside = keys_in_every_partition("user-", 1)
    async with AsyncExitStack() as first:
        watch = await open_watch(first, a, "prefix=user-")
        await watch.start()
        updates(cluster, inside, range(2))
        await watch.changes(8)
        last = watch.last_id
    assert last is not None
    updates(cluster, inside, range(2, 5))
    resumed = await open_watch(stack, a, "prefix=user-", {"last-event-id": last})
    await resumed.start()
    missed = cluster.expected("user-", positions.decode(last))
    assert by_partition(await resumed.changes(len(missed))) == by_partition(missed)
    assert {tp[1] for tp, _, _ in cluster.views[b].replays} == {2, 3}
    assert {tp[1] for tp, _, _ in cluster.views[a].replays} == {0, 1}


async def test_a_relayed_partition_goes_on_from_a_standby_and_never_goes_back(
    stack: AsyncExitStack,
) -> None:
    a, b, s = url(), url(), url()
    owners = {0: a, 1: a, 2: b, 3: b}
    cluster = Cluster(views(owners, [a, b, s], standby={2: s, 3: s}), owners)
    key = next(k for k in keys_in_every_partition("user-", 1) if partition_of(k) == 2)
    b_view, s_view = cluster.views[b], cluster.views[s]
    await start(stack, cluster.views[a])
    await start(stack, s_view)
    async with AsyncExitStack() as b_stack:
        await start(b_stack, b_view)
        watch = await open_watch(stack, a, "prefix=user-")
        await watch.start()
        for n in range(3):
            b_view.apply(USERS, key, {"n": n})
        s_view.apply(USERS, key, {"n": 0})  # the standby is two changes behind
        assert [ch[1] for ch in await watch.changes(3)] == [{"n": n} for n in range(3)]
    # b is gone: the standby stands in for partitions 2 and 3 (one relay to it) and catches
    # up; what the watch sent already is not sent again.
    for n in range(1, 5):
        s_view.apply(USERS, key, {"n": n})
    got = [await watch.next() for _ in range(2)]
    docs = [orjson.loads(ev.data) for ev in got]
    assert [(d["value"], d["offset"], d["node"], d["standby"]) for d in docs] == [
        ({"n": 3}, 4, s, True),
        ({"n": 4}, 5, s, True),
    ]
    assert [positions.decode(ev.event_id or "")[2] for ev in got] == [4, 5]
    assert s_view.watcher_count() == 2


# -- limits and refusals --------------------------------------------------------------------------


async def test_range_watches_count_against_the_watch_limit(stack: AsyncExitStack) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    await start(stack, cluster.views[me], SETTINGS.model_copy(update={"max_watchers": 1}))
    watch = await open_watch(stack, me)
    await watch.start()
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        r = await client.get(CHANGES)
        key = await client.get("/v1/tables/users/keys/k/watch")
    assert (r.status_code, r.json()["error"]["code"]) == (503, "too_many_watches")
    assert r.headers["retry-after"] == "1"
    assert key.status_code == 503


async def test_bad_watches_of_changes_are_refused_in_the_error_shape(
    stack: AsyncExitStack,
) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    await start(stack, cluster.views[me])
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        bad_id = await client.get(CHANGES, headers={"last-event-id": "yesterday"})
        past = await client.get(CHANGES, headers={"last-event-id": "0-1.9-3"})
        internal = await client.get(f"{CHANGES}?partitions=1")
        fallback = await client.get(f"{CHANGES}?fallback_lag=1")
        unknown = await client.get("/v1/tables/nope/changes")
        other = await client.get(f"{CHANGES}?limit=3")
    for r in (bad_id, past, internal, fallback, other):
        assert (r.status_code, r.json()["error"]["code"]) == (400, "bad_request"), r.text
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_table")


async def test_an_idle_watch_of_changes_gets_heartbeats(stack: AsyncExitStack) -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    await start(stack, cluster.views[me])
    async with (
        httpx.AsyncClient(base_url=me, timeout=5.0) as client,
        client.stream("GET", CHANGES) as response,
    ):
        seen = b""
        async with asyncio.timeout(5):
            async for chunk in response.aiter_bytes():
                seen += chunk
                if b": keep-alive" in seen:
                    break
    assert seen.startswith(b"retry: ")
    assert b"event: positions" in seen


async def test_a_watch_of_changes_that_falls_behind_ends_with_a_dropped_event() -> None:
    me = url()
    owners = dict.fromkeys(range(4), me)
    cluster = Cluster(views(owners, [me]), owners)
    view = cluster.views[me]
    api = HttpApi(view, SETTINGS.model_copy(update={"watch_queue": 3}))
    answer = api.watches.answer(CHANGES, "", {}, EVERYONE)
    assert isinstance(answer, Stream)
    chunks = answer.chunks
    assert (await anext(chunks)).startswith(b"retry:")
    assert b"event: positions" in await anext(chunks)
    key = keys_in_every_partition("k-", 1)[0]
    cluster.apply(key, {"n": 0})
    cluster.apply(key, {"n": 1})
    await asyncio.sleep(0.05)  # taken by the watch, not yet read by its client
    for n in range(2, 20):  # the client reads nothing meanwhile
        cluster.apply(key, {"n": n})
    reader = EventReader()
    events = [ev for chunk in [c async for c in chunks] for ev in reader.feed(chunk)]
    assert events[-1].name == "dropped"
    assert orjson.loads(events[-1].data)["error"]["code"] == "unavailable"
    values = [orjson.loads(ev.data)["value"] for ev in events[:-1]]
    assert values[:2] == [{"n": 0}, {"n": 1}]
    assert values == [{"n": n} for n in range(len(values))]  # what came, came in order
    assert events[-1].event_id == events[-2].event_id  # the last id, to resume from
    assert api.metrics.watches_dropped == 1
    assert api.metrics.watches_open == 0
    assert view.watcher_count() == 0


# -- the end of a watch ---------------------------------------------------------------------------


async def test_a_watch_whose_client_goes_as_its_sources_start_leaves_no_coroutine_unrun() -> None:
    """The stream's client goes (or the node stops) right after the watch routed its
    partitions, before the task reading each was first run: every task ends with the stream,
    none left "never awaited"."""
    me, other = url(), url()
    owners = {0: me, 1: me, 2: other, 3: other}  # two replicas here, a relay to `other`
    cluster = Cluster(views(owners, [me]), owners)
    api = HttpApi(cluster.views[me], SETTINGS)
    answer = api.watches.answer(CHANGES, "", {}, EVERYONE)
    assert isinstance(answer, Stream)
    chunks = answer.chunks
    assert (await anext(chunks)).startswith(b"retry:")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = asyncio.ensure_future(anext(chunks))  # starts the task that routes
        await asyncio.sleep(0)  # `step` ran (the routing task is due), this test after it
        step.cancel()  # the routing task runs first, starting the sources' tasks; then this
        with pytest.raises(asyncio.CancelledError):
            await step
        await asyncio.sleep(0.05)
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert api.metrics.watches_open == 0
    assert cluster.views[me].watcher_count() == 0
    await api.close()


async def test_a_server_that_stops_ends_its_watches_and_their_relays_first(
    stack: AsyncExitStack,
) -> None:
    """`HttpServer.stop` returns once the watches it served have ended: their replicas'
    subscriptions closed and their relays to other nodes gone."""
    a, b = url(), url()
    owners = {0: a, 1: a, 2: b, 3: b}
    cluster = Cluster(views(owners, [a, b]), owners)
    server_b = await start(stack, cluster.views[b])
    server_a = HttpServer(cluster.views[a], "127.0.0.1", int(a.rsplit(":", 1)[1]), SETTINGS)
    await server_a.start()
    watches = [await open_watch(stack, a) for _ in range(3)]
    for watch in watches:
        await watch.start()
    assert server_a.api.metrics.watches_open == 3
    assert server_b.api.metrics.watches_open == 3  # one relay each
    await server_a.stop()
    assert server_a.api.metrics.watches_open == 0
    assert cluster.views[a].watcher_count() == 0
    # b hears of the relays' end as their connections close.
    await wait_until(lambda: server_b.api.metrics.watches_open == 0, "the relays' end on b")
    assert cluster.views[b].watcher_count() == 0
