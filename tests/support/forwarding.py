"""A forwarder between nodes in one process, for the HTTP API's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from sparkiq.http import AsgiApp
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.messages.responses import JSON_HEADERS, Response
from sparkiq.http.messages.wire import BUDGET_HEADER, HOPS_HEADER


class InProcessForwarder:
    """Forwards to other nodes' ASGI apps in this process; an unknown URL is unreachable."""

    def __init__(self) -> None:
        self.apps: dict[str, AsgiApp] = {}

    async def send(
        self,
        base_url: str,
        method: str,
        target: str,
        body: bytes | None,
        *,
        hops: int,
        budget_s: float,
    ) -> Response | Unreachable:
        app = self.apps.get(base_url)
        if app is None:
            return Unreachable(base_url, "connection refused")
        headers = {HOPS_HEADER: str(hops + 1), BUDGET_HEADER: str(max(1, int(budget_s * 1000)))}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=base_url
        ) as client:
            try:
                async with asyncio.timeout(budget_s):
                    r = await client.request(method, target, content=body, headers=headers)
            except TimeoutError:
                return Unreachable(base_url, f"no answer within {budget_s:.3f}s")
        out = JSON_HEADERS
        if "retry-after" in r.headers:
            out = (*JSON_HEADERS, ("retry-after", r.headers["retry-after"]))
        return Response(r.status_code, r.content, out)

    def send_now(
        self,
        base_url: str,
        target: str,
        *,
        hops: int,
        budget_s: float,
        on_answer: Callable[[Response | Unreachable | None], None],
    ) -> bool:
        return False  # always the coroutine path (`send`)

    async def close(self) -> None:
        pass
