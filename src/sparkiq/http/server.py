"""Runs the HTTP API inside the node's own asyncio loop.

Three interfaces carry it. The default, `loop`, is sparkiq's own HTTP/1.1 server on the
node's loop (`sparkiq.http.loopserver`: asyncio protocols, httptools' parser): one thread
does everything, and a local key lookup is answered without a task. `asgi` and `rsgi` run
granian's embedded server, which does the socket and HTTP/1.1 work in a Rust thread and calls
the app on the caller's loop; they cost a thread hand-over per request (BENCHMARKS.md). Every
interface shares the loop, the view and the connection pool of its node.
The connection limit and the timeouts are `HttpSettings`': `loop` applies them all (a
connection past the limit is refused at once); granian's interfaces get the limit as their
`backpressure` (they stop accepting past it) and the header timeout as their HTTP/1 header
read timeout, and have no idle or request timeout to set.
`HttpServer.start()` returns once the port accepts connections; `stop()` stops accepting,
lets the server wind down, and closes the forwarding pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from enum import StrEnum
from types import TracebackType

from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.http import HTTP1Settings
from granian.server.embed import Server

from sparkiq.auth import AuthConfig
from sparkiq.errors import ConfigError
from sparkiq.http.api import HttpApi
from sparkiq.http.asgi import AsgiApp
from sparkiq.http.forward import Forwarder
from sparkiq.http.loopserver import LoopServer
from sparkiq.http.metrics import HttpMetrics
from sparkiq.http.rsgi import RsgiApp
from sparkiq.http.settings import HttpSettings, connection_limit
from sparkiq.http.tls import TlsConfig
from sparkiq.http.view import NodeView

log = logging.getLogger(__name__)


class Interface(StrEnum):
    """Which server carries the API: sparkiq's own (`loop`) or granian's (`asgi`, `rsgi`; see
    `sparkiq.http.rsgi` for the trade-off between those two)."""

    LOOP = "loop"  # sparkiq's server on the node's loop; exact raw paths like ASGI
    ASGI = "asgi"  # granian; exact raw paths: keys may hold any character, "/" included
    RSGI = "rsgi"  # granian's native interface; keys must not contain "/"


class HttpServer:
    """One node's HTTP API on host:port, served in the running loop."""

    def __init__(
        self,
        view: NodeView,
        host: str,
        port: int,
        settings: HttpSettings | None = None,
        *,
        interface: Interface = Interface.LOOP,
        forwarder: Forwarder | None = None,
        metrics: HttpMetrics | None = None,
        backlog: int = 1024,
        auth: AuthConfig | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        if port <= 0:
            raise ConfigError(f"the HTTP port must be a fixed port > 0, got {port}")
        self.host = host
        self.port = port
        self.tls = tls
        self.api = HttpApi(
            view,
            settings,
            forwarder=forwarder,
            metrics=metrics,
            auth=auth,
            client_ssl=tls.client_context() if tls is not None else None,
        )
        self._loop_server: LoopServer | None = None
        self._server: Server | None = None
        self._task: asyncio.Task[None] | None = None
        s = self.api.settings
        if interface is Interface.LOOP:
            self._loop_server = LoopServer(
                self.api,
                host,
                port,
                ssl_context=tls.server_context() if tls is not None else None,
                backlog=backlog,
                max_connections=s.max_connections,
                header_timeout_s=s.header_timeout_s,
                idle_timeout_s=s.idle_timeout_s,
                request_timeout_s=s.request_timeout_s,
            )
            return
        target: AsgiApp | RsgiApp
        if interface is Interface.RSGI:
            target, granian_interface = RsgiApp(self.api), Interfaces.RSGI
        else:
            # ASGINL: no lifespan round trip; the node owns startup and shutdown.
            target, granian_interface = AsgiApp(self.api), Interfaces.ASGINL
        self._server = Server(
            target,
            address=host,
            port=port,
            interface=granian_interface,
            http=HTTPModes.http1,
            websockets=False,
            log_enabled=False,
            backlog=backlog,
            # Connections served at once (granian takes a permit per connection before it
            # accepts one: past the limit, new ones wait in the listen queue).
            backpressure=connection_limit(s.max_connections, backlog),
            http1_settings=HTTP1Settings(
                header_read_timeout=max(1, round(s.header_timeout_s * 1000))
            ),
            ssl_cert=tls.cert_file if tls is not None else None,
            ssl_key=tls.key_file if tls is not None else None,
            ssl_key_password=tls.key_password if tls is not None else None,
            ssl_protocol_min=SSLProtocols.tls12,
        )

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self, timeout_s: float = 10.0) -> None:
        """Start serving; returns once the port accepts connections."""
        if self._loop_server is not None:
            try:
                await self._loop_server.start()
            except OSError as exc:
                raise ConfigError(f"cannot serve HTTP on {self.url}: {exc}") from None
            return
        if self._task is not None:
            return
        assert self._server is not None
        self._task = asyncio.get_running_loop().create_task(self._server.serve())
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            if self._task.done():
                self._task.result()  # raises what stopped granian (e.g. port in use)
                raise ConfigError(f"HTTP server on {self.url} stopped while starting")
            try:
                _, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    await self.stop()
                    raise ConfigError(f"HTTP server on {self.url} did not start") from None
                await asyncio.sleep(0.01)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return

    async def stop(self) -> None:
        """Stop accepting, wait for the server to wind down, close the forwarding pool."""
        if self._loop_server is not None:
            await self._loop_server.stop()
        task, self._task = self._task, None
        if task is not None:
            assert self._server is not None
            self._server.stop()  # type: ignore[no-untyped-call]
            try:
                await asyncio.wait_for(task, timeout=10)
            except TimeoutError:
                log.warning("HTTP server on %s did not stop within 10s", self.url)
        await self.api.close()

    async def __aenter__(self) -> HttpServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def serve(
    view: NodeView,
    host: str,
    port: int,
    settings: HttpSettings | None = None,
    *,
    interface: Interface = Interface.LOOP,
    auth: AuthConfig | None = None,
    tls: TlsConfig | None = None,
) -> HttpServer:
    """Start the node's HTTP API in the running loop; `await server.stop()` to end it."""
    server = HttpServer(view, host, port, settings, interface=interface, auth=auth, tls=tls)
    await server.start()
    return server
