"""Forwarding between real servers on loopback: each server in the test's loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import pytest

from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.messages.responses import Outcome
from sparkiq.http.staticview import StaticView
from tests.support.stores import put_value

USERS = TableDef("users", "users-changelog", 6)
FAST = HttpSettings(request_budget_s=0.5, reconnect_pause_s=0.02)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def start(
    stack: AsyncExitStack,
    view: StaticView,
    port: int,
    settings: HttpSettings = FAST,
) -> HttpServer:
    server = HttpServer(view, "127.0.0.1", port, settings)
    await stack.enter_async_context(server)
    return server


def two_views() -> tuple[StaticView, StaticView]:
    a_url, b_url = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    return StaticView(a_url, [USERS]), StaticView(b_url, [USERS])


def port_of(view: StaticView) -> int:
    return int(view.url.rsplit(":", 1)[1])


def split_owners(a: StaticView, b: StaticView) -> dict[int, str]:
    """Even partitions on a, odd on b, identically in both views."""
    owners = {p: (a.url if p % 2 == 0 else b.url) for p in range(USERS.partitions)}
    for view in (a, b):
        view.place_all(USERS, owners)
    return owners


async def test_forwarded_read_is_the_owners_answer(stack: AsyncExitStack) -> None:
    a, b = two_views()
    owners = split_owners(a, b)
    on_b = [
        k for k in (f"user-{i}" for i in range(40)) if owners[put_value(b, USERS, k, k)] == b.url
    ]
    server_a = await start(stack, a, port_of(a))
    await start(stack, b, port_of(b))
    async with httpx.AsyncClient(base_url=a.url) as client:
        for key in on_b[:5]:
            r = await client.get(f"/v1/tables/users/keys/{key}")
            assert r.status_code == 200, r.text
            assert r.json()["node"] == b.url
            assert r.json()["value"] == key
        # An absent key owned by b: b's 404, passed through as it is.
        missing = next(
            k for k in (f"ghost-{i}" for i in range(100)) if owners[_partition(k)] == b.url
        )
        r = await client.get(f"/v1/tables/users/keys/{missing}")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "not_found"
    assert server_a.api.metrics.count("key", Outcome.FORWARDED) == 6


async def test_nodes_that_name_each_other_stop_at_the_hop_limit(stack: AsyncExitStack) -> None:
    a, b = two_views()
    tp = (USERS.topic, _partition("loop-key"))
    a.set_placement(tp, b.url)  # a thinks b is active ...
    b.set_placement(tp, a.url)  # ... and b thinks a is
    server_a = await start(stack, a, port_of(a))
    server_b = await start(stack, b, port_of(b))
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get("/v1/tables/users/keys/loop-key")
    assert r.status_code == 508
    assert r.json()["error"]["code"] == "loop_detected"
    # a -> b -> a -> b: three forwards, then b refuses the fourth.
    assert server_a.api.metrics.count("key") == 2
    assert server_b.api.metrics.count("key") == 2


async def test_multi_get_one_request_per_owner_in_input_order(stack: AsyncExitStack) -> None:
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(3)]
    views = [StaticView(u, [USERS]) for u in urls]
    owners = {p: urls[p % 3] for p in range(USERS.partitions)}
    for v in views:
        v.place_all(USERS, owners)
        for p, owner in owners.items():  # each replica at its own offset: 100 + partition
            if owner == v.url:
                tp = (USERS.topic, p)
                v.set_placement(tp, owner, store=v.local_store(tp), offset=100 + p)
    keys = [f"user-{i}" for i in range(30)]
    for key in keys:
        for v in views:
            if owners[_partition(key)] == v.url:
                put_value(v, USERS, key, {"k": key})
    servers = [await start(stack, v, port_of(v)) for v in views]
    asked = [*keys[::-1], "ghost"]
    async with httpx.AsyncClient(base_url=urls[0]) as client:
        r = await client.post("/v1/tables/users/multi-get", json={"keys": asked})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [i["key"] for i in items] == asked
    assert [i["value"] for i in items] == [{"k": k} for k in keys[::-1]] + [None]
    # The offset each partition's replica had reached, gathered from all three owners.
    assert r.json()["offsets"] == {str(p): 100 + p for p in sorted({_partition(k) for k in asked})}
    assert r.json()["standby"] is False
    assert servers[0].api.metrics.count("multi_get") == 1
    assert servers[1].api.metrics.count("multi_get") == 1  # one request for all its keys
    assert servers[2].api.metrics.count("multi_get") == 1


async def test_range_pages_across_nodes_return_every_key_once(stack: AsyncExitStack) -> None:
    a, b = two_views()
    owners = split_owners(a, b)
    keys = sorted(f"user-{i:03d}" for i in range(120))
    for key in keys:
        put_value(a if owners[_partition(key)] == a.url else b, USERS, key, key)
    await start(stack, a, port_of(a))
    server_b = await start(stack, b, port_of(b))
    seen: list[str] = []
    cursor: str | None = None
    async with httpx.AsyncClient(base_url=a.url) as client:
        while True:
            params = {"limit": "25", **({"cursor": cursor} if cursor else {})}
            r = await client.get("/v1/tables/users/range", params=params)
            assert r.status_code == 200, r.text
            body = r.json()
            assert all(set(item) == {"key", "value"} for item in body["items"])
            seen += [item["key"] for item in body["items"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
    assert seen == keys
    assert server_b.api.metrics.count("range", Outcome.LOCAL) == 5  # one request per page


async def test_unreachable_owner_is_503_then_recovers_when_placement_moves(
    stack: AsyncExitStack,
) -> None:
    a, b = two_views()
    owners = split_owners(a, b)
    key = next(k for k in (f"user-{i}" for i in range(100)) if owners[_partition(k)] == b.url)
    put_value(b, USERS, key, "from-b")
    await start(stack, a, port_of(a))  # b's server is not running: connections are refused
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get(f"/v1/tables/users/keys/{key}")
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "unavailable"
        assert "unreachable" in r.json()["error"]["message"]
        assert r.headers["retry-after"] == "1"

        # While a request waits, b comes up: the retry reaches it within the budget.
        pending = asyncio.create_task(client.get(f"/v1/tables/users/keys/{key}"))
        await asyncio.sleep(0.1)
        await start(stack, b, port_of(b))
        r = await pending
    assert r.status_code == 200, r.text
    assert r.json()["node"] == b.url


async def test_server_stops_and_frees_its_port() -> None:
    view = StaticView(f"http://127.0.0.1:{free_port()}", [USERS])
    server = HttpServer(view, "127.0.0.1", port_of(view), FAST)
    await server.start()
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{server.url}/healthz")).status_code == 200
    await server.stop()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", server.port)


def _partition(key: str) -> int:
    from sparkiq.core.partitioner import partition_for

    return partition_for(key.encode(), USERS.partitions)
