"""The OpenAPI description (sparkiq.http.messages.openapi): valid, complete, and true of the API.

Three kinds of test:

- the document is a valid OpenAPI 3.1 document, and its schemas valid JSON Schema;
- every route the dispatcher answers is described, and nothing else: candidate paths are
  built from the string constants of `sparkiq.http.app.dispatch` and probed, so a new endpoint that
  is not described fails here;
- schemathesis fuzzes the API from the document, in process, against two nodes over
  `StaticView`s (some partitions local, some on the other node, one restoring, one whose
  active is dead with a local standby): no 500, no hang, and every answer's status, content
  type, headers and body as described. A 503 is described (restoring, owner unreachable)
  and allowed; the budget is short so it comes quickly. The e2e test fuzzes a real node
  process over HTTP the same way.

Authentication: `test_fuzz_a_node_with_authentication` fuzzes a node that checks API keys
(`AuthConfig` with `ApiKeys`): schemathesis sends `API_KEY` as the document's `apiKey`
scheme (`fuzz_config(api_key=...)`) and its `ignored_auth` check asks again without it and
with a wrong one, expecting 401; a table the key does not grant answers 403. The other fuzz
runs use nodes without authentication (`HttpApi` without `auth`; `LocalCluster` starts its
processes with `--auth none`): they send `CREDENTIALS` (none) and leave out `ignored_auth`
(`UNAUTHENTICATED_EXCLUDED`). Node b trusts what node a forwards (no cluster secret), and
`InProcessForwarder` carries neither the caller's credentials nor a cluster signature.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import jsonschema_rs
import pytest
import schemathesis
from confluent_kafka import Producer
from hypothesis import strategies as st
from schemathesis import BaseSchema
from schemathesis.specs.openapi.checks import ignored_auth

from sparkiq.auth import AuthConfig, Identity
from sparkiq.auth.apikeys import ApiKeys, digest
from sparkiq.core.partitioner import partition_for
from sparkiq.core.serde import key_codec
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.core.value_codecs import value_codec
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.http import AsgiApp, HttpApi, HttpSettings
from sparkiq.http.app import dispatch as api_module
from sparkiq.http.messages.openapi import OPENAPI_PATH, document
from sparkiq.http.messages.wire import BUDGET_HEADER, HOPS_HEADER
from sparkiq.http.staticview import DictStore, StaticView
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.forwarding import InProcessForwarder
from tests.support.stores import put_value

A, B, DEAD = "http://node-a", "http://node-b", "http://node-dead"

USERS = TableDef("users", "users-changelog", 4)  # string keys, JSON values
COUNTS = TableDef("counts", "counts-changelog", 3, key_format=Format.LONG, value_format=Format.LONG)
SCORES = TableDef(
    "scores", "scores-changelog", 2, key_format=Format.INT, value_format=Format.STRING
)
DOCS = TableDef("docs", "docs-changelog", 2, key_format=Format.JSON)
CLICKS = TableDef("clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60_000)
TABLES = (USERS, COUNTS, SCORES, DOCS, CLICKS)

# Short waits: a request for a partition nobody can answer is a 503 within 0.15 s.
SETTINGS = HttpSettings(
    request_budget_s=0.15, reconnect_pause_s=0.02, active_timeout_s=0.05, max_body_bytes=64 * 1024
)
REQUEST_TIMEOUT_S = 5.0  # a request still unanswered after this long has hung: it fails

# Fuzzing nodes without authentication (see the module docstring).
CREDENTIALS: dict[str, str] = {}
UNAUTHENTICATED_EXCLUDED = [ignored_auth]

KEYS: dict[str, list[Any]] = {
    USERS.name: [*(f"user-{i:02d}" for i in range(40)), "a/b c%d", "ünï"],
    COUNTS.name: [-5, 0, 7, 1_000_000, 2**63 - 1, -(2**63)],
    SCORES.name: [-1, 0, 3, 2**31 - 1],
    DOCS.name: ["alice", {"id": 7}, [1, "x"], 3.5],
    CLICKS.name: ["alice", "alicex", "bob"],
}


class NodeShapedView(StaticView):
    """A StaticView whose /v1/metadata has a node's shape (sparkiq.node.node.Node.metadata)."""

    def metadata(self) -> dict[str, object]:
        partitions = []
        for table in self.tables():
            for p in range(table.partitions):
                placement = self.placement((table.topic, p))
                partitions.append(
                    {
                        "table": table.name,
                        "topic": table.topic,
                        "partition": p,
                        "active": placement.active,
                        "standbys": list(placement.standbys),
                        "warming": [],
                        "lags": {},
                        "misplaced": 0,
                    }
                )
        return {
            "node": self.url,
            "generation": 3,
            "ready": self.ready,
            "restored_records": 0,
            "node_id": f"id-of-{self.url}",
            "refused": [],
            "tables": [self.table_summary(t) for t in self.tables()],
            "partitions": partitions,
            "nodes": [
                {"url": u, "active": [], "standby": [], "warming": [], "lags": {}} for u in (A, B)
            ],
            "local": [],
            "stores": {"open": 2, "capacity": 693, "memory_mb": 256},
            "cleanup": {
                "delay_s": 600.0,
                "deleted": 1,
                "pending": [
                    {
                        "table": USERS.name,
                        "partition": 1,
                        "path": "/state/users/1",
                        "quarantined": False,
                        "closed_ms": 1_790_000_000_000,
                        "delete_at_ms": 1_790_000_600_000,
                    }
                ],
            },
            "kafka": self.kafka_contact(),
        }


