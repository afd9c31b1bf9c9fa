"""The HTTP API on one node (`sparkiq.http.app.dispatch`), driven in-process through the ASGI
adapter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from sparkiq.core.errors import StorageFault
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.http import AsgiApp, HttpApi, HttpSettings
from sparkiq.http.staticview import StaticView
from tests.support.stores import put_value

ME = "http://node-a"
USERS = TableDef("users", "users-changelog", 4)
COUNTS = TableDef("counts", "counts-changelog", 3, key_format=Format.LONG, value_format=Format.LONG)
CLICKS = TableDef("clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60_000)


def make_view() -> StaticView:
    view = StaticView(ME, [USERS, COUNTS, CLICKS])
    for table in (USERS, COUNTS, CLICKS):
        view.place_all(table, {p: ME for p in range(table.partitions)})
    for i in range(50):
        put_value(view, USERS, f"user-{i:02d}", {"n": i})
    put_value(view, USERS, "a/b c%d", {"odd": True})
    for n in (-5, 0, 7, 1_000_000):
        put_value(view, COUNTS, n, n * 10)
    for start in (0, 60_000, 120_000):
        put_value(view, CLICKS, "alice", {"clicks": start // 1000}, window_start=start)
    put_value(view, CLICKS, "alicex", {"clicks": -1}, window_start=0)
    return view


@pytest.fixture
def view() -> StaticView:
    return make_view()


@pytest.fixture
def settings() -> HttpSettings:
    return HttpSettings(request_budget_s=0.3, max_body_bytes=4096)


@pytest.fixture
async def client(view: StaticView, settings: HttpSettings) -> AsyncIterator[httpx.AsyncClient]:
    api = HttpApi(view, settings)
    transport = httpx.ASGITransport(app=AsgiApp(api))
    async with httpx.AsyncClient(transport=transport, base_url=ME) as c:
        c.api = api  # type: ignore[attr-defined]
        yield c
    await api.close()


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return str(body["error"]["message"])


# -- single keys -------------------------------------------------------------------------------


async def test_get_key_answers_value_partition_offset_node(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/tables/users/keys/user-07")
    assert r.status_code == 200
    body = r.json()
    assert body["table"] == "users"
    assert body["key"] == "user-07"
    assert body["value"] == {"n": 7}
    assert body["node"] == ME
    assert body["standby"] is False
    assert body["offset"] == 0
    assert 0 <= body["partition"] < USERS.partitions


async def test_key_path_segment_is_percent_decoded(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/tables/users/keys/a%2Fb%20c%25d")
    assert r.status_code == 200, r.text
    assert r.json()["key"] == "a/b c%d"
    assert r.json()["value"] == {"odd": True}


async def test_long_keys_parse_and_render_as_numbers(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/tables/counts/keys/-5")
    assert r.status_code == 200
    assert r.json()["key"] == -5
    assert r.json()["value"] == -50


async def test_absent_key_is_404_not_found(client: httpx.AsyncClient) -> None:
    message = assert_error(await client.get("/v1/tables/users/keys/nobody"), 404, "not_found")
    assert "nobody" in message


async def test_unknown_table_is_404_listing_known_tables(client: httpx.AsyncClient) -> None:
    message = assert_error(await client.get("/v1/tables/nope/keys/x"), 404, "unknown_table")
    for name in ("users", "counts", "clicks"):
        assert name in message


async def test_unknown_table_before_the_catalog_is_read_is_503(
    client: httpx.AsyncClient, view: StaticView
) -> None:
    view.loaded = False  # a node starting up: another node may know the table
    r = await client.get("/v1/tables/nope/keys/x")
    message = assert_error(r, 503, "unavailable")
    assert "catalog" in message
    assert r.headers["retry-after"] == "1"


async def test_bad_key_for_format_is_400(client: httpx.AsyncClient) -> None:
    message = assert_error(await client.get("/v1/tables/counts/keys/twelve"), 400, "bad_request")
    assert "long" in message


async def test_key_over_limit_is_413(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/v1/tables/users/keys/" + "x" * 4097), 413, "too_large")
    ok = await client.get("/v1/tables/users/keys/" + "x" * 4096)
    assert ok.status_code == 404  # at the limit: looked up (and absent)


async def test_wrong_method_is_405_with_allow(client: httpx.AsyncClient) -> None:
    r = await client.delete("/v1/tables/users/keys/user-01")
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET"
    assert_error(await client.get("/v1/tables/users/multi-get"), 405, "method_not_allowed")
    assert_error(await client.post("/v1/tables", content=b"{}"), 405, "method_not_allowed")


async def test_unknown_path_and_parameter_are_refused(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/v2/whatever"), 404, "no_route")
    assert_error(await client.get("/v1/tables/users/keys/a/b"), 404, "no_route")
    message = assert_error(
        await client.get("/v1/tables/users/keys/user-01?maxlag=3"), 400, "bad_request"
    )
    assert "max_lag" in message
    assert_error(await client.get("/v1/tables/users/keys/u?max_lag=-1"), 400, "bad_request")
    assert_error(await client.get("/v1/tables/users/keys/u?max_lag=x"), 400, "bad_request")


async def test_bad_hops_header_is_400(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/tables/users/keys/user-01", headers={"x-sparkiq-hops": "many"})
    assert_error(r, 400, "bad_request")


async def test_an_unexpected_exception_reading_a_table_is_503_never_500(
    client: httpx.AsyncClient, view: StaticView, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(tp: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(view, "placement", broken)
    monkeypatch.setattr(view, "local_active", broken)
    r = await client.get("/v1/tables/users/keys/user-01")
    message = assert_error(r, 503, "unavailable")
    assert r.headers["retry-after"] == "1"
    assert "boom" not in message  # details go to the log, not to the caller
    metrics = (await client.get("/metrics")).text
    assert 'sparkiq_read_errors_total{endpoint="key",kind="unexpected"} 2.0' in metrics


async def test_an_unexpected_exception_elsewhere_is_500_in_the_error_shape(
    client: httpx.AsyncClient, view: StaticView, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(view, "metadata", broken)
    message = assert_error(await client.get("/v1/metadata"), 500, "internal")
    assert "boom" not in message


async def test_a_read_that_meets_a_storage_fault_is_answered_again(
    client: httpx.AsyncClient, view: StaticView, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_value(view, USERS, "user-01", {"n": 1})
    local_active = view.local_active
    faults = [StorageFault("reading the store at /s/users/0 failed: Corruption: bad block")]

    def failing_once(tp: tuple[str, int]) -> object:
        if faults:
            raise faults.pop()
        return local_active(tp)

    monkeypatch.setattr(view, "local_active", failing_once)
    r = await client.get("/v1/tables/users/keys/user-01")
    assert r.status_code == 200, r.text
    assert r.json()["value"] == {"n": 1}
    metrics = (await client.get("/metrics")).text
    assert 'sparkiq_read_errors_total{endpoint="key",kind="storage"} 1.0' in metrics


# -- standby reads and waiting -----------------------------------------------------------------


async def test_standby_answers_within_max_lag_only(
    client: httpx.AsyncClient, view: StaticView
) -> None:
    partition = put_value(view, USERS, "user-07", {"n": 7})
    tp = (USERS.topic, partition)
    view.set_placement(tp, "http://node-b", (ME,), ready=True, offset=40, lag=3)
    r = await client.get("/v1/tables/users/keys/user-07?max_lag=5")
    assert r.status_code == 200
    assert r.json()["standby"] is True
    assert r.json()["offset"] == 40
    # Without max_lag the active (node-b, unreachable here) must answer: 503 after the budget.
    r = await client.get("/v1/tables/users/keys/user-07?max_lag=2")
    assert_error(r, 503, "unavailable")


async def test_restoring_partition_is_503_with_retry_after_after_budget(
    client: httpx.AsyncClient, view: StaticView
) -> None:
    partition = put_value(view, USERS, "user-01", {"n": 1})
    # Restoring and far behind: too far to stand in for the active (standby_max_lag 10,000).
    view.set_placement((USERS.topic, partition), ME, ready=False, lag=50_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await client.get("/v1/tables/users/keys/user-01")
    waited = loop.time() - started
    message = assert_error(r, 503, "unavailable")
    assert "restoring" in message
    assert int(r.headers["retry-after"]) >= 1
    assert 0.25 <= waited < 2.0  # the (shortened) 0.3 s budget, not the 5 s default


async def test_request_waits_through_a_placement_change(view: StaticView) -> None:
    partition = put_value(view, USERS, "user-02", {"n": 2})
    tp = (USERS.topic, partition)
    view.set_placement(tp, None)  # no active at all
    api = HttpApi(view, HttpSettings(request_budget_s=3.0))
    transport = httpx.ASGITransport(app=AsgiApp(api))
    async with httpx.AsyncClient(transport=transport, base_url=ME) as c:
        pending = asyncio.create_task(c.get("/v1/tables/users/keys/user-02"))
        await asyncio.sleep(0.2)
        assert not pending.done()
        view.set_placement(tp, ME)  # the assignment arrives, the replica is ready
        r = await asyncio.wait_for(pending, 2.0)
    assert r.status_code == 200
    assert r.json()["value"] == {"n": 2}


# -- multi-get ---------------------------------------------------------------------------------


async def test_multi_get_keeps_order_and_nulls_absent(client: httpx.AsyncClient) -> None:
    keys = ["user-09", "ghost", "user-01", "a/b c%d", "user-30"]
    r = await client.post("/v1/tables/users/multi-get", json={"keys": keys})
    assert r.status_code == 200
    items = r.json()["items"]
    assert [i["key"] for i in items] == keys
    assert [i["value"] for i in items] == [{"n": 9}, None, {"n": 1}, {"odd": True}, {"n": 30}]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "bad_request"),
        (b'["user-01"]', 400, "bad_request"),
        (b'{"keys": "user-01"}', 400, "bad_request"),
        (b'{"keys": [1, 2]}', 400, "bad_request"),  # string table: ints are not keys
        (b'{"keys": ["' + b"k" * 5000 + b'"]}', 413, "too_large"),  # body over 4096
    ],
)
async def test_multi_get_bad_bodies(
    client: httpx.AsyncClient, body: bytes, status: int, code: str
) -> None:
    r = await client.post("/v1/tables/users/multi-get", content=body)
    assert_error(r, status, code)


async def test_multi_get_key_over_limit_is_413(view: StaticView) -> None:
    api = HttpApi(view, HttpSettings(max_key_bytes=8))
    transport = httpx.ASGITransport(app=AsgiApp(api))
    async with httpx.AsyncClient(transport=transport, base_url=ME) as c:
        r = await c.post("/v1/tables/users/multi-get", json={"keys": ["user-01", "x" * 9]})
    assert "keys[1]" in assert_error(r, 413, "too_large")


# -- range -------------------------------------------------------------------------------------


async def test_range_merges_partitions_in_key_order(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/tables/users/range?from=user-10&to=user-14")
    assert r.status_code == 200
    body = r.json()
    assert [i["key"] for i in body["items"]] == [f"user-{i}" for i in range(10, 15)]
    assert body["items"][0]["value"] == {"n": 10}
    assert body["next_cursor"] is None


async def test_range_pages_return_every_key_exactly_once(client: httpx.AsyncClient) -> None:
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"prefix": "user-", "limit": "7"}
        if cursor:
            params["cursor"] = cursor
        r = await client.get("/v1/tables/users/range", params=params)
        assert r.status_code == 200
        body = r.json()
        assert len(body["items"]) <= 7
        seen += [i["key"] for i in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"user-{i:02d}" for i in range(50)]
    assert pages == 8  # 7 full pages and one of 1


async def test_range_over_long_keys_is_in_numeric_order(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/tables/counts/range")
    assert [i["key"] for i in r.json()["items"]] == [-5, 0, 7, 1_000_000]


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=1001", "limit=ten", "cursor=%%%", "from=abc", "partitions=0"],
)
async def test_range_bad_parameters_are_400(client: httpx.AsyncClient, query: str) -> None:
    table = "counts" if query.startswith("from") else "users"
    assert_error(await client.get(f"/v1/tables/{table}/range?{query}"), 400, "bad_request")


# -- windows and owner -------------------------------------------------------------------------


async def test_windows_of_one_key(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/tables/clicks/keys/alice/windows?from=60000&to=200000")
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert items == [
        {"start": 60_000, "end": 120_000, "value": {"clicks": 60}},
        {"start": 120_000, "end": 180_000, "value": {"clicks": 120}},
    ]
    everything = (await client.get("/v1/tables/clicks/keys/alice/windows")).json()["items"]
    assert [w["start"] for w in everything] == [0, 60_000, 120_000]  # not alicex's window


async def test_windows_errors(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/v1/tables/users/keys/u/windows"), 400, "not_windowed")
    r = await client.get("/v1/tables/clicks/keys/alice/windows?from=10&to=5")
    assert_error(r, 400, "bad_request")
    r = await client.get("/v1/tables/clicks/keys/alice/windows?from=soon")
    assert_error(r, 400, "bad_request")


async def test_a_key_of_a_windowed_table_is_read_by_its_windows_not_as_one_value(
    client: httpx.AsyncClient,
) -> None:
    # "alice" has three windows: a 404 would say it is absent. The answer says where they are.
    message = assert_error(await client.get("/v1/tables/clicks/keys/alice"), 400, "windowed")
    assert "GET /v1/tables/clicks/keys/alice/windows" in message
    assert "GET /v1/tables/clicks/changes?from=alice&to=alice" in message
    r = await client.post("/v1/tables/clicks/multi-get", json={"keys": ["alice"]})
    assert "GET /v1/tables/clicks/keys/{key}/windows" in assert_error(r, 400, "windowed")
    r = await client.get("/v1/tables/clicks/keys/alice/watch")
    assert "a watch of a key" in assert_error(r, 400, "windowed")
    # The windows are there, and a kv table's key reads as before.
    assert len((await client.get("/v1/tables/clicks/keys/alice/windows")).json()["items"]) == 3
    assert (await client.get("/v1/tables/users/keys/user-03")).status_code == 200


async def test_owner_names_active_and_standbys(client: httpx.AsyncClient, view: StaticView) -> None:
    partition = put_value(view, USERS, "user-03", {"n": 3})
    view.set_placement((USERS.topic, partition), "http://node-b", ("http://node-c", ME))
    r = await client.get("/v1/tables/users/keys/user-03/owner")
    assert r.status_code == 200
    assert r.json()["partition"] == partition
    assert r.json()["active"] == "http://node-b"
    assert r.json()["standbys"] == ["http://node-c", ME]


# -- node endpoints ----------------------------------------------------------------------------


async def test_tables_metadata_health(client: httpx.AsyncClient, view: StaticView) -> None:
    tables = (await client.get("/v1/tables")).json()["tables"]
    assert {t["name"] for t in tables} == {"users", "counts", "clicks"}
    assert {"name", "topic", "partitions", "kind", "key_format", "value_format"} <= set(tables[0])
    assert (await client.get("/v1/metadata")).json() == view.metadata()
    assert (await client.get("/healthz")).status_code == 200
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ok", "kafka": view.kafka})
    # Brokers unreachable: still ready (it answers what it holds), and the body says so.
    view.kafka = {"reachable": False, "unreachable_since": "2026-01-01T00:00:00.000Z"}
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ok", "kafka": view.kafka})
    view.ready = False
    r = await client.get("/readyz")
    assert_error(r, 503, "not_ready")
    assert (await client.get("/healthz")).status_code == 200


async def test_metrics_count_by_endpoint_and_outcome(client: httpx.AsyncClient) -> None:
    await client.get("/v1/tables/users/keys/user-01")
    await client.get("/v1/tables/users/keys/user-02")
    await client.get("/v1/tables/nope/keys/x")
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'sparkiq_http_requests_total{endpoint="key",outcome="local",status="200"} 2.0' in text
    assert 'sparkiq_http_requests_total{endpoint="key",outcome="error",status="404"} 1.0' in text
    assert "sparkiq_http_request_seconds_bucket" in text
