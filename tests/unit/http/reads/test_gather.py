"""Keys outside their own partition, found across real servers on loopback.

A table of partitioner `any` (placement unknown), and a murmur2 table whose changelog holds
misplaced records: every node must find every key wherever it is stored, answer 404 only
when no partition has it, and send one probe per other node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import pytest

from sparkiq.core.partitioner import Partitioner, partition_for
from sparkiq.core.queries import Failure
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.reads.gather import decode_wire_keys, encode_wire_keys
from sparkiq.http.staticview import StaticView
from tests.support.stores import put_value

USERS = TableDef("users", "users-changelog", 6)
ANYWHERE = TableDef("anywhere", "anywhere-changelog", 6, partitioner=Partitioner.ANY)
FAST = HttpSettings(request_budget_s=1.0, reconnect_pause_s=0.02)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def two_nodes(
    stack: AsyncExitStack,
) -> tuple[StaticView, StaticView, list[HttpServer]]:
    """Nodes a and b: even partitions of both tables on a, odd ones on b."""
    a, b = (StaticView(f"http://127.0.0.1:{free_port()}", [USERS, ANYWHERE]) for _ in range(2))
    for table in (USERS, ANYWHERE):
        owners = {p: (a.url if p % 2 == 0 else b.url) for p in range(table.partitions)}
        for view in (a, b):
            view.place_all(table, owners)
    servers = []
    for view in (a, b):
        port = int(view.url.rsplit(":", 1)[1])
        server = HttpServer(view, "127.0.0.1", port, FAST)
        servers.append(await stack.enter_async_context(server))
    return a, b, servers


def holder(a: StaticView, b: StaticView, partition: int) -> StaticView:
    return a if partition % 2 == 0 else b


def put(a: StaticView, b: StaticView, table: TableDef, key: str, partition: int) -> None:
    put_value(holder(a, b, partition), table, key, {"k": key}, partition=partition)


def elsewhere(key: str) -> int:
    """A partition that is not `key`'s own (murmur2), on the other node than its own."""
    return (partition_for(key.encode(), USERS.partitions) + 3) % USERS.partitions


async def test_a_misplaced_key_is_found_from_every_node(stack: AsyncExitStack) -> None:
    a, b, servers = await two_nodes(stack)
    keys = [f"user-{i}" for i in range(30)]
    for key in keys:
        put(a, b, USERS, key, elsewhere(key))
    for view in (a, b):
        view.misplaced["users"] = len(keys)
    for view in (a, b):
        async with httpx.AsyncClient(base_url=view.url) as client:
            for key in keys:
                r = await client.get(f"/v1/tables/users/keys/{key}")
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["value"] == {"k": key}
                assert body["partition"] == elsewhere(key)
                assert body["node"] == holder(a, b, elsewhere(key)).url
            r = await client.get("/v1/tables/users/keys/nobody")
            assert r.status_code == 404
            assert r.json()["error"]["code"] == "not_found"
            assert "6 asked" in r.json()["error"]["message"]
    # The node that holds the other partitions is asked by GET probes, never by multi-get.
    assert [s.api.metrics.count("multi_get") for s in servers] == [0, 0]


async def test_without_misplaced_records_a_miss_looks_no_further(stack: AsyncExitStack) -> None:
    a, b, _ = await two_nodes(stack)
    put(a, b, USERS, "user-1", elsewhere("user-1"))
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get("/v1/tables/users/keys/user-1")
    assert r.status_code == 404  # nobody counted a misplaced record: its partition decides


async def test_the_home_partition_wins_over_a_misplaced_copy(stack: AsyncExitStack) -> None:
    a, b, _ = await two_nodes(stack)
    home = partition_for(b"twice", USERS.partitions)
    put_value(holder(a, b, home), USERS, "twice", "home")
    put_value(
        holder(a, b, elsewhere("twice")), USERS, "twice", "stray", partition=elsewhere("twice")
    )
    a.misplaced["users"] = b.misplaced["users"] = 1
    async with httpx.AsyncClient(base_url=b.url) as client:
        r = await client.get("/v1/tables/users/keys/twice")
        assert r.json()["value"] == "home"
        r = await client.post("/v1/tables/users/multi-get", json={"keys": ["twice"]})
        assert r.json()["items"] == [{"key": "twice", "value": "home"}]


