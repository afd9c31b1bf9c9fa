"""The answer models (sparkiq.http.messages.models) are true of the answers a node gives.

Real answers, of an API over a `StaticView` and of a `Node`'s `/v1/metadata` (a node built
without Kafka, as in tests/unit/node/test_node.py), are validated with their models,
strictly, and the model must give the answer back as it was: a field the answer has and the
model lacks, or one the model requires and the answer leaves out, fails here.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.core.topology import ClusterMap, PartitionOwners
from sparkiq.http import AsgiApp, HttpApi, HttpSettings
from sparkiq.http.messages import models as m
from sparkiq.http.staticview import StaticView
from sparkiq.node.node import Node
from sparkiq.node.restore import PartitionStatus, ReplicaState
from sparkiq.node.settings import NodeSettings
from tests.support.forwarding import InProcessForwarder
from tests.support.stores import put_value

ME, OTHER = "http://node-a", "http://node-b"
USERS = TableDef("users", "users-changelog", 2, description="people by name")
COUNTS = TableDef("counts", "counts-changelog", 2, key_format=Format.LONG, value_format=Format.LONG)
DOCS = TableDef("docs", "docs-changelog", 2, key_format=Format.JSON)
BLOBS = TableDef("blobs", "blobs-changelog", 1, key_format=Format.BYTES, value_format=Format.BYTES)
CLICKS = TableDef("clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60_000)
TABLES = (USERS, COUNTS, DOCS, BLOBS, CLICKS)
SETTINGS = HttpSettings(max_body_bytes=4096)


def answer_of(r: httpx.Response, model: type[BaseModel]) -> BaseModel:
    """`r`'s body validated with `model`, checked to be the whole answer and nothing more."""
    parsed = model.model_validate_json(r.content, strict=True)
    assert parsed.model_dump(mode="json", exclude_unset=True) == r.json(), model.__name__
    return parsed


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    view = StaticView(ME, TABLES)
    for table in TABLES:
        view.place_all(table, {p: ME for p in range(table.partitions)})
    for i in range(20):
        put_value(view, USERS, f"user-{i}", {"n": i, "tags": ["a", None], "ok": True})
    for n in (-5, 0, 2**63 - 1):
        put_value(view, COUNTS, n, n // 2)
    put_value(view, DOCS, {"id": 7}, {"nested": {"x": 1.5}})
    put_value(view, BLOBS, "AAEC", b"\xff\x00")
    for start in (-60_000, 0, 60_000):
        put_value(view, CLICKS, "alice", {"clicks": start}, window_start=start)
    # users/1: node b is its active and unreachable; this node holds a standby.
    standby = ("users-changelog", 1)
    view.set_placement(standby, OTHER, [ME], store=view.local_store(standby))
    # A forwarder that knows no other node: every other one is unreachable.
    api = HttpApi(view, SETTINGS, forwarder=InProcessForwarder())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=AsgiApp(api)), base_url=ME) as c:
        yield c
    await api.close()


ANSWERS: list[tuple[str, str, type[BaseModel]]] = [
    ("GET", "/v1/tables", m.TableList),
    ("GET", "/v1/tables/users/keys/user-0", m.KeyAnswer),
    ("GET", "/v1/tables/counts/keys/-5", m.KeyAnswer),
    ("GET", "/v1/tables/docs/keys/%7B%22id%22%3A7%7D", m.KeyAnswer),
    ("GET", "/v1/tables/blobs/keys/AAEC", m.KeyAnswer),
    ("GET", "/v1/tables/clicks/keys/alice/windows", m.WindowsAnswer),
    ("GET", "/v1/tables/clicks/keys/nobody/windows?from=0", m.WindowsAnswer),
    ("GET", "/v1/tables/users/keys/user-1/owner", m.OwnerAnswer),
    ("GET", "/v1/tables/users/range?limit=2", m.RangeAnswer),
    ("GET", "/v1/tables/counts/range", m.RangeAnswer),
    ("GET", "/v1/tables/clicks/range?prefix=alice", m.RangeAnswer),
    ("GET", "/v1/tables/users/range?order=desc&limit=3", m.RangeAnswer),
    ("GET", "/v1/tables/clicks/keys/alice/windows?limit=1&order=desc", m.WindowsAnswer),
    ("GET", "/v1/tables/clicks/windows", m.WindowRangeAnswer),
    ("GET", "/v1/tables/clicks/windows?from=-1h&order=desc&prefix=al&limit=1", m.WindowRangeAnswer),
    ("GET", "/v1/tables/users/windows", m.ErrorAnswer),
    ("GET", "/healthz", m.Status),
    ("GET", "/readyz", m.Readiness),
    # Failures: the error shape, with the status of its code.
    ("GET", "/v1/tables/users/keys/nobody", m.ErrorAnswer),
    ("GET", "/v1/tables/nope/keys/x", m.ErrorAnswer),
    ("GET", "/v1/tables/counts/keys/twelve", m.ErrorAnswer),
    ("GET", "/v1/tables/users/keys/user-0/windows", m.ErrorAnswer),
    ("GET", "/v1/tables/users/keys/" + "x" * 5000, m.ErrorAnswer),
    ("GET", "/v1/tables/users/range?limit=0", m.ErrorAnswer),
    ("DELETE", "/v1/tables/users/keys/user-0", m.ErrorAnswer),
    ("GET", "/v2/whatever", m.ErrorAnswer),
]


