"""Reference apps for bench_http: the floor of a Python app on granian, without sparkiq.

`python benchmarks/refapp.py --port P [--interface rsgi|asgi]` serves GET /<anything>/k<i>
from a Python dict of 100k JSON bodies (404 when absent), on granian's embedded server in a
uvloop loop -- the same way a sparkiq node runs -- so the gap between this and sparkiq is the
sparkiq layer (routing, parsing, RocksDB, rendering), not the server.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

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


async def main(port: int, interface: str) -> None:
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
    parser.add_argument("--interface", choices=("rsgi", "asgi"), default="rsgi")
    args = parser.parse_args()
    uvloop.run(main(args.port, args.interface))
