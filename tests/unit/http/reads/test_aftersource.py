"""`after_source=`: a read waits until the table's pipeline committed past a source record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import pytest

from sparkiq.core.partitioner import partition_for
from sparkiq.core.progress import BatchProgress
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.staticview import DictStore, StaticView
from tests.support.stores import put_value

REWARDS = TableDef("rewards", "rewards-changelog", 2)
KEY = "card-7"
TP = (REWARDS.topic, partition_for(KEY.encode(), REWARDS.partitions))
SETTINGS = HttpSettings(request_budget_s=0.6, reconnect_pause_s=0.02, active_timeout_s=0.2)
PATH = f"/v1/tables/rewards/keys/{KEY}"


@pytest.fixture
async def node() -> AsyncIterator[tuple[StaticView, httpx.AsyncClient]]:
    port = free_port()
    me = f"http://127.0.0.1:{port}"
    view = StaticView(me, [REWARDS])
    for p in range(REWARDS.partitions):
        view.set_placement((REWARDS.topic, p), me, store=DictStore(), offset=10)
    put_value(view, REWARDS, KEY, {"points": 1})
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(HttpServer(view, "127.0.0.1", port, SETTINGS))
        client = await stack.enter_async_context(httpx.AsyncClient(base_url=me, timeout=5.0))
        yield view, client


def committed(view: StaticView, batch: int, pos_end: int, changelog_end: int) -> None:
    """The pipeline committed `batch`: it read `pos` partition 0 up to `pos_end`, and the
    table's changelog partition of KEY ended at `changelog_end`."""
    other = 1 - TP[1]
    view.progress.add(
        BatchProgress("rewards", batch, {("pos", 0): pos_end}, {TP[1]: changelog_end, other: 0})
    )


async def test_a_record_the_pipeline_committed_reads_at_the_positions_it_reached(
    node: tuple[StaticView, httpx.AsyncClient],
) -> None:
    view, client = node
    committed(view, 1, pos_end=5, changelog_end=10)
    r = await client.get(PATH, params={"after_source": "pos:0:4"})
    assert r.status_code == 200, r.text
    assert r.json()["value"] == {"points": 1}


async def test_a_read_waits_for_the_batch_and_the_replica(
    node: tuple[StaticView, httpx.AsyncClient],
) -> None:
    view, client = node
    committed(view, 1, pos_end=5, changelog_end=10)

    async def pipeline() -> None:
        await asyncio.sleep(0.1)
        committed(view, 2, pos_end=9, changelog_end=12)  # record 7 is in batch 2 ...
        await asyncio.sleep(0.1)
        view.apply(REWARDS, KEY, {"points": 2})  # ... whose changes reach the replica
        view.apply(REWARDS, KEY, {"points": 3})

    writer = asyncio.create_task(pipeline())
    r = await client.get(PATH, params={"after_source": "pos:0:7"})
    await writer
    assert r.status_code == 200, r.text
    assert r.json()["value"] == {"points": 3}
    assert r.json()["offset"] == 12


async def test_a_record_not_committed_in_time_is_a_503_saying_how_far_it_got(
    node: tuple[StaticView, httpx.AsyncClient],
) -> None:
    view, client = node
    none_yet = await client.get(PATH, params={"after_source": "pos:0:4"})
    assert none_yet.status_code == 503
    assert "no progress of table 'rewards'" in none_yet.json()["error"]["message"]
    committed(view, 1, pos_end=5, changelog_end=10)
    late = await client.get(PATH, params={"after_source": "pos:0:5,pos:1:0"})
    assert late.status_code == 503, late.text
    assert int(late.headers["retry-after"]) >= 1
    message = late.json()["error"]["message"]
    assert "not committed past pos:0:5, pos:1:0" in message
    assert "its last batch, 1, read up to pos:0:5, pos:1:unread" in message


@pytest.mark.parametrize("text", ["pos", "pos:0", "pos:x:1", ":0:1", "pos:0:1,"])
async def test_a_malformed_source_position_is_a_400(
    node: tuple[StaticView, httpx.AsyncClient], text: str
) -> None:
    _, client = node
    r = await client.get(PATH, params={"after_source": text})
    assert r.status_code == 400, r.text
    assert "after_source" in r.json()["error"]["message"]


async def test_every_read_takes_it(node: tuple[StaticView, httpx.AsyncClient]) -> None:
    view, client = node
    committed(view, 1, pos_end=5, changelog_end=10)
    multi = await client.post(
        "/v1/tables/rewards/multi-get?after_source=pos:0:1", json={"keys": [KEY]}
    )
    page = await client.get("/v1/tables/rewards/range", params={"after_source": "pos:0:1"})
    assert multi.status_code == 200, multi.text
    assert page.status_code == 200, page.text
    assert [i["key"] for i in page.json()["items"]] == [KEY]
