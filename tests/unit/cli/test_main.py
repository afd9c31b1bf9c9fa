"""The `sparkiq` commands that read from nodes (cli/main.py): `watch` and `changes` print
each event."""

from __future__ import annotations

import asyncio

import orjson
from click.testing import CliRunner

from sparkiq.cli.main import main
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.testing import DictStore
from tests.support.mapview import MapView

USERS = TableDef("users", "users-changelog", 2)


async def test_watch_prints_the_state_then_each_change_as_json_lines() -> None:
    port = free_port()
    me = f"http://127.0.0.1:{port}"
    view = MapView(me, [USERS])
    for p in range(USERS.partitions):
        view.set_placement((USERS.topic, p), me, store=DictStore())
    view.apply(USERS, "alice", {"n": 1})
    async with HttpServer(view, "127.0.0.1", port, HttpSettings()):
        args = ["watch", "users", "alice", "--url", me, "--count", "3"]
        running = asyncio.create_task(asyncio.to_thread(CliRunner().invoke, main, args))
        for _ in range(500):
            if view.watcher_count():
                break
            await asyncio.sleep(0.01)
        view.apply(USERS, "alice", {"n": 2})
        view.apply(USERS, "alice", None)
        async with asyncio.timeout(10):
            result = await running
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.output.splitlines()]
    assert [line["value"] for line in lines] == [{"n": 1}, {"n": 2}, None]
    assert {line["key"] for line in lines} == {"alice"}


async def test_changes_prints_each_change_of_the_range_as_json_lines() -> None:
    port = free_port()
    me = f"http://127.0.0.1:{port}"
    view = MapView(me, [USERS])
    for p in range(USERS.partitions):
        view.set_placement((USERS.topic, p), me, store=DictStore())
    view.apply(USERS, "alice", {"n": 1})  # before the watch: not printed
    async with HttpServer(view, "127.0.0.1", port, HttpSettings()):
        args = ["changes", "users", "--prefix", "al", "--url", me, "--count", "3"]
        running = asyncio.create_task(asyncio.to_thread(CliRunner().invoke, main, args))
        for _ in range(500):
            if view.watcher_count() == USERS.partitions:
                break
            await asyncio.sleep(0.01)
        view.apply(USERS, "alice", {"n": 2})
        view.apply(USERS, "bob", {"n": 3})
        view.apply(USERS, "alfred", {"n": 4})
        view.apply(USERS, "alice", None)
        async with asyncio.timeout(10):
            result = await running
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.output.splitlines()]
    assert len(lines) == 3  # bob is not in the range
    assert [line["value"] for line in lines if line["key"] == "alice"] == [{"n": 2}, None]
    assert [line["value"] for line in lines if line["key"] == "alfred"] == [{"n": 4}]


def test_changes_refuses_a_prefix_with_bounds() -> None:
    result = CliRunner().invoke(main, ["changes", "users", "--prefix", "a", "--from", "b"])
    assert result.exit_code == 2
    assert "not both" in result.output
