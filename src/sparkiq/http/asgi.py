"""ASGI adapter: serves `HttpApi` to any ASGI server, and to tests through httpx.ASGITransport.

It only moves bytes: raw path, query string, the headers the API reads, a body of bounded
size in; status, headers and body out. Every request passes the API's gate first
(`sparkiq.http.guard`: request id, concurrency limit, caller, cluster signature); a refusal is
sent as it is. A GET without a query string goes to the key path (`sparkiq.http.keypath`)
first, which answers single-key lookups without the generic dispatch; whatever it declines
goes to `HttpApi.handle`. Every answer carries the request's `x-request-id`. Lifespan events
are acknowledged (the node owns the API's lifetime, not the server).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sparkiq.auth import Identity
from sparkiq.auth.apikeys import API_KEY_HEADER
from sparkiq.auth.cluster import CLUSTER_HEADER
from sparkiq.http.api import HttpApi
from sparkiq.http.requestid import REQUEST_ID, REQUEST_ID_HEADER
from sparkiq.http.responses import Response, raw_headers
from sparkiq.http.settings import BUDGET_HEADER, HOPS_HEADER

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_HOPS = HOPS_HEADER.encode()
_BUDGET = BUDGET_HEADER.encode()
_AUTHORIZATION = b"authorization"
_API_KEY = API_KEY_HEADER.encode()
_CLUSTER = CLUSTER_HEADER.encode()
_REQUEST_ID = REQUEST_ID_HEADER.encode()


class AsgiApp:
    """`HttpApi` as an ASGI 3 application."""

    def __init__(self, api: HttpApi) -> None:
        self.api = api
        self._keys = api.keys
        self._gate = api.gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                await _lifespan(receive, send)
            return
        hops = budget = authorization = api_key = signature = request_id = None
        for name, value in scope["headers"]:
            if name == _HOPS:
                hops = value
            elif name == _BUDGET:
                budget = value
            elif name == _AUTHORIZATION:
                authorization = value.decode("latin-1")
            elif name == _API_KEY:
                api_key = value.decode("latin-1")
            elif name == _CLUSTER:
                signature = value.decode("latin-1")
            elif name == _REQUEST_ID:
                request_id = value.decode("latin-1")
        # The raw path keeps %2F inside a key apart from "/"; some clients (httpx's
        # ASGITransport) put the query string (or the "?" of an empty one) in it too.
        raw_path: bytes | None = scope.get("raw_path")
        if raw_path is None:
            raw_path = scope["path"].encode("utf-8")
        elif b"?" in raw_path:
            raw_path = raw_path.partition(b"?")[0]
        path = raw_path.decode("latin-1")
        query: bytes = scope["query_string"]
        method: str = scope["method"]
        gate = self._gate
        admitted = gate.admit(
            method,
            path,
            f"{path}?{query.decode('latin-1')}" if query else path,
            authorization=authorization,
            api_key=api_key,
            request_id=request_id,
            hops=None if hops is None else hops.decode("latin-1"),
            signature=signature,
        )
        if isinstance(admitted, Response):
            await _send(send, admitted)
            return
        gate.in_flight += 1
        try:
            response = None
            if method == "GET" and not query:
                # The hot path first: a GET without a query whose raw path the key path knows.
                response = await self._keys.answer(raw_path, hops, budget, admitted)
            if response is None:
                response = await self._generic(scope, receive, path, query, admitted)
        finally:
            gate.in_flight -= 1
        await _send(send, response)

    async def _generic(
        self, scope: Scope, receive: Receive, path: str, query: bytes, identity: Identity
    ) -> Response:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method: str = scope["method"]
        body: bytes | None = b""
        if method == "POST":
            body = await _read_body(receive, headers, self.api.settings.max_body_bytes)
        if body is None:
            return self.api.body_too_large()
        return await self.api.handle(method, path, query.decode("latin-1"), headers, body, identity)


async def _send(send: Send, response: Response) -> None:
    """Send `response`, with the request's id."""
    headers = [*raw_headers(response.headers), (_REQUEST_ID, (REQUEST_ID.get() or "").encode())]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
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
