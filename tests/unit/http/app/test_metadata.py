"""GET /v1/metadata?peers=true: the other nodes' own replicas and their lag now, gathered
through the forwarding pool -- over real servers on loopback, with and without
authentication, and with a peer that is down or does not answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from sparkiq.auth import AuthConfig
from sparkiq.auth.cluster import ClusterCredential
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.app.metadata import peer_urls
from sparkiq.http.messages import models
from sparkiq.http.staticview import StaticView
from tests.support.auth import CLUSTER_SECRET, SECRET, hs256, write

USERS = TableDef("users", "users-changelog", 6)
# A peer is waited for `active_timeout_s`: short here, so a silent one costs little.
SETTINGS = HttpSettings(request_budget_s=0.5, reconnect_pause_s=0.02, active_timeout_s=0.3)


class LagView(StaticView):
    """A StaticView whose metadata lists its own replicas (`local`) as a node's does; it
    counts how often it was asked."""

    asked = 0

    def metadata(self) -> dict[str, object]:
        self.asked += 1
        local = []
        for p in range(USERS.partitions):
            placement = self.placement((USERS.topic, p))
            if placement.local_role is None:
                continue
            local.append(
                {
                    "table": USERS.name,
                    "partition": p,
                    "state": str(placement.local_role),
                    "position": placement.local_offset or 0,
                    "end": (placement.local_offset or 0) + (placement.local_lag or 0),
                    "lag": placement.local_lag or 0,
                    "misplaced": 0,
                    "fault": None,
                    "rebuilds": 0,
                }
            )
        return {**super().metadata(), "local": local}


def url() -> str:
    return f"http://127.0.0.1:{free_port()}"


class Cluster:
    """Three nodes: each the active of two partitions of users (a: 0-1, b: 2-3, c: 4-5), with
    the next node as its standby; each replica's lag is 10 * partition + (1 on a standby)."""

    def __init__(self) -> None:
        self.views = [LagView(url(), [USERS]) for _ in range(3)]
        urls = [v.url for v in self.views]
        for view in self.views:
            for p in range(USERS.partitions):
                active, standby = urls[p // 2], urls[(p // 2 + 1) % 3]
                lag = 10 * p + (1 if view.url == standby else 0)
                view.set_placement((USERS.topic, p), active, [standby], lag=lag)

    @property
    def a(self) -> LagView:
        return self.views[0]

    async def start(
        self, stack: AsyncExitStack, auth: AuthConfig | None = None, *, serving: int = 3
    ) -> None:
        for view in self.views[:serving]:
            port = int(view.url.rsplit(":", 1)[1])
            await stack.enter_async_context(
                HttpServer(view, "127.0.0.1", port, SETTINGS, auth=auth)
            )


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


def auth_config(tmp_path: Path) -> AuthConfig:
    return AuthConfig.load(
        auth="required",
        jwt_secret_file=write(tmp_path / "jwt.secret", SECRET),
        cluster_secret_file=write(tmp_path / "cluster.secret", CLUSTER_SECRET),
    )


def lags(entry: dict[str, object]) -> dict[int, int]:
    """partition -> lag of one peer's `local`, checked against the model."""
    peer = models.PeerReplicas.model_validate(entry)
    return {r.partition: r.lag for r in peer.local}


def test_the_peers_are_the_other_nodes_holding_a_replica() -> None:
    cluster = Cluster()
    a, b, c = (v.url for v in cluster.views)
    assert peer_urls(cluster.a) == sorted([b, c])
    lone = StaticView(a, [USERS])
    lone.place_all(USERS, dict.fromkeys(range(USERS.partitions), a))
    assert peer_urls(lone) == []


async def test_peers_true_adds_each_other_nodes_own_replicas_now(stack: AsyncExitStack) -> None:
    cluster = Cluster()
    await cluster.start(stack)
    a, b, c = cluster.views
    async with httpx.AsyncClient(base_url=a.url) as client:
        plain = (await client.get("/v1/metadata")).json()
        assert "peers" not in plain
        assert (b.asked, c.asked) == (0, 0)  # nobody is asked without peers=true
        assert "peers" not in (await client.get("/v1/metadata?peers=false")).json()
        r = await client.get("/v1/metadata?peers=true")
    assert r.status_code == 200, r.text
    peers = r.json()["peers"]
    assert sorted(peers) == sorted([b.url, c.url])
    # Each peer's own figures: b active of 2-3 and standby of 0-1; c active of 4-5 and
    # standby of 2-3.
    assert lags(peers[b.url]) == {0: 1, 1: 11, 2: 20, 3: 30}
    assert lags(peers[c.url]) == {2: 21, 3: 31, 4: 40, 5: 50}
    assert all(peer["error"] is None for peer in peers.values())
    assert r.json()["local"] == a.metadata()["local"]


async def test_a_peer_that_is_down_or_silent_is_listed_with_its_error(
    stack: AsyncExitStack,
) -> None:
    cluster = Cluster()
    await cluster.start(stack, serving=2)  # c is down: nothing listens at its URL
    a, b, c = cluster.views
    # b's port answers nothing: a server that takes the connection and never writes.
    held: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    mute = url()
    server = await asyncio.start_server(silent, "127.0.0.1", int(mute.rsplit(":", 1)[1]))
    stack.push_async_callback(server.wait_closed)
    stack.callback(server.close)
    stack.callback(lambda: [w.close() for w in held])
    a.set_placement((USERS.topic, 5), c.url, [mute])
    async with httpx.AsyncClient(base_url=a.url) as client:
        started = time.monotonic()
        r = await client.get("/v1/metadata?peers=true")
        took = time.monotonic() - started
    assert r.status_code == 200, r.text
    peers = r.json()["peers"]
    assert sorted(peers) == sorted([b.url, c.url, mute])
    assert peers[b.url]["error"] is None
    for silent_one in (c.url, mute):
        assert peers[silent_one]["local"] == []
        assert peers[silent_one]["error"], peers[silent_one]
        models.PeerReplicas.model_validate(peers[silent_one])
    assert "0.300s" in peers[mute]["error"]  # waited active_timeout_s, no longer
    assert took < SETTINGS.active_timeout_s + 1.0


async def test_peers_are_asked_with_the_callers_credentials_and_the_cluster_signature(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    cluster = Cluster()
    await cluster.start(stack, auth_config(tmp_path))
    a, b, c = cluster.views
    async with httpx.AsyncClient(base_url=a.url) as client:
        # No credentials: no metadata, and no peer is asked.
        r = await client.get("/v1/metadata?peers=true")
        assert r.status_code == 401, r.text
        assert "peers" not in r.text
        assert (b.asked, c.asked) == (0, 0)
        # A caller who may read /v1/metadata: the peers check its token and the signature.
        token = {"authorization": f"Bearer {hs256('*')}"}
        r = await client.get("/v1/metadata?peers=true", headers=token)
    assert r.status_code == 200, r.text
    peers = r.json()["peers"]
    assert lags(peers[b.url]) == {0: 1, 1: 11, 2: 20, 3: 30}
    assert peers[c.url]["error"] is None
    assert (b.asked, c.asked) == (1, 1)


async def test_a_peer_that_refuses_the_caller_gives_no_replicas(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    """A node without authentication (misconfigured) learns nothing for its caller from a
    peer that has it: the caller's own credentials go with the request and the peer judges."""
    cluster = Cluster()
    open_node = AuthConfig.none(ClusterCredential(CLUSTER_SECRET))
    await cluster.start(stack, auth_config(tmp_path))
    a, b, _ = cluster.views
    lax = LagView(url(), [USERS])
    for p in range(USERS.partitions):
        lax.set_placement((USERS.topic, p), a.url if p < 3 else b.url, [lax.url])
    port = int(lax.url.rsplit(":", 1)[1])
    await stack.enter_async_context(HttpServer(lax, "127.0.0.1", port, SETTINGS, auth=open_node))
    async with httpx.AsyncClient(base_url=lax.url) as client:
        r = await client.get("/v1/metadata?peers=true")
    assert r.status_code == 200, r.text
    peers = r.json()["peers"]
    assert sorted(peers) == sorted([a.url, b.url])
    for peer in peers.values():
        assert peer["local"] == []
        assert peer["error"].startswith("answered 401"), peer
    assert (a.asked, b.asked) == (0, 0)


async def test_a_forwarded_request_never_fans_out_again(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    cluster = Cluster()
    await cluster.start(stack, auth_config(tmp_path))
    a, b, c = cluster.views
    token = {"authorization": f"Bearer {hs256('*')}"}
    target = "/v1/metadata?peers=true"
    signed = ClusterCredential(CLUSTER_SECRET).sign("GET", target, 1)
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get(
            target, headers={**token, "x-sparkiq-hops": "1", "x-sparkiq-cluster": signed}
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "bad_request"
        for bad in ("yes", ""):  # the OpenAPI document says a boolean: empty is not one
            r = await client.get(f"/v1/metadata?peers={bad}", headers=token)
            assert r.status_code == 400, r.text
            assert "true or false" in r.json()["error"]["message"]
        r = await client.get("/v1/metadata?peers=false", headers=token)
        assert r.status_code == 200, r.text
        assert "peers" not in r.json()
    assert (b.asked, c.asked) == (0, 0)