def value_of(table: TableDef, i: int) -> object:
    """The i-th key's value, in the table's value format."""
    if table.value_format is Format.JSON:
        return {"n": i}
    return f"v{i}" if table.value_format is Format.STRING else i


def owner_of(table: TableDef, partition: int) -> str:
    """Partition placement: mostly split between a and b, with two awkward ones."""
    if table is USERS and partition == 3:
        return A  # ... but restoring: no replica answers, 503 after the budget
    if table is CLICKS and partition == 1:
        return DEAD  # a's standby stands in
    return A if partition % 2 == 0 else B


def cluster(auth: AuthConfig | None = None) -> tuple[HttpApi, HttpApi]:
    """Node a (fuzzed, checking callers with `auth`) and node b (which trusts a), with the
    same placements and data where it lives."""
    forwarder = InProcessForwarder()
    views = {url: NodeShapedView(url, TABLES) for url in (A, B)}
    for table in TABLES:
        for p in range(table.partitions):
            tp = (table.topic, p)
            active = owner_of(table, p)
            standbys = [A] if active == DEAD else []
            restoring = table is USERS and p == 3
            for url, view in views.items():
                local = url == active or url in standbys
                view.set_placement(
                    tp,
                    active,
                    standbys,
                    store=DictStore() if local else None,
                    ready=not restoring,
                    offset=10 + p,
                    # A restoring replica whose lag is not measured yet never stands in.
                    lag_known=not restoring,
                )
    for table in TABLES:
        for i, key in enumerate(KEYS[table.name]):
            wire = key_codec(table).parse_json(key)
            owner = owner_of(table, partition_for(wire, table.partitions))
            view = views[A if owner == DEAD else owner]
            if table.is_windowed:
                for start in (0, 60_000, -60_000):
                    put_value(view, table, key, {"n": i, "start": start}, window_start=start)
            else:
                put_value(view, table, key, value_of(table, i))
    apis = [
        HttpApi(views[A], SETTINGS, forwarder=forwarder, auth=auth),
        HttpApi(views[B], SETTINGS, forwarder=forwarder),
    ]
    forwarder.apps = {A: AsgiApp(apis[0]), B: AsgiApp(apis[1])}
    return apis[0], apis[1]


# -- the document ------------------------------------------------------------------------------


def test_document_is_valid_openapi_with_valid_schemas() -> None:
    doc = document()
    schemathesis.openapi.from_dict(doc).validate()
    components = doc["components"]
    assert isinstance(components, dict)
    schemas = list(components["schemas"].values())
    schemas += [p["schema"] for p in components["parameters"].values()]
    schemas += [h["schema"] for h in components["headers"].values()]
    for schema in schemas:
        jsonschema_rs.meta.validate(schema)


