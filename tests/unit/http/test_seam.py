"""The server seam (`sparkiq.http.seam`): both servers serve any `App` the same way.

A small app of its own answers now, later and as a stream; the loop server (over raw
sockets) and the ASGI adapter (through httpx) must send each kind as HTTP/1.1 says, in
request order, and stop a stream whose client went away. Then the node's own app
(`NodeApp`): a request answered later counts in flight until it is answered, or until its
client goes away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

import httpx
import pytest

from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpApi, HttpSettings
from sparkiq.http.app.asgi import AsgiApp
from sparkiq.http.app.nodeapp import NodeApp
from sparkiq.http.seam import JSON_HEADERS, REQUEST_ID, Answer, Response, Stream
from sparkiq.http.server.loopserver import LoopServer
from sparkiq.http.staticview import StaticView
from tests.support.stores import put_value

SSE = (("content-type", "text/event-stream"), ("cache-control", "no-cache"))


class Soon:
    """A `Later` that answers after `delay_s`."""

    def __init__(self, response: Response, delay_s: float) -> None:
        self.response = response
        self.delay_s = delay_s
        self.handle: asyncio.TimerHandle | None = None
        self.cancelled = False

    def then(self, done: Callable[[Response], None]) -> None:
        self.handle = asyncio.get_running_loop().call_later(self.delay_s, done, self.response)

    def cancel(self) -> None:
        self.cancelled = True
        if self.handle is not None:
            self.handle.cancel()


class ToyApp:
    """An `App`: /now, /later, /found, /stream (three events), /forever (until closed)."""

    read_headers: tuple[str, ...] = ("x-toy",)
    max_body_bytes = 100

    def __init__(self) -> None:
        self.streams_closed = 0
        self.laters: list[Soon] = []

    def answer(
        self, method: str, target: bytes, headers: Mapping[bytes, bytes], body: bytes | None
    ) -> Answer:
        REQUEST_ID.set("toy-" + target.decode().strip("/"))
        if body is None:
            return Response(413, b'{"too":"large"}')
        if target == b"/now":
            return Response(200, b'{"when":"now"}')
        if target == b"/found":
            return b'{"found":true}'
        if target == b"/later":
            later = Soon(Response(200, b'{"when":"later"}'), 0.2)
            self.laters.append(later)
            return later
        if target == b"/stream":
            return Stream(200, SSE, self._events(3))
        if target == b"/forever":
            return Stream(200, SSE, self._events(None))
        return Response(404, b"{}", JSON_HEADERS)

    def answer_plain(
        self,
        target: bytes,
        hops: bytes | None = None,
        budget: bytes | None = None,
        request_id: bytes | None = None,
    ) -> Answer:
        return self.answer("GET", target, {}, b"")

    def refusal(self, status: int, message: str) -> Response:
        return Response(status, b'{"refused":true}')

    async def _events(self, n: int | None) -> AsyncIterator[bytes]:
        try:
            i = 0
            while n is None or i < n:
                yield b"data: %d\n\n" % i
                i += 1
                await asyncio.sleep(0.01)
        finally:
            self.streams_closed += 1


async def toy_server(app: ToyApp) -> LoopServer:
    server = LoopServer(app, "127.0.0.1", free_port())
    await server.start()
    return server


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: toy\r\n\r\n".encode()


async def read_chunked(reader: asyncio.StreamReader) -> list[bytes]:
    chunks = []
    while True:
        size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 5))[:-2], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return chunks
        chunks.append(data[:-2])


async def test_the_loop_server_sends_each_kind_of_answer_in_request_order() -> None:
    app = ToyApp()
    server = await toy_server(app)
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        # Pipelined: the later answer and the stream hold the ones behind them.
        writer.write(get("/later") + get("/stream") + get("/found") + get("/now"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"x-request-id: toy-later" in head
        assert await reader.readexactly(16) == b'{"when":"later"}'
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert b"transfer-encoding: chunked" in head
        assert b"content-type: text/event-stream" in head
        assert b"x-request-id: toy-stream" in head
        assert await read_chunked(reader) == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert b"x-request-id: toy-found" in head
        assert await reader.readexactly(14) == b'{"found":true}'
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert b"x-request-id: toy-now" in head
        assert await reader.readexactly(14) == b'{"when":"now"}'
        assert app.streams_closed == 1
        writer.close()
    finally:
        await server.stop()


async def test_a_stream_and_a_later_answer_stop_when_their_client_goes() -> None:
    app = ToyApp()
    server = await toy_server(app)
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(get("/forever"))
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        size = await asyncio.wait_for(reader.readuntil(b"\r\n"), 5)
        assert await reader.readexactly(int(size[:-2], 16) + 2) == b"data: 0\n\n\r\n"
        writer.close()
        for _ in range(100):
            if app.streams_closed:
                break
            await asyncio.sleep(0.02)
        assert app.streams_closed == 1
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(get("/later"))
        await asyncio.sleep(0.05)
        writer.close()
        for _ in range(100):
            if app.laters[-1].cancelled:
                break
            await asyncio.sleep(0.02)
        assert app.laters[-1].cancelled
    finally:
        await server.stop()


async def test_a_body_over_the_apps_limit_is_passed_as_none() -> None:
    app = ToyApp()
    server = await toy_server(app)
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        body = b"x" * 101
        writer.write(b"POST /now HTTP/1.1\r\nhost: toy\r\ncontent-length: 101\r\n\r\n" + body)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 413 ")
        assert b"connection: close" in head
        assert await reader.readexactly(15) == b'{"too":"large"}'
        writer.close()
    finally:
        await server.stop()


async def test_the_asgi_adapter_sends_each_kind_of_answer() -> None:
    app = ToyApp()
    transport = httpx.ASGITransport(app=AsgiApp(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://toy") as client:
        assert (await client.get("/now")).json() == {"when": "now"}
        found = await client.get("/found")
        assert (found.status_code, found.json()) == (200, {"found": True})
        assert found.headers["x-request-id"] == "toy-found"
        assert (await client.get("/later")).json() == {"when": "later"}
        stream = await client.get("/stream")
        assert stream.headers["content-type"] == "text/event-stream"
        assert stream.content == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert (await client.post("/now", content=b"x" * 101)).status_code == 413
    assert app.streams_closed == 1


USERS = TableDef("users", "users-changelog", 2)


async def test_the_node_app_counts_a_later_answer_in_flight_until_it_is_given() -> None:
    port = free_port()
    view = StaticView(f"http://127.0.0.1:{port}", [USERS])
    view.place_all(USERS, dict.fromkeys(range(USERS.partitions), view.url))
    put_value(view, USERS, "u1", {"n": 1})
    api = HttpApi(view, HttpSettings(request_budget_s=0.5))
    app = NodeApp(api)
    try:
        # A key here: answered now, never in flight.
        assert isinstance(app.answer_plain(b"/v1/tables/users/keys/u1"), bytes)
        assert app.gate.in_flight == 0
        # The generic path: later, in flight from `then` until it is answered.
        later = app.answer("GET", b"/v1/tables/users/range?limit=5", {}, b"")
        assert not isinstance(later, bytes | Response | Stream)
        answered: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        later.then(answered.set_result)
        assert app.gate.in_flight == 1
        response = await asyncio.wait_for(answered, 5)
        assert response.status == 200
        assert app.gate.in_flight == 0
        # Cancelled (its client went away): no answer, and out of flight.
        later = app.answer("GET", b"/v1/tables/users/range?limit=5", {}, b"")
        assert not isinstance(later, bytes | Response | Stream)
        given: list[Response] = []
        later.then(given.append)
        later.cancel()
        await asyncio.sleep(0.05)
        assert (given, app.gate.in_flight) == ([], 0)
        # A body over the limit: 413, before the gate (no request id).
        too_large = app.answer("POST", b"/v1/tables/users/multi-get", {}, None)
        assert isinstance(too_large, Response)
        assert too_large.status == 413
        assert REQUEST_ID.get() is None
    finally:
        await api.close()


@pytest.mark.parametrize("status", [400, 408, 500, 503])
def test_the_node_app_names_each_refusal_of_the_server(status: int) -> None:
    view = StaticView("http://127.0.0.1:1", [USERS])
    app = NodeApp(HttpApi(view))
    refusal = app.refusal(status, "why")
    assert refusal.status == status
    code = {400: "bad_request", 408: "request_timeout", 500: "internal"}
    assert f'"code":"{code.get(status, "too_many_connections")}"'.encode() in refusal.body
