"""ASGI adapter: serves `HttpApi` to any ASGI server, and to tests through httpx.ASGITransport.

It only moves bytes: raw path, query string, the headers the API reads, a body of bounded
size in; status, headers and body out. A GET without a query string goes to the key path
(`sparkiq.http.keypath`) first, which answers single-key lookups without the generic
dispatch; whatever it declines goes to `HttpApi.handle`. Lifespan events are acknowledged
(the node owns the API's lifetime, not the server).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sparkiq.http.api import HttpApi
from sparkiq.http.responses import raw_headers
from sparkiq.http.settings import BUDGET_HEADER, HOPS_HEADER

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_HOPS = HOPS_HEADER.encode()
_BUDGET = BUDGET_HEADER.encode()


class AsgiApp:
    """`HttpApi` as an ASGI 3 application."""

    def __init__(self, api: HttpApi) -> None:
        self.api = api
        self._keys = api.keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            # The hot path first: a GET without a query whose raw path the key path knows.
            raw_path: bytes | None = scope.get("raw_path")
            if raw_path and scope["method"] == "GET" and not scope["query_string"]:
                hops = budget = None
                for name, value in scope["headers"]:
                    if name == _HOPS:
                        hops = value
                    elif name == _BUDGET:
                        budget = value
                # Some clients (httpx's ASGITransport) put the "?" of an empty query in it.
                path = raw_path.partition(b"?")[0] if b"?" in raw_path else raw_path
                response = await self._keys.answer(path, hops, budget)
                if response is not None:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": response.status,
                            "headers": raw_headers(response.headers),
                        }
                    )
                    await send({"type": "http.response.body", "body": response.body})
                    return
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_path: bytes | None = scope.get("raw_path")
        # The raw path keeps %2F inside a key apart from "/"; some clients (httpx's
        # ASGITransport) put the query string in it too.
        path = raw_path.split(b"?", 1)[0].decode("latin-1") if raw_path else scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method: str = scope["method"]
        body: bytes | None = b""
        if method == "POST":
            body = await _read_body(receive, headers, self.api.settings.max_body_bytes)
        if body is None:
            response = self.api.body_too_large()
        else:
            query = scope["query_string"].decode("latin-1")
            response = await self.api.handle(method, path, query, headers, body)
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": raw_headers(response.headers),
            }
        )
        await send({"type": "http.response.body", "body": response.body})


async def _read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes | None:
    """The request body; None once it is over `limit` bytes (read no further)."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk: bytes = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