def test_document_carries_the_nodes_limits() -> None:
    doc = document(HttpSettings(max_range_limit=50, default_range_limit=10))
    limit = doc["components"]["parameters"]["Limit"]["schema"]  # type: ignore[index]
    assert (limit["maximum"], limit["default"]) == (50, 10)


def test_internal_headers_and_parameters_are_not_described() -> None:
    text = str(document())
    for internal in (HOPS_HEADER, BUDGET_HEADER, "x-sparkiq-cluster", "fallback_lag"):
        assert internal not in text
    range_params = document()["paths"]["/v1/tables/{table}/range"]["get"]["parameters"]  # type: ignore[index]
    assert "Partitions" not in str(range_params)


def test_ops_endpoints_are_open_and_v1_needs_credentials() -> None:
    doc = document()
    assert doc["security"] == [{"bearerAuth": []}, {"apiKey": []}]
    for path, item in doc["paths"].items():  # type: ignore[attr-defined]
        for op in item.values():
            if path in ("/healthz", "/readyz", "/metrics", OPENAPI_PATH):
                assert op["security"] == [], path
            else:
                assert "security" not in op, path  # the document's default
                assert "401" in op["responses"], path


async def test_served_document_is_the_document() -> None:
    api = HttpApi(StaticView(A), SETTINGS)
    transport = httpx.ASGITransport(app=AsgiApp(api))
    async with httpx.AsyncClient(transport=transport, base_url=A) as client:
        r = await client.get(OPENAPI_PATH)
        again = await client.get(OPENAPI_PATH)
        wrong = await client.post(OPENAPI_PATH)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == document(SETTINGS)
    assert again.content == r.content
    assert wrong.status_code == 405


# -- every route is described --------------------------------------------------------------------


# Operations answered with an event stream: a fuzzer would wait for their end forever.
STREAMED = [
    (path, method)
    for path, item in document()["paths"].items()
    for method, op in item.items()
    if "text/event-stream" in op["responses"]["200"]["content"]
]
STREAMED_IDS = [document()["paths"][p][m]["operationId"] for p, m in STREAMED]


def _candidate_paths() -> Iterator[str]:
    """Paths built from every string constant of sparkiq.http.app.dispatch, in every shape it
    parses."""
    tree = ast.parse(inspect.getsource(api_module))
    constants = {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    for c in sorted(constants):
        if c.startswith("/"):
            yield c
        elif re.fullmatch(r"[a-z][a-z0-9_-]{0,30}", c):
            yield f"/{c}"
            yield f"/v1/{c}"
            yield f"/v1/tables/users/{c}"
            yield f"/v1/tables/users/keys/{c}"
            yield f"/v1/tables/users/keys/alice/{c}"
            yield f"/v1/tables/users/{c}/alice"


def _template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(path)) + "$")


async def test_every_route_the_api_answers_is_described_and_nothing_else() -> None:
    paths = document()["paths"]
    assert isinstance(paths, dict)
    described = {(_template(p), m.upper()) for p, item in paths.items() for m in item}
    # Event streams never end, so they are not probed here (tests/unit/http/test_keywatch.py
    # opens them over HTTP).
    streams = {(_template(p), m.upper()) for p, m in STREAMED}
    api, _ = cluster()
    transport = httpx.ASGITransport(app=AsgiApp(api))
    answered: set[tuple[str, str]] = set()
    async with httpx.AsyncClient(transport=transport, base_url=A) as client:
        for path in set(_candidate_paths()):
            for method in ("GET", "POST", "PUT", "DELETE"):
                r = await client.request(method, path, json={"keys": []})
                if r.status_code == 404 and r.json()["error"]["code"] == "no_route":
                    continue
                if r.status_code == 405:
                    continue
                answered.add((path, method))
                assert any(t.match(path) and m == method for t, m in described), (
                    f"{method} {path} is answered ({r.status_code}) but not described"
                )
    # ... and each described operation is one of them.
    for template, method in described - streams:
        assert any(template.match(p) and m == method for p, m in answered), (template, method)