async def test_a_table_of_unknown_placement_answers_every_key(stack: AsyncExitStack) -> None:
    a, b, _ = await two_nodes(stack)
    keys = [f"k{i}" for i in range(24)]
    for i, key in enumerate(keys):
        put(a, b, ANYWHERE, key, i % ANYWHERE.partitions)
    for view in (a, b):
        async with httpx.AsyncClient(base_url=view.url) as client:
            for i, key in enumerate(keys):
                r = await client.get(f"/v1/tables/anywhere/keys/{key}")
                assert r.status_code == 200, r.text
                assert r.json()["partition"] == i % ANYWHERE.partitions
            r = await client.get("/v1/tables/anywhere/keys/ghost")
            assert r.status_code == 404
            assert "any partition" in r.json()["error"]["message"]
            r = await client.post(
                "/v1/tables/anywhere/multi-get", json={"keys": [*keys[:7], "ghost"]}
            )
            assert r.status_code == 200, r.text
            items = r.json()["items"]
            assert [i["value"] for i in items] == [*({"k": k} for k in keys[:7]), None]
            assert set(r.json()["offsets"]) == {str(p) for p in range(6)}


async def test_a_key_in_several_partitions_of_unknown_placement_answers_from_the_lowest(
    stack: AsyncExitStack,
) -> None:
    a, b, _ = await two_nodes(stack)
    put_value(b, ANYWHERE, "moved", "in-5", partition=5)
    put_value(b, ANYWHERE, "moved", "in-3", partition=3)
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get("/v1/tables/anywhere/keys/moved")
    assert (r.json()["partition"], r.json()["value"]) == (3, "in-3")


async def test_multi_get_finds_misplaced_keys_and_keeps_the_order(stack: AsyncExitStack) -> None:
    a, b, _ = await two_nodes(stack)
    placed = [f"p{i}" for i in range(10)]
    stray = [f"s{i}" for i in range(10)]
    for key in placed:
        put_value(holder(a, b, partition_for(key.encode(), 6)), USERS, key, key)
    for key in stray:
        put(a, b, USERS, key, elsewhere(key))
    a.misplaced["users"] = 10
    wanted = [x for pair in zip(placed, stray, strict=True) for x in pair] + ["absent"]
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.post("/v1/tables/users/multi-get", json={"keys": wanted})
    assert r.status_code == 200, r.text
    values = [item["value"] for item in r.json()["items"]]
    expected = [x if x in placed else {"k": x} for x in wanted[:-1]] + [None]
    assert values == expected


async def test_one_key_windows_and_owner_need_a_fixed_placement(stack: AsyncExitStack) -> None:
    a, _, _ = await two_nodes(stack)
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get("/v1/tables/anywhere/keys/k1/owner")
        assert r.status_code == 400
        assert "partitioner 'any'" in r.json()["error"]["message"]


async def test_a_probe_is_only_taken_from_another_node(stack: AsyncExitStack) -> None:
    a, _, _ = await two_nodes(stack)
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.post(
            "/v1/tables/users/multi-get?partitions=0,1", content=encode_wire_keys([b"x"])
        )
    assert r.status_code == 400
    assert "internal" in r.json()["error"]["message"]


def test_wire_keys_travel_byte_for_byte() -> None:
    wires = [b"", b"\x00\xff", "caf\u00e9 /+?#%".encode(), b"x" * 3000]
    assert decode_wire_keys(encode_wire_keys(wires)) == wires
    assert isinstance(decode_wire_keys(b'{"wire_keys": [1]}'), Failure)
    assert isinstance(decode_wire_keys(b"[]"), Failure)


