"""Reads whose active cannot answer: standbys stand in, within a lag bound (http/readloop.py).

Real servers (`HttpServer`) on loopback; a dead active is a free port nobody listens on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import pytest

from sparkiq.core.partitioner import partition_for
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.messages.responses import Outcome
from sparkiq.http.staticview import DictStore, StaticView
from tests.support.stores import put_value

USERS = TableDef("users", "users-changelog", 4)
KEY = "user-7"
TP = (USERS.topic, partition_for(KEY.encode(), USERS.partitions))
SETTINGS = HttpSettings(
    request_budget_s=1.0, reconnect_pause_s=0.02, active_timeout_s=0.2, standby_max_lag=100
)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def start(stack: AsyncExitStack, view: StaticView) -> HttpServer:
    server = HttpServer(view, "127.0.0.1", int(view.url.rsplit(":", 1)[1]), SETTINGS)
    await stack.enter_async_context(server)
    return server


def url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def standby_view(
    me: str, active: str, standbys: list[str], *, lag: int = 5, known: bool = True
) -> StaticView:
    """A view in which `me` holds a standby of TP (value of KEY = {"v": 1}) at offset 40."""
    view = StaticView(me, [USERS])
    store = DictStore()
    view.set_placement(TP, active, standbys, store=store, offset=40, lag=lag, lag_known=known)
    put_value(view, USERS, KEY, {"v": 1})
    return view


async def get(base: str, path: str = f"/v1/tables/users/keys/{KEY}") -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=5.0) as client:
        return await client.get(path)


async def test_local_standby_answers_when_the_active_is_down(stack: AsyncExitStack) -> None:
    me, dead = url(), url()
    server = await start(stack, standby_view(me, dead, [me]))
    r = await get(me)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["value"] == {"v": 1}
    assert body["standby"] is True
    assert body["offset"] == 40
    assert body["node"] == me
    assert server.api.metrics.count("key", Outcome.STANDBY) == 1


async def test_remote_standby_answers_for_a_dead_active(stack: AsyncExitStack) -> None:
    asker, standby, dead = url(), url(), url()
    ask_view = StaticView(asker, [USERS])
    ask_view.set_placement(TP, dead, [standby])
    await start(stack, ask_view)
    standby_server = await start(stack, standby_view(standby, dead, [standby]))
    r = await get(asker)
    assert r.status_code == 200, r.text
    assert r.json()["node"] == standby
    assert r.json()["standby"] is True
    assert r.json()["offset"] == 40
    # The standby answered from its replica and did not try the dead active itself.
    assert standby_server.api.metrics.count("key", Outcome.STANDBY) == 1


async def test_an_active_answering_503_is_stood_in_for(stack: AsyncExitStack) -> None:
    asker, active, standby = url(), url(), url()
    ask_view = StaticView(asker, [USERS])
    ask_view.set_placement(TP, active, [standby])
    active_view = StaticView(active, [USERS])
    active_view.set_placement(TP, active, [standby], ready=False, lag=10_000)  # restoring
    for view in (ask_view, active_view):
        await start(stack, view)
    await start(stack, standby_view(standby, active, [standby]))
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await get(asker)
    assert r.status_code == 200, r.text
    assert r.json()["node"] == standby
    assert loop.time() - started < 0.9  # one active_timeout_s, not the whole budget


async def test_standby_beyond_the_bound_does_not_answer(stack: AsyncExitStack) -> None:
    me, dead = url(), url()
    await start(stack, standby_view(me, dead, [me], lag=500))
    r = await get(me)
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert "unreachable" in r.json()["error"]["message"]
    # max_lag on the request sets the bound: 500 behind is fine under max_lag=1000 ...
    r = await get(me, f"/v1/tables/users/keys/{KEY}?max_lag=1000")
    assert r.status_code == 200
    assert r.json()["standby"] is True
    # ... and a request may also ask for a tighter bound than the node's default.
    r = await get(me, f"/v1/tables/users/keys/{KEY}?max_lag=499")
    assert r.status_code == 503


async def test_standby_with_unmeasured_lag_never_stands_in(stack: AsyncExitStack) -> None:
    me, dead = url(), url()
    await start(stack, standby_view(me, dead, [me], lag=0, known=False))
    r = await get(me)
    assert r.status_code == 503


async def test_fallback_parameter_is_internal(stack: AsyncExitStack) -> None:
    me = url()
    await start(stack, standby_view(me, url(), [me]))
    r = await get(me, f"/v1/tables/users/keys/{KEY}?fallback_lag=5")
    assert r.status_code == 400
    assert "internal" in r.json()["error"]["message"]


async def test_multi_get_reads_a_local_standby_for_a_dead_active(stack: AsyncExitStack) -> None:
    me, dead = url(), url()
    await start(stack, standby_view(me, dead, [me]))
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        r = await client.post("/v1/tables/users/multi-get", json={"keys": [KEY]})
    assert r.status_code == 200, r.text
    assert r.json()["items"] == [{"key": KEY, "value": {"v": 1}}]
    assert r.json()["offsets"] == {str(TP[1]): 40}
    assert r.json()["standby"] is True


async def test_multi_get_asks_a_remote_standby_for_a_dead_active(stack: AsyncExitStack) -> None:
    asker, standby, dead = url(), url(), url()
    ask_view = StaticView(asker, [USERS])
    ask_view.set_placement(TP, dead, [standby])
    await start(stack, ask_view)
    standby_server = await start(stack, standby_view(standby, dead, [standby]))
    async with httpx.AsyncClient(base_url=asker, timeout=5.0) as client:
        # ghost-4 is absent, in the same partition as KEY.
        r = await client.post("/v1/tables/users/multi-get", json={"keys": [KEY, "ghost-4"]})
    assert partition_for(b"ghost-4", USERS.partitions) == TP[1]
    assert r.status_code == 200, r.text
    assert [i["value"] for i in r.json()["items"]] == [{"v": 1}, None]
    assert r.json()["offsets"] == {str(TP[1]): 40}
    assert r.json()["standby"] is True
    assert standby_server.api.metrics.count("multi_get", Outcome.STANDBY) == 1


def standby_of_every_partition(me: str, active: str | None, table: TableDef) -> StaticView:
    """A view in which `me` follows every partition of `table` as a standby (offset 40)."""
    view = StaticView(me, [table])
    for p in range(table.partitions):
        view.set_placement((table.topic, p), active, [me], store=DictStore(), offset=40, lag=5)
    return view


async def test_a_range_asks_remote_standbys_for_a_dead_active(stack: AsyncExitStack) -> None:
    asker, standby, dead = url(), url(), url()
    ask_view = StaticView(asker, [USERS])
    for p in range(USERS.partitions):
        ask_view.set_placement((USERS.topic, p), dead, [standby])
    await start(stack, ask_view)
    standby_side = standby_of_every_partition(standby, dead, USERS)
    keys = [f"user-{i}" for i in range(20)]
    for key in keys:
        put_value(standby_side, USERS, key, {"n": key})
    standby_server = await start(stack, standby_side)
    r = await get(asker, "/v1/tables/users/range?limit=100")
    assert r.status_code == 200, r.text
    body = r.json()
    assert sorted(i["key"] for i in body["items"]) == sorted(keys)
    assert body["standby"] is True
    assert body["offsets"] == {str(p): 40 for p in range(USERS.partitions)}
    assert standby_server.api.metrics.count("range", Outcome.STANDBY) == 1


async def test_with_no_active_in_the_map_remote_standbys_answer_every_read(
    stack: AsyncExitStack,
) -> None:
    windowed = TableDef("clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60)
    asker, standby = url(), url()
    ask_view = StaticView(asker, [USERS, windowed])
    for table in (USERS, windowed):
        for p in range(table.partitions):
            ask_view.set_placement((table.topic, p), None, [standby])
    await start(stack, ask_view)
    standby_side = standby_of_every_partition(standby, None, USERS)
    standby_side.add_table(windowed)
    for p in range(windowed.partitions):
        standby_side.set_placement(
            (windowed.topic, p), None, [standby], store=DictStore(), offset=7, lag=0
        )
    put_value(standby_side, USERS, KEY, {"v": 1})
    put_value(standby_side, windowed, KEY, {"clicks": 3}, window_start=120)
    await start(stack, standby_side)

    key = await get(asker)
    assert key.status_code == 200, key.text
    assert (key.json()["value"], key.json()["node"]) == ({"v": 1}, standby)
    wins = await get(asker, f"/v1/tables/clicks/keys/{KEY}/windows")
    assert wins.status_code == 200, wins.text
    assert [(w["start"], w["value"]) for w in wins.json()["items"]] == [(120, {"clicks": 3})]
    async with httpx.AsyncClient(base_url=asker, timeout=5.0) as client:
        multi = await client.post("/v1/tables/users/multi-get", json={"keys": [KEY]})
    assert multi.status_code == 200, multi.text
    assert multi.json()["items"] == [{"key": KEY, "value": {"v": 1}}]
    page = await get(asker, "/v1/tables/users/range")
    assert page.status_code == 200, page.text
    assert [i["key"] for i in page.json()["items"]] == [KEY]


async def test_past_the_hop_limit_a_local_stand_in_answers_every_read(
    stack: AsyncExitStack,
) -> None:
    me, active = url(), url()
    view = standby_of_every_partition(me, active, USERS)
    put_value(view, USERS, KEY, {"v": 1})
    await start(stack, view)
    hops = {"x-sparkiq-hops": str(SETTINGS.hop_limit)}
    async with httpx.AsyncClient(base_url=me, timeout=5.0, headers=hops) as client:
        multi = await client.post("/v1/tables/users/multi-get", json={"keys": [KEY]})
        page = await client.get("/v1/tables/users/range")
    # The active was never asked (it would be one hop too many): this node's standbys read.
    assert multi.status_code == 200, multi.text
    assert multi.json()["items"] == [{"key": KEY, "value": {"v": 1}}]
    assert multi.json()["standby"] is True
    assert page.status_code == 200, page.text
    assert [i["key"] for i in page.json()["items"]] == [KEY]
    assert page.json()["standby"] is True


# -- consistency tokens (`after=`) -------------------------------------------------------------


def active_view(me: str, *, offset: int = 40) -> StaticView:
    """A view in which `me` is the active of every partition of USERS (KEY = {"v": 1})."""
    view = StaticView(me, [USERS])
    for p in range(USERS.partitions):
        view.set_placement((USERS.topic, p), me, store=DictStore(), offset=offset)
    put_value(view, USERS, KEY, {"v": 1})
    return view


async def test_every_read_answer_carries_its_token(stack: AsyncExitStack) -> None:
    me = url()
    await start(stack, active_view(me))
    p = TP[1]
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        fast = await client.get(f"/v1/tables/users/keys/{KEY}")
        generic = await client.get(f"/v1/tables/users/keys/{KEY}?max_lag=")
        multi = await client.post("/v1/tables/users/multi-get", json={"keys": [KEY]})
        page = await client.get("/v1/tables/users/range")
    assert fast.json()["token"] == generic.json()["token"] == f"{p}-40"
    assert multi.json()["token"] == f"{p}-40"
    assert page.json()["token"] == ".".join(f"{q}-40" for q in range(USERS.partitions))


async def test_a_token_ahead_of_the_active_waits_for_it(stack: AsyncExitStack) -> None:
    me = url()
    view = active_view(me)
    await start(stack, view)
    p = TP[1]

    async def catch_up() -> None:
        await asyncio.sleep(0.1)
        for n in range(2, 7):  # offsets 41..45; the last sets {"v": 6}
            view.apply(USERS, KEY, {"v": n})

    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        writer = asyncio.create_task(catch_up())
        r = await client.get(f"/v1/tables/users/keys/{KEY}?after={p}-45")
        await writer
    assert r.status_code == 200, r.text
    assert r.json()["value"] == {"v": 6}
    assert r.json()["token"] == f"{p}-45"


async def test_a_token_nobody_reaches_is_a_503_never_an_older_value(
    stack: AsyncExitStack,
) -> None:
    asker, active = url(), url()
    ask_view = StaticView(asker, [USERS])
    ask_view.set_placement(TP, active, [asker], store=DictStore(), offset=38, lag=2)
    put_value(ask_view, USERS, KEY, {"v": 0})
    await start(stack, ask_view)
    await start(stack, active_view(active))
    p = TP[1]
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(base_url=asker, timeout=5.0) as client:
        # The standby here (38) may answer within max_lag, but not the token (40): the
        # active does.
        r = await client.get(f"/v1/tables/users/keys/{KEY}?max_lag=10&after={p}-40")
        assert r.status_code == 200, r.text
        assert r.json()["value"] == {"v": 1}
        assert r.json()["node"] == active
        started = loop.time()
        late = await client.get(f"/v1/tables/users/keys/{KEY}?max_lag=10&after={p}-41")
        page = await client.get(f"/v1/tables/users/range?after={p}-41")
        # Asked directly, the active says why. (Through the asker, the last round's ask of
        # the active may time out a moment before the active's own 503 comes, as both end
        # with the budget: then the asker's message says the active did not answer.)
        direct = await client.get(f"{active}/v1/tables/users/keys/{KEY}?after={p}-41")
    assert late.status_code == 503, late.text
    assert loop.time() - started >= SETTINGS.request_budget_s
    assert int(late.headers["retry-after"]) >= 1
    assert direct.status_code == 503, direct.text
    assert "token needs 41" in direct.text
    assert page.status_code == 503, page.text


async def test_a_stand_in_behind_the_token_does_not_answer(stack: AsyncExitStack) -> None:
    me, dead = url(), url()
    await start(stack, standby_view(me, dead, [me]))
    p = TP[1]
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        behind = await client.get(f"/v1/tables/users/keys/{KEY}?after={p}-41")
        caught_up = await client.get(f"/v1/tables/users/keys/{KEY}?after={p}-40")
        other = await client.post(
            f"/v1/tables/users/multi-get?after={(p + 1) % USERS.partitions}-99",
            json={"keys": [KEY]},
        )
    assert behind.status_code == 503, behind.text
    assert caught_up.status_code == 200, caught_up.text
    assert caught_up.json()["standby"] is True
    # A token names partitions; only those the read touches count.
    assert other.status_code == 200, other.text


@pytest.mark.parametrize("token", ["x", "1-", "0-1.0-2", f"{USERS.partitions}-1", "0-1,1-2"])
async def test_a_malformed_token_is_a_400(stack: AsyncExitStack, token: str) -> None:
    me = url()
    await start(stack, active_view(me))
    async with httpx.AsyncClient(base_url=me, timeout=5.0) as client:
        r = await client.get(f"/v1/tables/users/keys/{KEY}", params={"after": token})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "bad_request"
    assert "consistency token" in r.json()["error"]["message"]
