"""Reference app for bench_http: the floor of a Python app on a server stack, without sparkiq.

`python benchmarks/refapp.py --port P` serves GET /<anything>/k<i> from a Python dict of 100k
JSON bodies (404 when absent) in a uvloop loop: an asyncio protocol with httptools' parser,
answering in its parser callback -- the stack a sparkiq node's server
(`sparkiq.http.server.loopserver`) is built on.

The gap between this app and a sparkiq node on the same stack is the sparkiq layer (the
gate, routing, RocksDB, rendering, metrics), not the server.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

import httptools
import orjson
import uvloop

VALUES = {f"k{i}": orjson.dumps({"key": f"k{i}", "value": {"n": i}}) for i in range(100_000)}

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve_loop(args.port))
