"""The client's event streams (clientstreams.py through `Client.changes`): every change of a
range, resumed on another node with the vector of the last event, none missed or repeated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from sparkiq.client import Client
from sparkiq.core.errors import ClientError
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from tests.support.mapview import MapView, active_and_standby, port_of, wait_until

USERS = TableDef("users", "users-changelog", 2)
SETTINGS = HttpSettings(
    request_budget_s=1.0, reconnect_pause_s=0.02, active_timeout_s=0.3, watch_heartbeat_s=0.2
)


def url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def test_changes_resume_on_another_node_without_repeating_or_missing(
    stack: AsyncExitStack,
) -> None:
    a, view_a, a_stack, c, view_c = await active_and_standby(stack, USERS, SETTINGS)
    events: list[dict[str, Any]] = []

    def consume() -> None:
        with Client([a, c], budget_s=3.0) as client:
            for entry in client.changes("users", prefix="u-", idle_s=5.0):
                events.append(entry)
                if entry["value"] == {"n": 9}:
                    return

    def both(key: str, n: int) -> None:
        view_a.apply(USERS, key, {"n": n})
        view_c.apply(USERS, key, {"n": n})

    consuming = asyncio.create_task(asyncio.to_thread(consume))
    try:
        await wait_until(lambda: view_a.watcher_count() == 2, "the watch of both partitions")
        both("u-1", 1)
        both("x-1", 100)  # outside the prefix
        both("u-2", 2)
        await wait_until(lambda: len(events) == 2, "two changes")
        await a_stack.aclose()  # the node goes; the client resumes on c, which replays
        for n in range(3, 9):
            view_c.apply(USERS, f"u-{n}", {"n": n})  # while the client finds c
        await wait_until(lambda: view_c.watcher_count() == 2, "the watch resumed on c")
        view_c.apply(USERS, "u-9", {"n": 9})
        async with asyncio.timeout(10):
            await consuming
    finally:
        await a_stack.aclose()
    assert sorted(e["value"]["n"] for e in events) == list(range(1, 10))
    assert [e["node"] for e in events[:2]] == [a, a]
    assert {e["node"] for e in events[2:]} == {c}
    for p in range(USERS.partitions):
        offsets = [e["offset"] for e in events if e["partition"] == p]
        assert offsets == sorted(set(offsets))


async def test_changes_of_an_unknown_table_raise(stack: AsyncExitStack) -> None:
    a = url()
    await stack.enter_async_context(
        HttpServer(MapView(a, [USERS]), "127.0.0.1", port_of(a), SETTINGS)
    )

    def first() -> object:
        with Client([a]) as client:
            return next(client.changes("nope"))

    with pytest.raises(ClientError, match="unknown_table"):
        await asyncio.to_thread(first)
