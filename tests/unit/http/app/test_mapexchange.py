"""The cluster map by reference over real HTTP: what a leader keeps and serves, to whom
(only nodes of the cluster when it has a secret), and what a fetch returns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from sparkiq.auth import AuthConfig
from sparkiq.core.mapref import MapReference, digest_of
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer
from sparkiq.http.app.mapexchange import KEPT_MAPS, MAP_PATH
from sparkiq.http.staticview import StaticView
from tests.support.auth import CLUSTER_SECRET, SECRET, hs256, write


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def two_nodes(stack: AsyncExitStack, auth: AuthConfig | None) -> list[HttpServer]:
    servers = []
    for _ in range(2):
        port = free_port()
        view = StaticView(f"http://127.0.0.1:{port}", [])
        server = HttpServer(view, "127.0.0.1", port, auth=auth)
        servers.append(await stack.enter_async_context(server))
    return servers


def reference_to(server: HttpServer, generation: int, data: bytes) -> MapReference:
    server.api.maps.publish(generation, digest_of(data), data)
    return MapReference(generation, digest_of(data), len(data), server.url)


async def test_a_member_fetches_what_the_leader_published_and_nothing_else(
    stack: AsyncExitStack,
) -> None:
    leader, member = await two_nodes(stack, None)
    data = bytes(range(256)) * 40
    ref = reference_to(leader, 5, data)
    assert await member.api.maps.fetch(ref) == data
    missing = MapReference(6, digest_of(b"other"), 5, leader.url)
    assert await member.api.maps.fetch(missing) is None
    gone = MapReference(6, ref.digest, ref.size, f"http://127.0.0.1:{free_port()}")
    assert await member.api.maps.fetch(gone) is None  # nobody listens there
    assert leader.api.maps.served == 1


async def test_the_leader_keeps_its_last_few_maps(stack: AsyncExitStack) -> None:
    leader, member = await two_nodes(stack, None)
    refs = [reference_to(leader, g, f"map {g}".encode()) for g in range(KEPT_MAPS + 2)]
    assert leader.api.maps.digests() == [r.digest for r in refs[-KEPT_MAPS:]]
    assert await member.api.maps.fetch(refs[0]) is None
    assert await member.api.maps.fetch(refs[-KEPT_MAPS]) == b"map 2"


async def test_without_authentication_anyone_may_read_it_with_get_only(
    stack: AsyncExitStack,
) -> None:
    leader, _ = await two_nodes(stack, None)
    ref = reference_to(leader, 1, b"the map")
    async with httpx.AsyncClient() as http:
        got = await http.get(f"{leader.url}{MAP_PATH}{ref.digest}")
        posted = await http.post(f"{leader.url}{MAP_PATH}{ref.digest}")
    assert (got.status_code, got.content) == (200, b"the map")
    assert got.headers["content-type"] == "application/octet-stream"
    assert posted.status_code == 405


async def test_with_authentication_only_nodes_of_the_cluster_may_read_it(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    auth = AuthConfig.load(
        auth="required",
        jwt_secret_file=write(tmp_path / "jwt.secret", SECRET),
        cluster_secret_file=write(tmp_path / "cluster.secret", CLUSTER_SECRET),
    )
    leader, member = await two_nodes(stack, auth)
    ref = reference_to(leader, 1, b"the map")
    assert await member.api.maps.fetch(ref) == b"the map"  # signed by the member's client
    target = f"{leader.url}{MAP_PATH}{ref.digest}"
    async with httpx.AsyncClient() as http:
        anonymous = await http.get(target)
        # A caller's valid token is not a node's signature.
        with_token = await http.get(target, headers={"authorization": f"Bearer {hs256(['*'])}"})
        forged = await http.get(
            target, headers={"x-sparkiq-hops": "1", "x-sparkiq-cluster": "0" * 64}
        )
    assert anonymous.status_code == 403
    assert with_token.status_code == 403
    assert forged.status_code == 403
