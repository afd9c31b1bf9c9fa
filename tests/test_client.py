"""The Python client's routing and fallback against real HTTP servers on loopback.

Nodes are granian servers over `StaticView`s whose metadata has the node's shape; a dead
active is a free port nobody listens on. The client is synchronous, so it runs in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from sparkiq.broker import free_port
from sparkiq.client import Client
from sparkiq.errors import ClientError
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.responses import Outcome
from sparkiq.http.testing import DictStore, StaticView, put_value
from sparkiq.tables import TableDef

USERS = TableDef("users", "users-changelog", 2)
SETTINGS = HttpSettings(budget_s=0.3, reconnect_pause_s=0.02, active_timeout_s=0.1)


class MapView(StaticView):
    """A StaticView whose /v1/metadata looks like a node's (what the client parses)."""

    def metadata(self) -> dict[str, object]:
        return {
            "node": self.url,
            "tables": [USERS.summary()],
            "partitions": [
                {
                    "table": USERS.name,
                    "partition": p,
                    "active": self.placement((USERS.topic, p)).active,
                    "standbys": list(self.placement((USERS.topic, p)).standbys),
                    "warming": [],
                }
                for p in range(USERS.partitions)
            ],
            "nodes": [],
        }


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


def url() -> str:
    return f"http://127.0.0.1:{free_port()}"


async def standby_node(
    stack: AsyncExitStack, me: str, active: str, *, lag: int = 3, ready: bool = True
) -> tuple[MapView, HttpServer]:
    """A node holding standbys of every partition, with user-1..user-9 = {"n": i}."""
    view = MapView(me, [USERS])
    for p in range(USERS.partitions):
        view.set_placement(
            (USERS.topic, p), active, [me], store=DictStore(), offset=7, lag=lag, ready=ready
        )
    for i in range(1, 10):
        put_value(view, USERS, f"user-{i}", {"n": i})
    server = HttpServer(view, "127.0.0.1", int(me.rsplit(":", 1)[1]), SETTINGS)
    await stack.enter_async_context(server)
    return view, server


async def test_client_asks_the_standby_when_the_active_is_down(stack: AsyncExitStack) -> None:
    dead, standby = url(), url()
    _, server = await standby_node(stack, standby, dead)
    with Client(standby, budget_s=3.0) as client:
        entry = await asyncio.to_thread(client.get_entry, "users", "user-4")
        absent = await asyncio.to_thread(client.get_entry, "users", "nobody")
    assert entry is not None
    assert entry["value"] == {"n": 4}
    assert entry["standby"] is True
    assert entry["offset"] == 7
    assert absent is None
    # The standby was asked with max_lag: it answered from its replica at once, without
    # trying the dead active itself (which would have counted a node-side fallback later).
    assert server.api.metrics.count("key", Outcome.STANDBY) == 2


async def test_client_max_lag_bounds_its_standby_reads(stack: AsyncExitStack) -> None:
    dead, standby = url(), url()
    await standby_node(stack, standby, dead, lag=500)
    with (
        Client(standby, budget_s=0.8, standby_max_lag=100) as client,
        pytest.raises(ClientError, match=r"no answer within 0\.8s"),
    ):
        await asyncio.to_thread(client.get, "users", "user-4")
    with Client(standby, budget_s=0.8, max_lag=1000) as client:
        assert await asyncio.to_thread(client.get, "users", "user-4") == {"n": 4}


async def test_client_retries_503_within_its_budget(stack: AsyncExitStack) -> None:
    dead, standby = url(), url()
    view, _ = await standby_node(stack, standby, dead, lag=50_000)  # too far behind: 503

    async def catch_up() -> None:
        await asyncio.sleep(0.8)
        for p in range(USERS.partitions):
            view.set_placement((USERS.topic, p), dead, [standby], offset=9, lag=0)

    task = asyncio.create_task(catch_up())
    with Client(standby, budget_s=5.0) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        entry = await asyncio.to_thread(client.get_entry, "users", "user-2")
        waited = loop.time() - started
    await task
    assert entry is not None
    assert entry["value"] == {"n": 2}
    assert entry["offset"] == 9
    assert 0.7 < waited < 3.0
