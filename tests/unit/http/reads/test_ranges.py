"""Pages across partitions through the API (sparkiq.http.reads.ranges, sparkiq.http.reads.windows):
ranges in either order, the windows of many keys, and a key's windows paged; on one node and
on two nodes that split the partitions (forwarding in process), against a plain-Python oracle.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.core.timespec import now_ms
from sparkiq.http import AsgiApp, HttpApi, HttpSettings
from sparkiq.http.reads import scanning
from sparkiq.http.staticview import StaticView
from tests.support.forwarding import InProcessForwarder
from tests.support.stores import put_value

A, B = "http://node-a", "http://node-b"
MINUTE = 60_000
CLICKS = TableDef("clicks", "clicks-changelog", 4, kind=TableKind.WINDOWED, window_size_ms=MINUTE)
SEQS = TableDef(
    "seqs", "seqs-changelog", 3, key_format=Format.LONG, kind=TableKind.WINDOWED, window_size_ms=10
)
USERS = TableDef("users", "users-changelog", 4)
TABLES = (CLICKS, SEQS, USERS)
SETTINGS = HttpSettings(
    request_budget_s=2.0, default_range_limit=50, max_range_limit=50, max_windows=20
)

# (key, window start) -> value.
Windows = dict[tuple[Any, int], Any]


def seeded() -> tuple[Windows, Windows, list[str]]:
    rng = random.Random(11)
    clicks: Windows = {}
    for k in range(40):
        for start in rng.sample(range(-5, 30), rng.randrange(0, 12)):
            clicks[(f"u{k:03d}", start * MINUTE)] = {"n": rng.randrange(1000)}
    seqs: Windows = {(n, s * 10): n * s for n in (-7, -1, 0, 3, 2**40) for s in range(-3, 4)}
    for key in ("u00", "u0010", "u01"):  # keys that begin others, or extend them
        for start in (-2, 0, 7, 29):
            clicks[(key, start * MINUTE)] = {"n": start, "key": key}
    for start in range(25):  # more than a page of `max_windows`
        clicks[("u100", start * MINUTE)] = {"n": start}
    users = [f"user-{i:03d}" for i in range(90)]
    return clicks, seqs, users


CLICK_WINDOWS, SEQ_WINDOWS, USER_KEYS = seeded()


def make_node(url: str, nodes: list[str], forwarder: InProcessForwarder) -> HttpApi:
    """A node of `nodes`, which hold the partitions in turn, with the seeded data in its own."""
    view = StaticView(url, TABLES)
    for table in TABLES:
        view.place_all(table, {p: nodes[p % len(nodes)] for p in range(table.partitions)})

    def mine(table: TableDef, key: object) -> bool:
        return nodes[(table.partition_of(_wire(table, key)) or 0) % len(nodes)] == url

    for table, windows in ((CLICKS, CLICK_WINDOWS), (SEQS, SEQ_WINDOWS)):
        for (key, start), value in windows.items():
            if mine(table, key):
                put_value(view, table, key, value, window_start=start)
    for name in USER_KEYS:
        if mine(USERS, name):
            put_value(view, USERS, name, {"name": name})
    api = HttpApi(view, SETTINGS, forwarder=forwarder)
    forwarder.apps[url] = AsgiApp(api)
    return api


def _wire(table: TableDef, key: object) -> bytes:
    from sparkiq.core.serde import key_codec

    return key_codec(table).parse_json(key)


@pytest.fixture(params=["one node", "two nodes"])
async def clients(request: pytest.FixtureRequest) -> AsyncIterator[list[httpx.AsyncClient]]:
    """A client of each node: one node holding every partition, or two splitting them."""
    forwarder = InProcessForwarder()
    nodes = [A] if request.param == "one node" else [A, B]
    apis = [make_node(url, nodes, forwarder) for url in nodes]
    out = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=AsgiApp(api)), base_url=api.view.url)
        for api in apis
    ]
    yield out
    for client, api in zip(out, apis, strict=True):
        await client.aclose()
        await api.close()


async def pages(
    client: httpx.AsyncClient, path: str, params: dict[str, str]
) -> tuple[list[dict[str, Any]], int]:
    """Every item of a paged read, following next_cursor; and how many pages it took."""
    items: list[dict[str, Any]] = []
    asked = dict(params)
    count = 0
    while True:
        r = await client.get(path, params=asked)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["items"]) <= int(asked.get("limit", "1000"))
        items.extend(body["items"])
        count += 1
        if body["next_cursor"] is None:
            return items, count
        asked["cursor"] = body["next_cursor"]


def oracle(
    windows: Windows,
    *,
    lo: int = -(2**63),
    hi: int = 2**63 - 1,
    keys: tuple[Any, Any] | None = None,
    prefix: str | None = None,
    desc: bool = False,
    size: int = MINUTE,
) -> list[dict[str, Any]]:
    """The windows a window range must give, in plain Python."""
    picked = [
        {"key": key, "start": start, "end": start + size, "value": value}
        for (key, start), value in windows.items()
        if lo <= start <= hi
        and (keys is None or keys[0] <= key <= keys[1])
        and (prefix is None or str(key).startswith(prefix))
    ]
    return sorted(picked, key=lambda w: (w["key"], w["start"]), reverse=desc)


QUERIES: list[tuple[dict[str, str], dict[str, Any]]] = [
    ({}, {}),
    ({"order": "desc"}, {"desc": True}),
    ({"from": str(3 * MINUTE), "to": str(9 * MINUTE)}, {"lo": 3 * MINUTE, "hi": 9 * MINUTE}),
    (
        {"from": "0", "to": "1970-01-01T00:05:00Z", "order": "desc"},
        {"lo": 0, "hi": 5 * MINUTE, "desc": True},
    ),
    ({"key_from": "u010", "key_to": "u019"}, {"keys": ("u010", "u019")}),
    ({"prefix": "u02", "order": "desc", "to": "0"}, {"prefix": "u02", "desc": True, "hi": 0}),
    ({"key_from": "u035", "from": str(20 * MINUTE)}, {"keys": ("u035", "u999"), "lo": 20 * MINUTE}),
]


@pytest.mark.parametrize(("params", "expected"), QUERIES)
@pytest.mark.parametrize("limit", ["7", "50"])
async def test_a_window_range_is_the_oracle_from_every_node(
    clients: list[httpx.AsyncClient],
    params: dict[str, str],
    expected: dict[str, Any],
    limit: str,
) -> None:
    want = oracle(CLICK_WINDOWS, **expected)
    assert want  # the seeded data has windows for each query
    for client in clients:
        got, _ = await pages(client, "/v1/tables/clicks/windows", {**params, "limit": limit})
        assert got == want, (client.base_url, params)


async def test_long_keys_come_in_numeric_order_either_way(
    clients: list[httpx.AsyncClient],
) -> None:
    for client in clients:
        for desc in (False, True):
            params = {"limit": "4", "order": "desc" if desc else "asc", "from": "-10"}
            got, _ = await pages(client, "/v1/tables/seqs/windows", params)
            assert got == oracle(SEQ_WINDOWS, lo=-10, desc=desc, size=10)


async def test_pages_cut_by_the_scan_budget_still_give_every_window_once(
    clients: list[httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanning, "SCAN_BUDGET_ROWS", 3)
    params = {"from": str(27 * MINUTE), "limit": "50"}
    want = oracle(CLICK_WINDOWS, lo=27 * MINUTE)
    for client in clients:
        got, count = await pages(client, "/v1/tables/clicks/windows", params)
        assert got == want
        assert count > 1  # fewer windows than asked, and a cursor, while the budget cut


async def test_relative_times_are_read_once_for_every_partition(
    clients: list[httpx.AsyncClient],
) -> None:
    # All seeded windows start in 1969-1970: `from=-15m` leaves none, `to=now` keeps all.
    for client in clients:
        none, _ = await pages(client, "/v1/tables/clicks/windows", {"from": "-15m"})
        assert none == []
        everything, _ = await pages(client, "/v1/tables/clicks/windows", {"to": "now"})
        assert everything == oracle(CLICK_WINDOWS)
    assert now_ms() > 0


async def test_a_range_pages_in_either_order(clients: list[httpx.AsyncClient]) -> None:
    for client in clients:
        for order, keys in (("asc", USER_KEYS), ("desc", USER_KEYS[::-1])):
            got, _ = await pages(client, "/v1/tables/users/range", {"order": order, "limit": "9"})
            assert [item["key"] for item in got] == keys
        got, _ = await pages(
            client,
            "/v1/tables/users/range",
            {"from": "user-010", "to": "user-019", "order": "desc", "limit": "4"},
        )
        assert [item["key"] for item in got] == [f"user-{i:03d}" for i in range(19, 9, -1)]
        # A windowed table's range is in (key, window start) order too: u00 first (here
        # last), u0010 right after u001, though the store holds them the other way round.
        params = {"prefix": "u00", "order": "desc", "limit": "3"}
        got, _ = await pages(client, "/v1/tables/clicks/range", params)
        assert got == oracle(CLICK_WINDOWS, prefix="u00", desc=True)
        keys = [w["key"] for w in got]
        assert keys[-4:] == ["u00"] * 4
        assert keys.index("u0010") < keys.index("u001")


async def test_a_keys_windows_are_paged_in_either_order(
    clients: list[httpx.AsyncClient],
) -> None:
    every = oracle(CLICK_WINDOWS, keys=("u100", "u100"))
    assert len(every) == 25
    for client in clients:
        path = "/v1/tables/clicks/keys/u100/windows"
        for desc in (False, True):
            params = {"limit": "7", "order": "desc" if desc else "asc"}
            got, count = await pages(client, path, params)
            want = every[::-1] if desc else every
            assert got == [{k: w[k] for k in ("start", "end", "value")} for w in want]
            assert count == 4
        # The default page is `max_windows` (20): past it, a cursor rather than a silent cut.
        first = (await client.get(path)).json()
        assert [w["start"] for w in first["items"]] == [w["start"] for w in every[:20]]
        rest = (await client.get(path, params={"cursor": first["next_cursor"]})).json()
        assert [w["start"] for w in rest["items"]] == [w["start"] for w in every[20:]]
        assert rest["next_cursor"] is None
        newest = (await client.get(path, params={"order": "desc", "limit": "1"})).json()
        assert newest["items"][0]["start"] == 24 * MINUTE


async def test_window_reads_refuse_what_they_cannot_answer(
    clients: list[httpx.AsyncClient],
) -> None:
    client = clients[0]
    r = await client.get("/v1/tables/users/windows")
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "not_windowed"
    for query in (
        "order=up",
        "from=soon",
        "from=5&to=4",
        "limit=51",
        "cursor=%25",
        "key_from=x",
        "partitions=0",
    ):
        table = "seqs" if query.startswith("key_from") else "clicks"
        r = await client.get(f"/v1/tables/{table}/windows?{query}")
        assert r.status_code == 400, (query, r.text)
        assert r.json()["error"]["code"] == "bad_request"
    r = await client.get("/v1/tables/users/range?order=DESC")
    assert r.status_code == 400


async def test_a_range_whose_from_comes_after_its_to_is_refused(
    clients: list[httpx.AsyncClient],
) -> None:
    for client in clients:
        r = await client.get("/v1/tables/users/range?from=user-050&to=user-040")
        assert r.status_code == 400, r.text
        assert "from (user-050) comes after to (user-040)" in r.json()["error"]["message"]
        r = await client.get("/v1/tables/seqs/windows?key_from=3&key_to=-1")
        assert r.status_code == 400, r.text
        assert "key_from (3) comes after key_to (-1)" in r.json()["error"]["message"]
        # Equal bounds are one key; reversed order reads downwards, not a reversed range.
        r = await client.get("/v1/tables/users/range?from=user-040&to=user-040")
        assert [i["key"] for i in r.json()["items"]] == ["user-040"]
        r = await client.get("/v1/tables/users/range?from=user-040&to=user-042&order=desc")
        assert [i["key"] for i in r.json()["items"]] == ["user-042", "user-041", "user-040"]
    r = await client.get("/v1/tables/clicks/keys/u001/windows?limit=21")
    assert r.status_code == 400