async def test_a_repeated_query_parameter_is_400() -> None:
    """Found by the fuzz: `limit=x&limit=` used to be the default limit (last value won)."""
    api, _ = cluster()
    transport = httpx.ASGITransport(app=AsgiApp(api))
    async with httpx.AsyncClient(transport=transport, base_url=A) as client:
        r = await client.get("/v1/tables/counts/range?limit=x&limit=&max_lag=1&max_lag=2")
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "bad_request"
    assert "limit, max_lag given more than once" in r.json()["error"]["message"]


# -- fuzzing -------------------------------------------------------------------------------------


FuzzCase = schemathesis.Case[Any]


def fuzz_config(max_examples: int, api_key: str | None = None) -> schemathesis.Config:
    """How the fuzz runs: positive and negative cases, reproducible, and what it accepts;
    with `api_key`, every request carries it (as the document's `apiKey` scheme)."""
    auth = {"auth": {"openapi": {"apiKey": {"api_key": api_key}}}} if api_key else {}
    return schemathesis.Config.from_dict(
        {
            **auth,
            "generation": {
                "mode": "all",
                "max-examples": max_examples,
                "deterministic": True,
                "database": "none",
                # Credentials are the test's to give (CREDENTIALS, API_KEY), not generated.
                "with-security-parameters": False,
            },
            "phases": {"stateful": {"enabled": False}},
            "checks": {
                # 503 is described: restoring partitions, an unreachable owner. 500 never is.
                "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "503"]},
                # A key valid by the schema (any string) need not parse in the table's format
                # (400), may be over the size limit (413), its partition may be restoring (503).
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404", "413", "503"]
                },
                # Refused before the input is read (401, 403) is rejected too.
                "negative_data_rejection": {
                    "expected-statuses": ["400", "401", "403", "404", "405", "413"]
                },
                "max_response_time": REQUEST_TIMEOUT_S,
            },
        }
    )


def _text(table: TableDef, key: object) -> str:
    """`key` written as in a path (or a range bound) of `table`."""
    if table.key_format is Format.JSON:
        return json.dumps(key)
    return str(key)


def aim(
    schema: BaseSchema,
    tables: Sequence[TableDef],
    keys: dict[str, list[Any]],
    *,
    waits: bool = True,
) -> None:
    """Aim most generated cases at `tables` and their `keys`; leave the rest as generated.

    Without this nearly every table name would be unknown (404) and every key absent.
    `waits` False: no `after`/`after_source` (a generated token is ahead of every replica,
    and a node process waits its whole budget for it).
    """

    def flatmap_case(context: schemathesis.HookContext, case: FuzzCase) -> Any:
        if "table" not in (case.path_parameters or {}):
            return st.just(case)
        if not waits and case.query:
            for name in ("after", "after_source"):
                case.query.pop(name, None)
        return st.sampled_from([*tables, None]).flatmap(lambda table: _aim(case, table, keys))

    schema.hook("flatmap_case")(flatmap_case)


def _aim(case: FuzzCase, table: TableDef | None, keys: dict[str, list[Any]]) -> Any:
    if table is None:
        return st.just(case)
    own = keys[table.name]
    text = st.one_of(
        st.sampled_from([_text(table, k) for k in own]),
        st.integers(min_value=-(2**64), max_value=2**64).map(str),
        st.text(max_size=8),
    )
    body: Any = case.body
    size = len(body["keys"]) if isinstance(body, dict) and isinstance(body.get("keys"), list) else 0
    choices = st.tuples(
        st.lists(st.one_of(text, st.none()), min_size=4, max_size=4),
        st.lists(st.one_of(st.sampled_from(own), st.none()), min_size=size, max_size=size),
    )

    def apply(drawn: tuple[list[str | None], list[object]]) -> FuzzCase:
        texts, picked = drawn
        params = case.path_parameters
        assert params is not None
        params["table"] = table.name
        if "key" in params and texts[0] is not None:
            params["key"] = texts[0]
        bounds = KEY_BOUNDS.get(case.operation.path)
        if bounds is not None and case.query is not None:
            for name, value in zip(bounds, texts[1:], strict=True):
                if name in case.query and value is not None:
                    case.query[name] = value
        if size:
            body["keys"] = [
                g if k is None else k for g, k in zip(body["keys"], picked, strict=True)
            ]
        return case

    return choices.map(apply)


