"""Reference apps for bench_http: the floor of a Python app on a server stack, without sparkiq.

`python benchmarks/refapp.py --port P [--interface loop|rsgi|asgi]` serves GET
/<anything>/k<i> from a Python dict of 100k JSON bodies (404 when absent) in a uvloop loop:

- `loop`: an asyncio protocol with httptools' parser, answering in its parser callback --
  the stack a sparkiq node's default server (`sparkiq.http.loopserver`) is built on;
- `rsgi`, `asgi`: granian's embedded server (a sparkiq node's `rsgi`/`asgi` interfaces).

The gap between one of these and a sparkiq node on the same stack is the sparkiq layer
(the gate, routing, RocksDB, rendering, metrics), not the server.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

import httptools
import orjson
import uvloop
from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server

VALUES = {f"k{i}": orjson.dumps({"key": f"k{i}", "value": {"n": i}}) for i in range(100_000)}
HEADERS = [("content-type", "application/json")]


class RsgiRef:
    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        body = VALUES.get(scope.path.rpartition("/")[2])
        if body is None:
            proto.response_bytes(404, HEADERS, b'{"error":"absent"}')
        else:
            proto.response_bytes(200, HEADERS, body)


async def asgi_ref(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = VALUES.get(scope["path"].rpartition("/")[2])
    status = 200 if body is not None else 404
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body or b'{"error":"absent"}'})


_LOOP_HEAD = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
LOOP_ANSWERS = {
    key.encode(): _LOOP_HEAD % (200, b"OK", len(body)) + body for key, body in VALUES.items()
}
LOOP_ABSENT = _LOOP_HEAD % (404, b"Not Found", 18) + b'{"error":"absent"}'


class LoopRef(asyncio.Protocol):
    """One connection: httptools calls back with the URL, the answer is written at once."""

    def __init__(self) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self._transport.close()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_message_complete(self) -> None:
        key = self._url.rpartition(b"/")[2]
        self._url = b""
        self._transport.write(LOOP_ANSWERS.get(key, LOOP_ABSENT))


async def serve_loop(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(LoopRef, "127.0.0.1", port, backlog=1024)
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    loop.add_signal_handler(signal.SIGINT, stopped.set)
    await stopped.wait()
    server.close()


async def main(port: int, interface: str) -> None:
    if interface == "loop":
        await serve_loop(port)
        return
    if interface == "rsgi":
        server = Server(
            RsgiRef(),
            port=port,
            interface=Interfaces.RSGI,
            http=HTTPModes.http1,
            websockets=False,
            log_enabled=False,
            backlog=1024,
        )
    else:
        server = Server(
            asgi_ref,
            port=port,
            interface=Interfaces.ASGINL,
            http=HTTPModes.http1,
            websockets=False,
            log_enabled=False,
            backlog=1024,
        )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, server.stop)
    loop.add_signal_handler(signal.SIGINT, server.stop)
    await server.serve()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interface", choices=("loop", "rsgi", "asgi"), default="rsgi")
    args = parser.parse_args()
    uvloop.run(main(args.port, args.interface))
