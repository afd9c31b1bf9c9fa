"""The gate in front of the API: 401/403 on every path, identity through forwards, the
cluster signature, the concurrency limit and the request id -- over real servers on loopback.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from sparkiq.auth import AuthConfig, Identity
from sparkiq.auth.cluster import ClusterCredential
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.app.gate import OPS_PATHS, Gate
from sparkiq.http.messages.requestid import REQUEST_ID
from sparkiq.http.messages.responses import Response
from sparkiq.http.messages.wire import FORWARD_HEADERS
from sparkiq.http.metrics import HttpMetrics
from sparkiq.http.staticview import StaticView
from tests.support.auth import CLUSTER_SECRET, SECRET, hs256, tamper, write
from tests.support.stores import put_value

USERS = TableDef("users", "users-changelog", 6)
SECRETS = TableDef("secrets", "secrets-changelog", 2)
FAST = HttpSettings(request_budget_s=0.5, reconnect_pause_s=0.02)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


def auth_config(tmp_path: Path, *, protect_ops: bool = False) -> AuthConfig:
    return AuthConfig.load(
        auth="required",
        jwt_secret_file=write(tmp_path / "jwt.secret", SECRET),
        cluster_secret_file=write(tmp_path / "cluster.secret", CLUSTER_SECRET),
        protect_ops=protect_ops,
    )


class Pair:
    """Two nodes a and b: users split between them (even partitions on a), secrets on a."""

    def __init__(self) -> None:
        self.a = StaticView(f"http://127.0.0.1:{free_port()}", [USERS, SECRETS])
        self.b = StaticView(f"http://127.0.0.1:{free_port()}", [USERS, SECRETS])
        owners = {p: (self.a.url if p % 2 == 0 else self.b.url) for p in range(USERS.partitions)}
        for view in (self.a, self.b):
            view.place_all(USERS, owners)
            view.place_all(SECRETS, dict.fromkeys(range(SECRETS.partitions), self.a.url))
        self.on_a, self.on_b = [], []
        for i in range(40):
            key = f"user-{i}"
            owner = owners[put_value(self.b, USERS, key, key)]
            put_value(self.a, USERS, key, key)
            (self.on_a if owner == self.a.url else self.on_b).append(key)
        put_value(self.a, SECRETS, "k", "v")

    async def start(
        self,
        stack: AsyncExitStack,
        a_auth: AuthConfig,
        b_auth: AuthConfig,
        *,
        settings: HttpSettings = FAST,
        b_metrics: HttpMetrics | None = None,
    ) -> None:
        for view, auth, metrics in ((self.a, a_auth, None), (self.b, b_auth, b_metrics)):
            port = int(view.url.rsplit(":", 1)[1])
            server = HttpServer(view, "127.0.0.1", port, settings, auth=auth, metrics=metrics)
            await stack.enter_async_context(server)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_no_bad_or_expired_token_is_401_everywhere(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    pair = Pair()
    auth = auth_config(tmp_path)
    await pair.start(stack, auth, auth)
    paths = [
        ("GET", f"/v1/tables/users/keys/{pair.on_a[0]}", None),  # local, the key path
        ("GET", f"/v1/tables/users/keys/{pair.on_b[0]}", None),  # would be forwarded
        ("GET", "/v1/tables/users/range?limit=5", None),
        ("POST", "/v1/tables/users/multi-get", {"keys": ["user-1"]}),
        ("GET", "/v1/tables", None),
        ("GET", "/v1/metadata", None),
        ("GET", "/v1/tables/nope/keys/x", None),
    ]
    bad = [
        {},
        bearer(hs256(["users"], exp_in_s=-5)),
        bearer(tamper(hs256(["users"]))),
        bearer(hs256(["users"], secret=b"z" * 40)),
        {"authorization": "Basic dXNlcjpwYXNz"},
        {"x-api-key": "not-a-configured-key"},
    ]
    async with httpx.AsyncClient(base_url=pair.a.url) as client:
        for method, path, body in paths:
            for headers in bad:
                r = await client.request(method, path, json=body, headers=headers)
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.json()["error"]["code"] == "unauthenticated"
                assert r.headers["www-authenticate"].startswith("Bearer")
        # With a good token the same requests are answered.
        good = bearer(hs256(["users"]))
        for key in (pair.on_a[0], pair.on_b[0]):
            r = await client.get(f"/v1/tables/users/keys/{key}", headers=good)
            assert r.status_code == 200, r.text
            assert r.json()["value"] == key


async def test_a_token_for_another_table_is_403_locally_and_through_a_forward(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    pair = Pair()
    auth = auth_config(tmp_path)
    await pair.start(stack, auth, auth)
    only_secrets = bearer(hs256(["secrets"], sub="mallory"))
    async with httpx.AsyncClient() as client:
        for base in (pair.a.url, pair.b.url):  # b forwards secrets reads to a
            for method, path, body in [
                ("GET", f"/v1/tables/users/keys/{pair.on_a[0]}", None),
                ("GET", f"/v1/tables/users/keys/{pair.on_b[0]}", None),
                ("GET", "/v1/tables/users/range", None),
                ("POST", "/v1/tables/users/multi-get", {"keys": pair.on_b[:3]}),
                ("GET", f"/v1/tables/users/keys/{pair.on_b[0]}/owner", None),
                ("GET", "/v1/tables/no-such-table/keys/x", None),  # 403, not 404: no leak
            ]:
                r = await client.request(method, base + path, json=body, headers=only_secrets)
                assert r.status_code == 403, (base, path, r.text)
                assert r.json()["error"]["code"] == "forbidden"
            # The granted table is answered, from b through a forward to a.
            r = await client.get(f"{base}/v1/tables/secrets/keys/k", headers=only_secrets)
            assert r.status_code == 200, r.text
            assert r.json()["node"] == pair.a.url
            # The listing shows only what the token grants.
            r = await client.get(f"{base}/v1/tables", headers=only_secrets)
            assert [t["name"] for t in r.json()["tables"]] == ["secrets"]


async def test_the_owner_checks_the_callers_identity_itself(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    """A node without authentication (misconfigured) cannot open the owner: the caller's
    own credentials travel with the forward and the owner judges them."""
    pair = Pair()
    cluster = ClusterCredential(CLUSTER_SECRET)
    await pair.start(stack, AuthConfig.none(cluster), auth_config(tmp_path))
    async with httpx.AsyncClient(base_url=pair.a.url) as client:
        key = pair.on_b[0]
        r = await client.get(f"/v1/tables/users/keys/{key}")
        assert r.status_code == 401, r.text
        r = await client.get(f"/v1/tables/users/keys/{key}", headers=bearer(hs256(["secrets"])))
        assert r.status_code == 403, r.text
        r = await client.get(f"/v1/tables/users/keys/{key}", headers=bearer(hs256(["users"])))
        assert r.status_code == 200, r.text
        assert r.json()["node"] == pair.b.url
        r = await client.post(
            "/v1/tables/users/multi-get",
            json={"keys": pair.on_b[:3]},
            headers=bearer(hs256(["secrets"])),
        )
        assert r.status_code == 403, r.text


async def test_forged_forwarding_headers_from_outside_are_rejected(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    pair = Pair()
    auth = auth_config(tmp_path)
    await pair.start(stack, auth, auth)
    token = bearer(hs256("*"))
    path = f"/v1/tables/users/keys/{pair.on_b[0]}"
    wrong = ClusterCredential(b"w" * 40).sign("GET", path, 1)
    right = ClusterCredential(CLUSTER_SECRET).sign("GET", path, 1)
    async with httpx.AsyncClient(base_url=pair.b.url) as client:
        for extra in (
            {"x-sparkiq-hops": "1"},
            {"x-sparkiq-hops": "1", "x-sparkiq-cluster": wrong},
            {"x-sparkiq-hops": "1", "x-sparkiq-budget-ms": "5", "x-sparkiq-cluster": "00"},
            # A real signature of another request does not fit this one.
            {"x-sparkiq-hops": "2", "x-sparkiq-cluster": right},
        ):
            r = await client.get(path, headers={**token, **extra})
            assert r.status_code == 403, (extra, r.text)
            assert r.json()["error"]["code"] == "not_a_cluster_node"
        r = await client.get(f"{path}?fallback_lag=0", headers={**token, "x-sparkiq-hops": "1"})
        assert r.status_code == 403
        # Signed as a node would: accepted.
        r = await client.get(
            path, headers={**token, "x-sparkiq-hops": "1", "x-sparkiq-cluster": right}
        )
        assert r.status_code == 200, r.text


async def test_ops_endpoints_are_open_unless_protected(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    open_pair, closed_pair = Pair(), Pair()
    await open_pair.start(stack, auth_config(tmp_path), auth_config(tmp_path))
    closed = auth_config(tmp_path, protect_ops=True)
    await closed_pair.start(stack, closed, closed)
    async with httpx.AsyncClient() as client:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await client.get(open_pair.a.url + path)).status_code == 200
            assert (await client.get(closed_pair.a.url + path)).status_code == 401
            r = await client.get(closed_pair.a.url + path, headers=bearer(hs256([])))
            assert r.status_code == 200


async def test_over_the_concurrency_limit_is_429(stack: AsyncExitStack, tmp_path: Path) -> None:
    pair = Pair()
    # Partition 1 of users has no ready owner: a read of it waits for the whole budget.
    for view in (pair.a, pair.b):
        view.set_placement((USERS.topic, 1), None)
    waiting = next(k for k in pair.on_b if put_value(pair.b, USERS, k, k) == 1)
    settings = HttpSettings(request_budget_s=1.5, reconnect_pause_s=0.02, max_in_flight=2)
    auth = AuthConfig.none()
    await pair.start(stack, auth, auth, settings=settings)
    async with httpx.AsyncClient(base_url=pair.a.url, timeout=10) as client:
        slow = [
            asyncio.create_task(client.get(f"/v1/tables/users/keys/{waiting}")) for _ in range(2)
        ]
        await asyncio.sleep(0.3)
        r = await client.get(f"/v1/tables/users/keys/{pair.on_a[0]}")
        assert r.status_code == 429, r.text
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "overloaded"
        assert (await client.get("/healthz")).status_code == 200  # never refused for load
        assert [t.status_code for t in await asyncio.gather(*slow)] == [503, 503]
        r = await client.get(f"/v1/tables/users/keys/{pair.on_a[0]}")
        assert r.status_code == 200  # the slots are free again


class _Ids(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str | None] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.ids.append(REQUEST_ID.get())


async def test_request_id_is_echoed_made_and_carried_to_the_owner(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    pair = Pair()
    auth = auth_config(tmp_path)
    await pair.start(stack, auth, auth, b_metrics=HttpMetrics(access_log=True))
    handler = _Ids()
    logger = logging.getLogger("sparkiq.access")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        async with httpx.AsyncClient(base_url=pair.a.url) as client:
            token = bearer(hs256(["users"]))
            r = await client.get(
                f"/v1/tables/users/keys/{pair.on_b[0]}",
                headers={**token, "x-request-id": "trace-42"},
            )
            assert r.status_code == 200
            assert r.headers["x-request-id"] == "trace-42"
            r = await client.get(f"/v1/tables/users/keys/{pair.on_b[1]}", headers=token)
            made = r.headers["x-request-id"]
            assert len(made) == 16
            assert made != "trace-42"
            # A malformed id is replaced, not repeated.
            r = await client.get("/healthz", headers={"x-request-id": "bad id\twith tabs"})
            assert r.headers["x-request-id"] != "bad id\twith tabs"
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert handler.ids[:2] == ["trace-42", made]  # b answered both, under the caller's ids


async def test_forwards_go_only_to_the_owner_the_assignment_names(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    """Nothing in a request (Host, an absolute target, headers) picks the node it goes to."""
    pair = Pair()
    decoy = StaticView(f"http://127.0.0.1:{free_port()}", [USERS])
    decoy.place_all(USERS, dict.fromkeys(range(USERS.partitions), decoy.url))
    for p in range(USERS.partitions):
        put_value(decoy, USERS, f"user-{p}", "decoy")
    auth = AuthConfig.none()
    await pair.start(stack, auth, auth)
    port = int(decoy.url.rsplit(":", 1)[1])
    await stack.enter_async_context(HttpServer(decoy, "127.0.0.1", port, FAST, auth=auth))
    key = pair.on_b[0]
    async with httpx.AsyncClient(base_url=pair.a.url) as client:
        r = await client.get(
            f"/v1/tables/users/keys/{key}",
            headers={"host": decoy.url.removeprefix("http://"), "x-forwarded-host": decoy.url},
        )
        assert r.status_code == 200, r.text
        assert r.json()["node"] == pair.b.url
        assert r.json()["value"] == key
    assert all(decoy.local_store((USERS.topic, p)).reads == 0 for p in range(USERS.partitions))


@pytest.mark.parametrize("auth", ["none", "none, cluster secret", "required"])
@pytest.mark.parametrize("protect_ops", [False, True])
@pytest.mark.parametrize("path", ["/v1/tables/users/keys/k", "/healthz", "/metrics"])
@pytest.mark.parametrize("busy", [False, True])
@pytest.mark.parametrize(
    ("hops", "sent_id"), [(None, None), ("1", None), ("1", "trace-42"), ("2", "bad id\t")]
)
def test_admit_plain_answers_as_admit_does(
    tmp_path: Path,
    auth: str,
    protect_ops: bool,
    path: str,
    busy: bool,
    hops: str | None,
    sent_id: str | None,
) -> None:
    """The lanes' admission (no credentials or cluster signature; a forward's hops and request
    id) lets in, refuses and sets the request id and forward headers exactly as the full
    `admit` does."""
    if auth == "required":
        config = auth_config(tmp_path, protect_ops=protect_ops)
    else:
        cluster_secret = write(tmp_path / "cluster.secret", CLUSTER_SECRET)
        config = AuthConfig.load(
            auth="none",
            cluster_secret_file=cluster_secret if auth == "none, cluster secret" else None,
            protect_ops=protect_ops,
        )

    Answer = Identity | tuple[int, tuple[tuple[str, str], ...], bytes]

    def admit(plain: bool) -> tuple[Answer, str | None, str]:
        gate = Gate(config, HttpSettings(max_in_flight=4), HttpMetrics())
        gate.in_flight = 4 if busy else 0
        FORWARD_HEADERS.set("authorization: Bearer left-from-before\r\n")
        if plain:
            admitted = gate.admit_plain(path, hops, sent_id)
        else:  # none of the headers the gate reads but a forward's
            headers = {"authorization": None, "api_key": None, "signature": None}
            admitted = gate.admit("GET", path, path, hops=hops, request_id=sent_id, **headers)
        answer: Answer = (
            (admitted.status, admitted.headers, admitted.body)
            if isinstance(admitted, Response)
            else admitted
        )
        return answer, REQUEST_ID.get(), FORWARD_HEADERS.get()

    # Each in a context of its own: the context variables it sets stay there.
    answers = []
    for plain in (False, True):
        answer, request_id, forward_headers = contextvars.Context().run(admit, plain)
        if sent_id == "trace-42":
            assert request_id == sent_id
        else:
            assert request_id is not None
            assert re.fullmatch("[0-9a-f]{16}", request_id)
        answers.append((answer, forward_headers))
    assert answers[1] == answers[0]
    # Each case is one the test means to cover: let in (with the forward headers reset for
    # a path that may forward), or refused for load, for want of credentials, or as a
    # forward without the cluster's signature.
    answer, forward_headers = answers[0]
    if isinstance(answer, Identity):
        assert forward_headers == "" or path in OPS_PATHS
        assert not busy or path in OPS_PATHS
        assert hops is None or config.cluster is None
    elif busy and path not in OPS_PATHS:
        assert answer[0] == 429
    else:
        assert answer[0] == (403 if hops is not None and config.cluster is not None else 401)
