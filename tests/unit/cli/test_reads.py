"""`sparkiq range` and `sparkiq windows` (sparkiq.cli.reads) against a node on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from sparkiq.cli.main import main
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.core.timespec import now_ms
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.staticview import DictStore
from tests.support.mapview import MapView
from tests.support.stores import put_value

MINUTE = 60_000
CLICKS = TableDef("clicks", "clicks-changelog", 3, kind=TableKind.WINDOWED, window_size_ms=MINUTE)
USERS = TableDef("users", "users-changelog", 2)
KEYS = ["s1", "s10", "s2"]


@pytest.fixture
def starts() -> list[int]:
    """Window starts relative to when the test runs (a whole suite can outlast `--from -15m`)."""
    now = now_ms() // MINUTE * MINUTE
    return [now - 30 * MINUTE, now - 10 * MINUTE, now - 5 * MINUTE]


@pytest.fixture
async def node(starts: list[int]) -> AsyncIterator[str]:
    port = free_port()
    me = f"http://127.0.0.1:{port}"
    view = MapView(me, [CLICKS, USERS])
    for table in (CLICKS, USERS):
        for p in range(table.partitions):
            view.set_placement((table.topic, p), me, store=DictStore())
    for key in KEYS:
        for start in starts:
            put_value(view, CLICKS, key, {"key": key, "start": start}, window_start=start)
    for i in range(12):
        put_value(view, USERS, f"u{i:02d}", i)
    async with HttpServer(view, "127.0.0.1", port, HttpSettings()):
        yield me


async def run(*args: str) -> list[dict[str, Any]]:
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args))
    assert result.exit_code == 0, result.output
    return [orjson.loads(line) for line in result.output.splitlines()]


async def test_windows_of_every_key_in_key_then_start_order(node: str, starts: list[int]) -> None:
    lines = await run("windows", "clicks", "--from", "-15m", "--url", node, "--page-size", "2")
    assert [(w["key"], w["start"]) for w in lines] == [
        (key, start) for key in KEYS for start in starts[1:]
    ]
    newest = await run("windows", "clicks", "s10", "--order", "desc", "--limit", "2", "--url", node)
    assert [(w["key"], w["start"], w["end"]) for w in newest] == [
        ("s10", s, s + MINUTE) for s in starts[:0:-1]
    ]
    some = await run("windows", "clicks", "--key-from", "s10", "--key-to", "s2", "--url", node,
                     "--to", str(starts[0]))  # fmt: skip
    assert [(w["key"], w["start"]) for w in some] == [("s10", starts[0]), ("s2", starts[0])]


async def test_range_prints_entries_in_either_order(node: str) -> None:
    lines = await run("range", "users", "--order", "desc", "--page-size", "5", "--url", node)
    assert [line["key"] for line in lines] == [f"u{i:02d}" for i in range(11, -1, -1)]
    assert lines[0]["value"] == 11
    first = await run("range", "users", "--prefix", "u0", "--limit", "3", "--url", node)
    assert [line["key"] for line in first] == ["u00", "u01", "u02"]


def test_windows_refuses_a_key_with_key_bounds() -> None:
    result = CliRunner().invoke(main, ["windows", "clicks", "s1", "--prefix", "s"])
    assert result.exit_code == 2
    assert "not both" in result.output