async def one_node(stack: AsyncExitStack) -> StaticView:
    """A node that is the active of every partition of both tables."""
    view = StaticView(f"http://127.0.0.1:{free_port()}", [USERS, ANYWHERE])
    for table in (USERS, ANYWHERE):
        view.place_all(table, dict.fromkeys(range(table.partitions), view.url))
    port = int(view.url.rsplit(":", 1)[1])
    await stack.enter_async_context(HttpServer(view, "127.0.0.1", port, FAST))
    return view


async def test_a_node_holding_every_partition_reads_them_all_itself(
    stack: AsyncExitStack,
) -> None:
    view = await one_node(stack)
    for i in range(12):
        put_value(view, ANYWHERE, f"k{i}", i, partition=i % 6)
        put_value(view, USERS, f"s{i}", i, partition=elsewhere(f"s{i}"))
    put_value(view, ANYWHERE, "twice", "in-4", partition=4)
    put_value(view, ANYWHERE, "twice", "in-2", partition=2)
    view.misplaced["users"] = 12
    async with httpx.AsyncClient(base_url=view.url) as client:
        for i in range(12):
            r = await client.get(f"/v1/tables/anywhere/keys/k{i}")
            assert (r.status_code, r.json()["partition"], r.json()["value"]) == (200, i % 6, i)
            r = await client.get(f"/v1/tables/users/keys/s{i}")
            assert (r.json()["partition"], r.json()["value"]) == (elsewhere(f"s{i}"), i)
        r = await client.get("/v1/tables/anywhere/keys/twice")
        assert (r.json()["partition"], r.json()["value"]) == (2, "in-2")
        for table, where in (("anywhere", "any partition"), ("users", "or any other")):
            r = await client.get(f"/v1/tables/{table}/keys/ghost")
            assert r.status_code == 404
            assert where in r.json()["error"]["message"]
            assert "6 asked" in r.json()["error"]["message"]


async def test_the_node_holding_the_other_partitions_is_probed_by_key(
    stack: AsyncExitStack,
) -> None:
    a, b, servers = await two_nodes(stack)  # the loop server: probes go out by callback
    for i in range(12):
        put(a, b, ANYWHERE, f"k{i}", i % 6)
    async with httpx.AsyncClient(base_url=a.url) as client:
        for i in range(12):
            r = await client.get(f"/v1/tables/anywhere/keys/k{i}")
            assert (r.status_code, r.json()["partition"]) == (200, i % 6)
        r = await client.get("/v1/tables/anywhere/keys/ghost")
        assert r.status_code == 404
        assert "in any partition: 6 asked" in r.json()["error"]["message"]
    # a holds partitions 0, 2, 4 and b 1, 3, 5. Keys in 0 are answered by a alone; every
    # other one costs one GET probe of b: keys in 2 and 4 too, since b's lower partitions
    # (1; 1 and 3) come first. 10 keys and the absent one: 11 probes, none a multi-get.
    assert servers[1].api.metrics.count("key") == 11
    assert servers[1].api.metrics.count("multi_get") == 0


async def test_a_probe_by_key_is_only_taken_from_another_node(stack: AsyncExitStack) -> None:
    a, _, _ = await two_nodes(stack)
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get("/v1/tables/anywhere/keys/k1?partitions=0,1")
    assert r.status_code == 400
    assert "internal" in r.json()["error"]["message"]


async def test_a_forwarded_multi_get_of_an_any_table_still_reads_every_partition(
    stack: AsyncExitStack,
) -> None:
    a, b, _ = await two_nodes(stack)
    for i in range(6):
        put(a, b, ANYWHERE, f"k{i}", i)
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.post(
            "/v1/tables/anywhere/multi-get",
            json={"keys": [f"k{i}" for i in range(6)]},
            headers={"x-sparkiq-hops": "1"},
        )
    assert r.status_code == 200, r.text
    assert [item["value"] for item in r.json()["items"]] == [{"k": f"k{i}"} for i in range(6)]