# The parameters of an operation that are keys, by path.
KEY_BOUNDS = {
    "/v1/tables/{table}/range": ("from", "to", "prefix"),
    "/v1/tables/{table}/windows": ("key_from", "key_to", "prefix"),
}


def call_and_validate(case: FuzzCase, **kwargs: Any) -> None:
    """One fuzzed request, with the credentials, checks and time limit of this module."""
    case.call_and_validate(
        headers=CREDENTIALS,
        excluded_checks=UNAUTHENTICATED_EXCLUDED,
        timeout=REQUEST_TIMEOUT_S,
        **kwargs,
    )


FUZZ_API, _ = cluster()
schema = schemathesis.openapi.from_asgi(
    OPENAPI_PATH, AsgiApp(FUZZ_API), config=fuzz_config(max_examples=40)
).exclude(operation_id=STREAMED_IDS)
aim(schema, TABLES, KEYS)


@pytest.mark.timeout(120)
@schema.parametrize()
def test_fuzz_the_api_from_its_description(case: FuzzCase) -> None:
    call_and_validate(case)


# With authentication: an API key that grants every table but one. Without credentials
# (schemathesis' ignored_auth check asks so) the answer must be 401, for a table not granted 403.
API_KEY = "fuzz-key-of-the-openapi-test"
READER = Identity("fuzz", frozenset(t.name for t in TABLES if t is not SCORES), "api-key")
SECURED_API, _ = cluster(AuthConfig(api_keys=ApiKeys({digest(API_KEY): READER})))
secured_schema = schemathesis.openapi.from_asgi(
    OPENAPI_PATH, AsgiApp(SECURED_API), config=fuzz_config(max_examples=15, api_key=API_KEY)
).exclude(operation_id=STREAMED_IDS)
aim(secured_schema, TABLES, KEYS)


@pytest.mark.timeout(120)
@secured_schema.parametrize()
def test_fuzz_a_node_with_authentication(case: FuzzCase) -> None:
    case.call_and_validate(timeout=REQUEST_TIMEOUT_S)


# -- fuzzing a node process ----------------------------------------------------------------------

APP = f"oapi{int(time.time() * 1000) % 10**9}"
NODE_TABLES = (
    TableDef("people", f"{APP}-people", 3),
    TableDef("ids", f"{APP}-ids", 2, key_format=Format.LONG, value_format=Format.LONG),
)
NODE_KEYS: dict[str, list[Any]] = {
    "people": [*(f"p{i:03d}" for i in range(60)), "a/b c%d"],
    "ids": list(range(-20, 40)),
}

# The document a node with default settings serves (the test checks that it does); loaded
# here because schemathesis needs the schema when the module is collected.
node_schema = schemathesis.openapi.from_dict(
    document(), config=fuzz_config(max_examples=20)
).exclude(operation_id=STREAMED_IDS)
aim(node_schema, NODE_TABLES, NODE_KEYS, waits=False)


@pytest.fixture(scope="module")
def node_url(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two `sparkiq serve` processes (without authentication) serving a string and a long
    table; the URL of the first."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for table in NODE_TABLES:
        create_topic(bootstrap, table.topic, table.partitions)
        register_table(bootstrap, table, app=APP)
        keys, values = key_codec(table), value_codec(table)
        for i, key in enumerate(NODE_KEYS[table.name]):
            value = values.encode(value_of(table, i))
            producer.produce(table.topic, key=keys.parse_json(key), value=value)
    assert producer.flush(30) == 0
    with LocalCluster(bootstrap, tmp_path_factory.mktemp("openapi"), nodes=2, app=APP) as nodes:
        nodes.wait_ready(timeout_s=60)
        url = nodes.urls[0]
        served = httpx.get(f"{url}{OPENAPI_PATH}", headers=CREDENTIALS, timeout=10).json()
        assert served["paths"] == node_schema.raw_schema["paths"]
        assert served["components"] == node_schema.raw_schema["components"]
        yield url


@pytest.mark.e2e
@pytest.mark.timeout(120)
@node_schema.parametrize()
def test_fuzz_a_node_process_over_http(case: FuzzCase, node_url: str) -> None:
    call_and_validate(case, base_url=node_url)
