"""ASGI adapter: serves the node's API to any ASGI server, and to tests through
httpx.ASGITransport.

A pure-Python second server on the seam (`sparkiq.http.seam.App`), as the loop server
is the one nodes run: it only moves bytes. The raw target, the headers and a body of at most
`App.max_body_bytes` go in (`body=None` past it); the app's answer comes out: at once, when
a `Later` settles, or as a `Stream`'s chunks (`more_body`). Every answer carries the request's
`x-request-id`. Lifespan events are acknowledged (the node owns the API's lifetime, not the
server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sparkiq.http.app.dispatch import HttpApi
from sparkiq.http.app.nodeapp import NodeApp
from sparkiq.http.messages.responses import JSON_HEADERS, raw_headers
from sparkiq.http.seam import REQUEST_ID, REQUEST_ID_HEADER, App, Response, Stream

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_REQUEST_ID = REQUEST_ID_HEADER.encode()


class AsgiApp:
    """An `App` (a node's `HttpApi`, behind `NodeApp`) as an ASGI 3 application."""

    def __init__(self, api: HttpApi | App) -> None:
        self.app: App = NodeApp(api) if isinstance(api, HttpApi) else api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                await _lifespan(receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            key = name.lower()
            # Repeated headers are joined as RFC 9110 allows for list-valued fields.
            headers[key] = headers[key] + b", " + value if key in headers else value
        # The raw path keeps %2F inside a key apart from "/"; some clients (httpx's
        # ASGITransport) put the query string (or the "?" of an empty one) in it too.
        raw_path: bytes | None = scope.get("raw_path")
        if raw_path is None:
            raw_path = scope["path"].encode("utf-8")
        elif b"?" in raw_path:
            raw_path = raw_path.partition(b"?")[0]
        query: bytes = scope["query_string"]
        target = raw_path + b"?" + query if query else raw_path
        body = await _read_body(receive, headers, self.app.max_body_bytes)
        answer = self.app.answer(scope["method"], target, headers, body)
        if isinstance(answer, bytes):
            await _send(send, Response(200, answer, JSON_HEADERS))
        elif isinstance(answer, Response):
            await _send(send, answer)
        elif isinstance(answer, Stream):
            await _send_stream(send, answer)
        else:
            settled: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
            answer.then(settled.set_result)
            try:
                response = await settled
            except asyncio.CancelledError:
                answer.cancel()
                raise
            await _send(send, response)


def _id_header() -> list[tuple[bytes, bytes]]:
    """The request's id; no header for a request refused before the app saw it (a body too
    large), as from the loop server: the document's `x-request-id` is never empty."""
    rid = REQUEST_ID.get()
    return [] if rid is None else [(_REQUEST_ID, rid.encode())]


async def _send(send: Send, response: Response) -> None:
    """Send `response`, with the request's id."""
    headers = [*raw_headers(response.headers), *_id_header()]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


async def _send_stream(send: Send, stream: Stream) -> None:
    """Send a `Stream`: its head, then each chunk as it comes."""
    headers = [*raw_headers(stream.headers), *_id_header()]
    await send({"type": "http.response.start", "status": stream.status, "headers": headers})
    try:
        async for chunk in stream.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    finally:
        await stream.close()
    await send({"type": "http.response.body", "body": b""})


async def _read_body(receive: Receive, headers: dict[bytes, bytes], limit: int) -> bytes | None:
    """The request body; None once it is over `limit` bytes (read no further)."""
    declared = headers.get(b"content-length")
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
