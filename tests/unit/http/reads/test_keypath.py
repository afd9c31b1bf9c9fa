"""The hot path for GET /v1/tables/{table}/keys/{key} (sparkiq.http.reads.keypath).

Each case is asked twice: through the ASGI adapter (which tries the key path first) and
straight through `HttpApi.handle` (the generic path). The answers must be the same bytes;
`answer()` called directly shows whether the key path answered or declined.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from urllib.parse import quote

import httpx
import pytest

from sparkiq.core.partitioner import partition_for
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.dev.ports import free_port
from sparkiq.http import AsgiApp, HttpApi, HttpServer, HttpSettings
from sparkiq.http.messages.responses import Outcome
from sparkiq.http.staticview import StaticView
from tests.support.stores import put_value

ME = "http://node-a"
OTHER = "http://node-b"
USERS = TableDef("users", "users-changelog", 4)
COUNTS = TableDef("counts", "counts-changelog", 3, key_format=Format.LONG, value_format=Format.LONG)
CLICKS = TableDef("clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60_000)
ODD_KEYS = ["a/b c%d", "été", 'quo"te', "back\\slash", "plus+sign", "semi;colon"]


def make_view() -> StaticView:
    view = StaticView(ME, [USERS, COUNTS, CLICKS])
    for table in (USERS, COUNTS, CLICKS):
        view.place_all(table, {p: ME for p in range(table.partitions)})
    for i in range(20):
        put_value(view, USERS, f"user-{i:02d}", {"n": i})
    for key in ODD_KEYS:
        put_value(view, USERS, key, {"odd": key})
    for n in (-5, 0, 7):
        put_value(view, COUNTS, n, n * 10)
    put_value(view, CLICKS, "alice", {"clicks": 1}, window_start=60_000)
    return view


@pytest.fixture
def view() -> StaticView:
    return make_view()


@pytest.fixture
async def api(view: StaticView) -> AsyncIterator[HttpApi]:
    api = HttpApi(view, HttpSettings(request_budget_s=0.3))
    yield api
    await api.close()


@pytest.fixture
async def client(api: HttpApi) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=AsgiApp(api))
    async with httpx.AsyncClient(transport=transport, base_url=ME) as c:
        yield c


async def same_as_generic(
    api: HttpApi, client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """GET `path` through the adapter; assert the generic path gives the same answer."""
    r = await client.get(path, headers=headers)
    generic = await api.handle("GET", path, "", headers or {}, b"")
    assert r.status_code == generic.status
    assert r.content == generic.body
    expected = {k: v for k, v in generic.headers}
    assert {k: r.headers[k] for k in expected} == expected
    return r


async def answered(api: HttpApi, path: str, hops: str | None = None) -> bool:
    return await api.keys.answer(path.encode("ascii"), hops, None) is not None


# -- what the key path answers itself ----------------------------------------------------------


async def test_local_hit_is_the_generic_answer(api: HttpApi, client: httpx.AsyncClient) -> None:
    assert await answered(api, "/v1/tables/users/keys/user-07")
    r = await same_as_generic(api, client, "/v1/tables/users/keys/user-07")
    assert r.status_code == 200
    body = r.json()
    assert (body["table"], body["key"], body["value"]) == ("users", "user-07", {"n": 7})
    assert (body["node"], body["standby"], body["offset"]) == (ME, False, 0)
    assert body["partition"] == partition_for(b"user-07", USERS.partitions)


@pytest.mark.parametrize("key", ODD_KEYS)
async def test_percent_encoded_keys(api: HttpApi, client: httpx.AsyncClient, key: str) -> None:
    path = f"/v1/tables/users/keys/{quote(key, safe='')}"
    assert "%" in path
    assert await answered(api, path)
    r = await same_as_generic(api, client, path)
    assert r.status_code == 200, r.text
    assert r.json()["key"] == key
    assert r.json()["value"] == {"odd": key}
    assert r.json()["partition"] == partition_for(key.encode(), USERS.partitions)


async def test_percent_encoded_table_name(api: HttpApi, client: httpx.AsyncClient) -> None:
    path = "/v1/tables/us%65rs/keys/user-01"
    assert await answered(api, path)
    assert (await same_as_generic(api, client, path)).json()["value"] == {"n": 1}


async def test_absent_key_is_404(api: HttpApi, client: httpx.AsyncClient) -> None:
    assert await answered(api, "/v1/tables/users/keys/nobody")
    r = await same_as_generic(api, client, "/v1/tables/users/keys/nobody")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"
    assert "nobody" in r.json()["error"]["message"]


async def test_long_keys(api: HttpApi, client: httpx.AsyncClient) -> None:
    assert await answered(api, "/v1/tables/counts/keys/-5")
    r = await same_as_generic(api, client, "/v1/tables/counts/keys/-5")
    assert (r.json()["key"], r.json()["value"]) == (-5, -50)
    absent = await same_as_generic(api, client, "/v1/tables/counts/keys/8")
    assert absent.status_code == 404


async def test_key_at_the_limit_is_looked_up(api: HttpApi, client: httpx.AsyncClient) -> None:
    path = "/v1/tables/users/keys/" + "x" * 4096
    assert await answered(api, path)
    assert (await same_as_generic(api, client, path)).status_code == 404


async def test_forwarded_request_with_hops_is_answered(
    api: HttpApi, client: httpx.AsyncClient
) -> None:
    path = "/v1/tables/users/keys/user-03"
    assert await answered(api, path, hops="2")
    headers = {"x-sparkiq-hops": "2", "x-sparkiq-budget-ms": "250"}
    assert (await same_as_generic(api, client, path, headers)).json()["value"] == {"n": 3}


@pytest.mark.parametrize(("hops", "status"), [("+2", 200), ("\u0662", 200), ("\u00b2", 400)])
async def test_hops_not_in_ascii_digits_are_the_generic_paths(
    api: HttpApi, hops: str, status: int
) -> None:
    # int() takes "+2" and an Arabic-Indic two, not a superscript two: the key path leaves
    # all three to the generic path, which answers by that rule.
    path = "/v1/tables/users/keys/user-03"
    assert not await answered(api, path, hops=hops)
    assert (await api.handle("GET", path, "", {"x-sparkiq-hops": hops}, b"")).status == status


async def test_hop_limit_is_508(api: HttpApi, client: httpx.AsyncClient, view: StaticView) -> None:
    partition = partition_for(b"user-04", USERS.partitions)
    view.set_placement((USERS.topic, partition), OTHER)  # would have to forward once more
    path = "/v1/tables/users/keys/user-04"
    assert await answered(api, path, hops="3")
    r = await same_as_generic(api, client, path, {"x-sparkiq-hops": "3"})
    assert r.status_code == 508
    assert r.json()["error"]["code"] == "loop_detected"


async def test_restoring_partition_is_503_with_retry_after(
    api: HttpApi, client: httpx.AsyncClient, view: StaticView
) -> None:
    partition = partition_for(b"user-05", USERS.partitions)
    # Restoring and too far behind to stand in for the active.
    view.set_placement((USERS.topic, partition), ME, ready=False, lag=50_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await client.get("/v1/tables/users/keys/user-05")
    assert 0.25 <= loop.time() - started < 2.0  # waited the 0.3 s budget
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "unavailable"
    assert r.headers["retry-after"] == "1"
    assert api.metrics.count("key", Outcome.ERROR) == 1


async def test_replaced_table_definition_is_seen(
    api: HttpApi, client: httpx.AsyncClient, view: StaticView
) -> None:
    assert (await client.get("/v1/tables/users/keys/user-01")).status_code == 200
    wider = TableDef("users", "users-v2-changelog", 7)
    view.add_table(wider)
    view.place_all(wider, {p: ME for p in range(wider.partitions)})
    put_value(view, wider, "user-01", {"v": 2})
    r = await same_as_generic(api, client, "/v1/tables/users/keys/user-01")
    assert r.json()["value"] == {"v": 2}
    assert r.json()["partition"] == partition_for(b"user-01", 7)


async def test_metrics_count_key_path_answers(api: HttpApi, client: httpx.AsyncClient) -> None:
    await client.get("/v1/tables/users/keys/user-01")
    await client.get("/v1/tables/users/keys/nobody")
    assert api.metrics.count("key", Outcome.LOCAL) == 2
    assert api.metrics.count("key") == 2


# -- what it declines to the generic path ------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "headers", "status", "code"),
    [
        ("/v1/tables/nope/keys/x", {}, 404, "unknown_table"),
        ("/v1/tables/users/keys/a/b", {}, 404, "no_route"),
        ("/v1/tables/users/keys/", {}, 404, "not_found"),  # the empty key, absent
        ("/v1/tables/users/keys/%FF", {}, 400, "bad_request"),  # not UTF-8
        ("/v1/tables/users/keys/" + "x" * 4097, {}, 413, "too_large"),
        ("/v1/tables/users/keys/" + "%C3%A9" * 2049, {}, 413, "too_large"),  # 4098 bytes
        ("/v1/tables/counts/keys/twelve", {}, 400, "bad_request"),
        ("/v1/tables/clicks/keys/alice", {}, 400, "windowed"),  # a value per window
        ("/v1/tables/users/keys/user-01", {"x-sparkiq-hops": "many"}, 400, "bad_request"),
        (
            "/v1/tables/users/keys/user-01",
            {"x-sparkiq-hops": "1", "x-sparkiq-budget-ms": "soon"},
            400,
            "bad_request",
        ),
    ],
)
async def test_declined_cases_get_the_generic_answer(
    api: HttpApi,
    client: httpx.AsyncClient,
    path: str,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    r = await same_as_generic(api, client, path, headers)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


async def test_declining_reads_nothing(api: HttpApi, view: StaticView) -> None:
    store = view.local_store((COUNTS.topic, 0))
    before = store.reads
    assert await api.keys.answer(b"/v1/tables/counts/keys/twelve", None, None) is None
    assert await api.keys.answer(b"/v1/tables/users/keys/a/b", None, None) is None
    assert await api.keys.answer(b"/v1/tables/clicks/keys/alice", None, None) is None
    assert store.reads == before
    assert api.metrics.count("key") == 0  # the generic path counts what it then answers


async def test_query_parameters_take_the_generic_path(
    api: HttpApi, client: httpx.AsyncClient, view: StaticView
) -> None:
    partition = put_value(view, USERS, "user-07", {"n": 7})
    view.set_placement((USERS.topic, partition), OTHER, (ME,), offset=40, lag=3)
    r = await client.get("/v1/tables/users/keys/user-07?max_lag=5")
    assert r.status_code == 200, r.text
    assert (r.json()["standby"], r.json()["offset"]) == (True, 40)
    assert api.metrics.count("key", Outcome.STANDBY) == 1
    r = await client.get("/v1/tables/users/keys/user-07?maxlag=5")
    assert r.status_code == 400
    assert "max_lag" in r.json()["error"]["message"]


async def test_unexpected_error_is_503_in_the_error_shape(
    api: HttpApi, client: httpx.AsyncClient, view: StaticView, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(tp: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(view, "placement", broken)
    monkeypatch.setattr(view, "local_active", broken)
    r = await client.get("/v1/tables/users/keys/user-01")
    assert r.status_code == 503  # never 500 for a read: the caller asks another replica
    assert r.json()["error"]["code"] == "unavailable"
    assert "boom" not in r.text
    assert api.metrics.count("key", Outcome.ERROR) == 1
    assert api.metrics.read_errors("unexpected") == 2  # the key path's, then once more


# -- over real sockets -------------------------------------------------------------------------


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


def node_view() -> StaticView:
    return StaticView(f"http://127.0.0.1:{free_port()}", [USERS])


async def serve(stack: AsyncExitStack, view: StaticView, budget_s: float = 0.5) -> HttpServer:
    port = int(view.url.rsplit(":", 1)[1])
    settings = HttpSettings(request_budget_s=budget_s, reconnect_pause_s=0.02)
    server = HttpServer(view, "127.0.0.1", port, settings)
    await stack.enter_async_context(server)
    return server


async def test_forwarded_answer_is_the_owners_bytes(stack: AsyncExitStack) -> None:
    a, b = node_view(), node_view()
    for view in (a, b):
        view.place_all(USERS, {p: b.url for p in range(USERS.partitions)})
    keys = ["user-1", "a b%c", "été", "a/b"]
    for key in keys:
        put_value(b, USERS, key, {"k": key})
    server_a = await serve(stack, a)
    await serve(stack, b)
    async with httpx.AsyncClient() as client:
        for key in [*keys, "ghost"]:
            path = f"/v1/tables/users/keys/{quote(key, safe='')}"
            direct = await client.get(b.url + path)
            via_a = await client.get(a.url + path)
            assert (via_a.status_code, via_a.content) == (direct.status_code, direct.content)
            assert via_a.headers["content-type"] == "application/json"
    assert server_a.api.metrics.count("key", Outcome.FORWARDED) == len(keys) + 1


async def test_key_with_slash_over_a_socket(stack: AsyncExitStack) -> None:
    a = node_view()
    a.place_all(USERS, {p: a.url for p in range(USERS.partitions)})
    put_value(a, USERS, "a/b", "slash")
    await serve(stack, a)
    async with httpx.AsyncClient(base_url=a.url) as client:
        r = await client.get("/v1/tables/users/keys/a%2Fb")
        assert (r.status_code, r.json()["value"]) == (200, "slash")
        r = await client.get("/v1/tables/users/keys/a/b")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "no_route"


async def test_owner_that_never_answers_is_503_within_the_budget(stack: AsyncExitStack) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # reads nothing, answers nothing

    mute = await asyncio.start_server(silent, "127.0.0.1", 0)
    mute_url = f"http://127.0.0.1:{mute.sockets[0].getsockname()[1]}"
    a = node_view()
    a.place_all(USERS, {p: mute_url for p in range(USERS.partitions)})
    await serve(stack, a, budget_s=0.4)
    loop = asyncio.get_running_loop()
    try:
        async with httpx.AsyncClient(base_url=a.url) as client:
            started = loop.time()
            r = await client.get("/v1/tables/users/keys/user-01")
            waited = loop.time() - started
    finally:
        mute.close()
        for writer in accepted:
            writer.close()
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "unavailable"
    assert "no answer within" in r.json()["error"]["message"]
    assert r.headers["retry-after"] == "1"
    assert r.headers["content-type"] == "application/json"
    assert 0.35 <= waited < 1.5
    assert accepted  # the request did reach the silent owner