@pytest.mark.parametrize(("method", "target", "model"), ANSWERS)
async def test_an_answer_is_its_model(
    client: httpx.AsyncClient, method: str, target: str, model: type[BaseModel]
) -> None:
    r = await client.request(method, target)
    answer = answer_of(r, model)
    if isinstance(answer, m.ErrorAnswer):
        assert r.status_code == answer.error.code.status
    else:
        assert r.status_code == 200, r.text


async def test_multi_get_answers_and_its_request_are_their_models(
    client: httpx.AsyncClient,
) -> None:
    body = {"keys": ["user-0", "user-1", "nobody"]}
    m.MultiGetRequest.model_validate(body, strict=True)
    r = await client.post("/v1/tables/users/multi-get", json=body)
    answer = answer_of(r, m.MultiGetAnswer)
    assert isinstance(answer, m.MultiGetAnswer)
    assert [item.value is None for item in answer.items] == [False, False, True]
    malformed = await client.post("/v1/tables/users/multi-get", json={"keys": "user-0"})
    answer_of(malformed, m.ErrorAnswer)


async def test_a_standby_answer_and_a_restoring_partition_are_their_models(
    client: httpx.AsyncClient,
) -> None:
    user = next(k for k in (f"user-{i}" for i in range(20)) if USERS.partition_of(k.encode()))
    r = await client.get(f"/v1/tables/users/keys/{user}?max_lag=100")
    answer = answer_of(r, m.KeyAnswer)
    assert isinstance(answer, m.KeyAnswer)
    assert answer.standby
    answer_of(await client.get("/v1/tables/users/range?max_lag=100"), m.RangeAnswer)


async def test_a_nodes_metadata_is_its_model(tmp_path: Path) -> None:
    node = Node(NodeSettings(bootstrap_servers="127.0.0.1:1", state_dir=tmp_path))
    node._set_tables({"users": USERS, "clicks": CLICKS})
    tp, tp2 = ("users-changelog", 0), ("clicks-changelog", 1)
    node._on_assignment(
        ClusterMap(
            7,
            {
                tp: PartitionOwners(OTHER, (node.url,), ("http://node-c",)),
                tp2: PartitionOwners(None),
            },
            nodes={OTHER: {tp: 0}, node.url: {tp: 12}},
            misplaced={tp: 2},
            refused={"someone": "http://node-c"},
        )
    )
    node.restorer._statuses = {
        tp: PartitionStatus(tp, "users", ReplicaState.FAILED, 3, 15, 12, 2, fault="I/O error"),
        tp2: PartitionStatus(tp2, "clicks", ReplicaState.STANDBY, 5, 5, 0, rebuilds=1),
    }
    api = HttpApi(node, SETTINGS)
    transport = httpx.ASGITransport(app=AsgiApp(api))
    async with httpx.AsyncClient(transport=transport, base_url=node.url) as client:
        r = await client.get("/v1/metadata")
    await api.close()
    assert r.status_code == 200, r.text
    answer = answer_of(r, m.Metadata)
    assert isinstance(answer, m.Metadata)
    assert {replica.state for replica in answer.local} == {"failed", "standby"}
    assert len(answer.nodes) == 3
    assert len(answer.partitions) == 2
    assert len(answer.refused) == 1


def test_replica_states_are_the_restorers() -> None:
    (states,) = [
        typing.get_args(field.annotation)
        for name, field in m.LocalReplicaStatus.model_fields.items()
        if name == "state"
    ]
    assert set(states) == {state.value for state in ReplicaState}


def test_absent_fields_are_optional_but_never_null() -> None:
    schemas: dict[str, Any] = m.json_schemas()
    window = schemas["TableSummary"]["properties"]["window_size_ms"]
    assert window == {
        "type": "integer",
        "minimum": 1,
        "description": "The window size (windowed tables only).",
    }
    assert "window_size_ms" not in schemas["TableSummary"]["required"]
    # ... while a field that may be null stays required.
    assert "next_cursor" in schemas["RangeAnswer"]["required"]
    assert {"type": "null"} in schemas["RangeAnswer"]["properties"]["next_cursor"]["anyOf"]
