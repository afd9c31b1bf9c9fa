"""A `StaticView` whose `/v1/metadata` has a node's shape: what `sparkiq.Client` reads; and
two such nodes serving, as a client's tests need them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack

from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.staticview import DictStore, StaticView


class MapView(StaticView):
    """A StaticView whose metadata lists its tables and each partition's active and standbys
    as a node's does."""

    def metadata(self) -> dict[str, object]:
        return {
            "node": self.url,
            "tables": [self.table_summary(t) for t in self.tables()],
            "partitions": [
                {
                    "table": t.name,
                    "partition": p,
                    "active": self.placement((t.topic, p)).active,
                    "standbys": list(self.placement((t.topic, p)).standbys),
                    "warming": [],
                }
                for t in self.tables()
                for p in range(t.partitions)
            ],
            "nodes": [],
        }


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def active_and_standby(
    stack: AsyncExitStack, table: TableDef, settings: HttpSettings
) -> tuple[str, MapView, AsyncExitStack, str, MapView]:
    """Two serving nodes: `a`, the active of every partition of `table`, and `c`, their
    standby, both at offset 0. `c` lives as long as `stack`; `a` on the stack returned,
    to close when the test takes it down. Returns (a, its view, its stack, c, its view)."""
    a, c = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    view_a, view_c = MapView(a, [table]), MapView(c, [table])
    for view in (view_a, view_c):
        for p in range(table.partitions):
            view.set_placement((table.topic, p), a, [c], store=DictStore(), offset=0, lag=0)
    a_stack = AsyncExitStack()
    await a_stack.enter_async_context(HttpServer(view_a, "127.0.0.1", port_of(a), settings))
    await stack.enter_async_context(HttpServer(view_c, "127.0.0.1", port_of(c), settings))
    return a, view_a, a_stack, c, view_c


async def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll `cond` (a client fills what it reads from its own thread)."""
    for _ in range(int(timeout_s / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
