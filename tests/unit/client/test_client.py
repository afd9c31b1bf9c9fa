"""The Python client's routing and fallback against real HTTP servers on loopback.

Nodes are `HttpServer`s over `StaticView`s whose metadata has the node's shape; a dead active
is a free port nobody listens on. The client is synchronous, so it runs in a thread.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from sparkiq.client import Client
from sparkiq.core.errors import BadNodeUrl, ClientError, NodesUnreachable
from sparkiq.core.partitioner import Partitioner
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.messages.responses import Outcome
from sparkiq.http.staticview import DictStore
from tests.support.mapview import MapView, active_and_standby, wait_until
from tests.support.stores import put_value

USERS = TableDef("users", "users-changelog", 2)
SETTINGS = HttpSettings(request_budget_s=0.3, reconnect_pause_s=0.02, active_timeout_s=0.1)


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


async def test_reads_are_monotonic_across_nodes_by_default(stack: AsyncExitStack) -> None:
    dead, fresh, stale = url(), url(), url()
    view, _ = await standby_node(stack, fresh, dead)
    await standby_node(stack, stale, dead)
    p = USERS.partition_of(b"user-4")
    assert p is not None
    # The fresh node's replica has applied 3 more records; user-4 changed among them.
    view.set_placement((USERS.topic, p), dead, [fresh], offset=10, lag=0)
    put_value(view, USERS, "user-4", {"n": 40})
    with Client(fresh, budget_s=0.8) as client:
        assert await asyncio.to_thread(client.get, "users", "user-4") == {"n": 40}
        assert client.token("users") == f"{p}-10"
        handed = client.token("users")
    # Another client, asking only the stale node (offset 7): it never sees the older value.
    with Client(stale, budget_s=0.8) as client:
        client.observe("users", handed)
        with pytest.raises(ClientError, match=r"no answer within 0\.8s"):
            await asyncio.to_thread(client.get, "users", "user-4")
        # Another partition: the token does not hold it back.
        other = next(
            k for k in (f"user-{i}" for i in range(1, 10)) if USERS.partition_of(k.encode()) != p
        )
        assert await asyncio.to_thread(client.get, "users", other) is not None
        with pytest.raises(ClientError, match="not a consistency token"):
            client.observe("users", "nope")
    with Client(stale, budget_s=0.8, monotonic=False) as client:
        assert await asyncio.to_thread(client.get, "users", "user-4") == {"n": 4}
        assert client.token("users") == ""


# -- routing by each table's partitioner -------------------------------------------------------

CUSTOMERS = TableDef("customers", "customers-changelog", 6, partitioner=Partitioner.CRC32)
VISITS = TableDef(
    "visits",
    "visits-changelog",
    6,
    partitioner=Partitioner.FNV1A,
    kind=TableKind.WINDOWED,
    window_size_ms=60_000,
)
ANYWHERE = TableDef("anywhere", "anywhere-changelog", 6, partitioner=Partitioner.ANY)
ROUTED = (CUSTOMERS, VISITS, ANYWHERE)
KEYS = [f"customer-{i}" for i in range(40)]


async def three_nodes(stack: AsyncExitStack) -> tuple[list[MapView], list[HttpServer]]:
    """Partition p of every table on node p % 3, except that node 0 holds 0, 1 and 3."""
    views = [MapView(url(), ROUTED) for _ in range(3)]
    owner_index = {0: 0, 1: 0, 2: 2, 3: 0, 4: 1, 5: 2}
    for table in ROUTED:
        owners = {p: views[owner_index[p]].url for p in range(table.partitions)}
        for view in views:
            view.place_all(table, owners)
    for i, key in enumerate(KEYS):
        for table in (CUSTOMERS, VISITS):
            wire = key.encode()
            p = table.partition_of(wire)
            assert p is not None
            view = views[owner_index[p]]
            if table.is_windowed:
                put_value(view, table, key, {"n": i}, window_start=0)
            else:
                put_value(view, table, key, {"n": i})
        p = i % ANYWHERE.partitions
        put_value(views[owner_index[p]], ANYWHERE, key, {"n": i}, partition=p)
    servers = []
    for view in views:
        server = HttpServer(view, "127.0.0.1", int(view.url.rsplit(":", 1)[1]), SETTINGS)
        servers.append(await stack.enter_async_context(server))
    return views, servers


def forwards(servers: list[HttpServer], endpoint: str) -> int:
    return sum(s.api.metrics.count(endpoint, Outcome.FORWARDED) for s in servers)


async def test_get_goes_to_the_owner_under_each_partitioner(stack: AsyncExitStack) -> None:
    views, servers = await three_nodes(stack)
    with Client(views[1].url) as client:
        for i, key in enumerate(KEYS):
            entry = await asyncio.to_thread(client.get_entry, "customers", key)
            assert entry is not None
            assert entry["value"] == {"n": i}
            assert entry["partition"] == CUSTOMERS.partition_of(key.encode())
    assert forwards(servers, "key") == 0  # crc32 routed straight to each owner
    assert sum(s.api.metrics.count("key", Outcome.LOCAL) for s in servers) == len(KEYS)


async def test_multi_get_sends_one_request_per_owner(stack: AsyncExitStack) -> None:
    views, servers = await three_nodes(stack)
    with Client(views[2].url) as client:
        items = await asyncio.to_thread(client.multi_get, "customers", [*KEYS, "nobody"])
    assert [item["value"] for item in items] == [*({"n": i} for i in range(len(KEYS))), None]
    assert [item["key"] for item in items] == [*KEYS, "nobody"]
    assert [s.api.metrics.count("multi_get") for s in servers] == [1, 1, 1]
    assert forwards(servers, "multi_get") == 0


async def test_windows_and_owner_go_to_the_owner(stack: AsyncExitStack) -> None:
    views, servers = await three_nodes(stack)
    with Client(views[0].url) as client:
        for i, key in enumerate(KEYS[:12]):
            windows = await asyncio.to_thread(client.windows, "visits", key)
            assert windows == [{"start": 0, "end": 60_000, "value": {"n": i}}]
            owner = await asyncio.to_thread(client.owner, "visits", key)
            assert owner["partition"] == VISITS.partition_of(key.encode())
    assert forwards(servers, "windows") == 0
    expected = [0, 0, 0]
    for key in KEYS[:12]:
        p = VISITS.partition_of(key.encode())
        assert p is not None
        expected[{0: 0, 1: 0, 2: 2, 3: 0, 4: 1, 5: 2}[p]] += 1
    assert [s.api.metrics.count("owner") for s in servers] == expected


async def test_range_goes_to_the_node_holding_most_partitions(stack: AsyncExitStack) -> None:
    views, servers = await three_nodes(stack)
    with Client(views[2].url) as client:
        got = await asyncio.to_thread(lambda: list(client.range("customers", page_size=7)))
    assert sorted(k for k, _ in got) == sorted(KEYS)
    assert servers[0].api.metrics.count("range") >= 1  # node 0 holds 3 of 6
    assert servers[2].api.metrics.count("range", Outcome.FORWARDED) == 0


async def test_window_range_and_desc_orders_page_through_the_node_holding_most(
    stack: AsyncExitStack,
) -> None:
    views, servers = await three_nodes(stack)
    later = [(key, 120_000) for key in KEYS[:5]]  # a second window of a few keys
    owner_index = {0: 0, 1: 0, 2: 2, 3: 0, 4: 1, 5: 2}  # as three_nodes places them
    for key, start in later:
        view = views[owner_index[VISITS.partition_of(key.encode()) or 0]]
        put_value(view, VISITS, key, {"later": key}, window_start=start)
    windows = sorted([(key, 0) for key in KEYS] + later)
    with Client(views[2].url) as client:

        def read(**kwargs: Any) -> list[tuple[str, int]]:
            got = client.window_range("visits", page_size=4, **kwargs)
            return [(w["key"], w["start"]) for w in got]

        assert await asyncio.to_thread(read) == windows
        assert await asyncio.to_thread(read, order="desc") == windows[::-1]
        assert await asyncio.to_thread(read, from_=60_000) == later
        # 1970 is long before an hour ago; ISO text and datetimes read as times too.
        assert await asyncio.to_thread(read, from_="-1h") == []
        assert await asyncio.to_thread(read, to="1970-01-01T00:01:00Z") == sorted(
            (key, 0) for key in KEYS
        )
        assert await asyncio.to_thread(read, key_from=KEYS[3], key_to=KEYS[3], to=0) == [
            (KEYS[3], 0)
        ]
        newest = await asyncio.to_thread(
            client.windows, "visits", KEYS[1], order="desc", page_size=1
        )
        assert [w["start"] for w in newest] == [120_000, 0]
        got = await asyncio.to_thread(
            lambda: list(client.range("customers", page_size=7, order="desc"))
        )
        assert [k for k, _ in got] == sorted(KEYS, reverse=True)
        with pytest.raises(ClientError, match="order"):
            await asyncio.to_thread(read, order="newest")
    assert servers[0].api.metrics.count("window_range") >= 1  # node 0 holds 3 of 6
    assert servers[2].api.metrics.count("window_range", Outcome.FORWARDED) == 0


async def test_a_table_of_unknown_placement_is_asked_of_any_node(stack: AsyncExitStack) -> None:
    views, _ = await three_nodes(stack)
    with Client(views[1].url) as client:
        for i, key in enumerate(KEYS[:10]):
            assert await asyncio.to_thread(client.get, "anywhere", key) == {"n": i}
        items = await asyncio.to_thread(client.multi_get, "anywhere", KEYS[:10])
        assert [item["value"] for item in items] == [{"n": i} for i in range(10)]
        assert await asyncio.to_thread(client.get, "anywhere", "nobody") is None


async def test_owner_is_asked_without_a_lag_bound(stack: AsyncExitStack) -> None:
    views, _ = await three_nodes(stack)
    with Client(views[0].url, max_lag=5) as client:
        owner = await asyncio.to_thread(client.owner, "customers", KEYS[0])
        assert owner["partition"] == CUSTOMERS.partition_of(KEYS[0].encode())
        assert await asyncio.to_thread(client.get, "customers", KEYS[0]) == {"n": 0}


def test_importing_the_client_loads_no_server_code() -> None:
    script = (
        "import sys, sparkiq.client.client\n"
        "server = ('granian', 'aiohttp', 'aiokafka', 'rocksdict', 'uvloop', 'confluent_kafka',"
        " 'sparkiq.http.app', 'sparkiq.http.server', 'sparkiq.http.reads',"
        " 'sparkiq.node.node', 'sparkiq.node.stores.registry')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in server"
        " or m.startswith(server)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


async def test_watch_resumes_on_another_node_without_repeating_or_going_back(
    stack: AsyncExitStack,
) -> None:
    a, view_a, a_stack, c, view_c = await active_and_standby(stack, USERS, SETTINGS)
    events: list[dict[str, Any]] = []

    def consume() -> None:
        with Client([a, c], budget_s=3.0) as client:
            for entry in client.watch("users", "user-1", idle_s=5.0):
                events.append(entry)
                if entry["value"] == {"n": 5}:
                    return

    consuming = asyncio.create_task(asyncio.to_thread(consume))
    try:
        await wait_until(lambda: len(events) == 1, "the first state")
        view_a.apply(USERS, "user-1", {"n": 1})
        view_a.apply(USERS, "user-1", {"n": 2})
        await wait_until(lambda: len(events) == 3, "two changes")
        await a_stack.aclose()  # the active goes; the client resumes on c
        await wait_until(lambda: view_c.watcher_count() == 1, "the watch resumed on c")
        for n in range(1, 6):  # c catches up: 1 and 2 were sent already
            view_c.apply(USERS, "user-1", {"n": n})
        async with asyncio.timeout(10):
            await consuming
    finally:
        await a_stack.aclose()
    assert [e["value"] for e in events] == [None, *({"n": n} for n in range(1, 6))]
    assert [e["node"] for e in events] == [a, a, a, c, c, c]
    assert [e["offset"] for e in events] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("given", "example"),
    [
        ("127.0.0.1:9999", "http://127.0.0.1:9999"),
        ("ftp://127.0.0.1:9999", "http://127.0.0.1:8100"),
        ("http://127.0.0.1:99999", "http://127.0.0.1:8100"),
        ("http://", "http://127.0.0.1:8100"),
    ],
)
def test_a_url_that_is_not_http_host_port_is_refused_at_once(given: str, example: str) -> None:
    with pytest.raises(BadNodeUrl) as caught:
        Client(given)
    assert str(caught.value) == (
        f"node URL {given!r} is not http(s)://HOST[:PORT]; write e.g. {example}"
    )


def test_nodes_that_refuse_fail_at_once_when_told_not_to_wait() -> None:
    dead = [url(), url()]
    started = time.monotonic()
    with (
        Client(dead, budget_s=30.0, wait_for_unreachable=False) as client,
        pytest.raises(NodesUnreachable, match="no node accepted a connection: http://") as caught,
    ):
        client.get("users", "user-1")
    assert time.monotonic() - started < 3.0
    assert all(u in str(caught.value) for u in dead)
    assert "Connection refused" in str(caught.value)
    with (
        Client(dead, budget_s=30.0, wait_for_unreachable=False) as client,
        pytest.raises(NodesUnreachable),
    ):
        next(iter(client.watch("users", "user-1")))
    assert time.monotonic() - started < 6.0


def test_by_default_refusing_nodes_are_tried_until_the_budget_is_spent() -> None:
    started = time.monotonic()
    with (
        Client(url(), budget_s=0.8) as client,
        pytest.raises(ClientError, match=r"no answer within 0\.8s") as caught,
    ):
        client.get("users", "user-1")
    assert not isinstance(caught.value, NodesUnreachable)
    assert time.monotonic() - started >= 0.8


async def test_a_node_that_answers_is_not_unreachable(stack: AsyncExitStack) -> None:
    """One node accepting (even with 503s) keeps the client trying within its budget."""
    active, standby = url(), url()
    await standby_node(stack, standby, active, lag=50_000)  # too far behind: 503

    def read() -> None:
        with Client([active, standby], budget_s=0.8, wait_for_unreachable=False) as client:
            client.get("users", "user-1")

    with pytest.raises(ClientError, match=r"no answer within 0\.8s"):
        await asyncio.to_thread(read)
