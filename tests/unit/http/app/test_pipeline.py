"""GET /v1/pipeline: the queries' figures a node heard of, per caller, since a time."""

from __future__ import annotations

import time

import httpx

from sparkiq.auth import AuthConfig, Identity
from sparkiq.auth.apikeys import ApiKeys, digest
from sparkiq.core.progress import QueryBatch
from sparkiq.http import AsgiApp, HttpApi
from sparkiq.http.staticview import StaticView

URL = "http://node-a"
# API key -> who it is (the keys are their names, padded to the shortest key allowed).
GRANTS = {
    "all": Identity("ops", None, "api-key"),
    "items": Identity("reader", frozenset({"items"}), "api-key"),
    "sales": Identity("analyst", frozenset({"store-sales", "items"}), "api-key"),
}
KEYS = {name: f"{name}-key-0123456789" for name in GRANTS}


AS_ALL = {"x-api-key": KEYS["all"]}


def node() -> tuple[StaticView, httpx.AsyncClient]:
    view = StaticView(URL)
    identities = {digest(KEYS[name]): who for name, who in GRANTS.items()}
    api = HttpApi(view, auth=AuthConfig(api_keys=ApiKeys(identities)))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=AsgiApp(api)), base_url=URL)
    return view, client


def batch(query: str, n: int, at_ms: int, tables: tuple[str, ...]) -> QueryBatch:
    return QueryBatch(query, n, at_ms, tables, 10 * n, 1.5 * n, 3.0 * n, 100 + n, n, 1, n + 1)


async def test_each_caller_sees_the_queries_of_the_tables_it_may_read() -> None:
    view, client = node()
    now = int(time.time() * 1000)
    written = {
        "customers": ("items",),
        "sales": ("store-sales", "items"),
        "routes": (),  # a branch to topics: only for a caller who may read every table
    }
    for name, tables in written.items():
        for n in range(3):
            view.progress.add_query(batch(name, n, now - 3_000 + n * 1_000, tables))
    async with client:
        seen = {}
        for key in KEYS:
            r = await client.get("/v1/pipeline", headers={"x-api-key": KEYS[key]})
            assert r.status_code == 200, r.text
            seen[key] = [q["name"] for q in r.json()["queries"]]
        r = await client.get("/v1/pipeline")
        assert r.status_code == 401
    assert seen == {
        "all": ["customers", "routes", "sales"],
        "items": ["customers"],
        "sales": ["customers", "sales"],
    }


async def test_the_latest_batch_and_the_history_since_a_time() -> None:
    view, client = node()
    now = int(time.time() * 1000)
    old = now - 11 * 60_000  # before the default ten minutes
    batches = [batch("customers", n, t, ("items",)) for n, t in enumerate((old, now - 2_000, now))]
    for b in batches:
        view.progress.add_query(b)
    async with client:
        doc = (await client.get("/v1/pipeline", headers=AS_ALL)).json()
        since = await client.get("/v1/pipeline", params={"since_ms": now - 2_000}, headers=AS_ALL)
        bad = await client.get("/v1/pipeline?since_ms=soon", headers=AS_ALL)
        unknown = await client.get("/v1/pipeline?table=x", headers=AS_ALL)
    assert doc["node"] == URL
    (query,) = doc["queries"]
    assert query["name"] == "customers"
    assert query["tables"] == ["items"]
    assert query["latest"] == {
        "batch": 2,
        "time_ms": now,
        "input_rows": 20,
        "input_rows_per_s": 3.0,
        "processed_rows_per_s": 6.0,
        "batch_ms": 102,
        "state_rows": 2,
        "dead_letters": 1,
        "dead_letters_total": 3,
        "trigger": "microbatch",
        "between_epochs_ms": None,
    }
    assert [b["batch"] for b in query["history"]] == [1, 2]
    assert [b["batch"] for b in since.json()["queries"][0]["history"]] == [2]
    assert bad.status_code == unknown.status_code == 400


async def test_no_pipeline_no_queries() -> None:
    _, client = node()
    async with client:
        r = await client.get("/v1/pipeline", headers=AS_ALL)
    assert r.status_code == 200
    assert r.json()["queries"] == []
