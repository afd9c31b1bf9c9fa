"""Runs the HTTP API inside the node's own asyncio loop.

The server is sparkiq's own HTTP/1.1 server on the node's loop (`sparkiq.http.server.loopserver`:
asyncio protocols, httptools' parser): one thread does everything, and a local key lookup is
answered without a task. It shares the loop, the view and the connection pool of its node,
and applies the connection limit and the timeouts of `HttpSettings` (a connection past the
limit is refused at once).
`HttpServer.start()` returns once the port accepts connections; `stop()` stops accepting,
lets the server wind down, and closes the forwarding pool.
"""

from __future__ import annotations

from types import TracebackType

from sparkiq.auth import AuthConfig
from sparkiq.core.errors import ConfigError
from sparkiq.core.openfiles import LISTEN_BACKLOG
from sparkiq.http.app.dispatch import HttpApi
from sparkiq.http.app.nodeapp import NodeApp
from sparkiq.http.forwarder import Forwarder
from sparkiq.http.metrics import HttpMetrics
from sparkiq.http.nodeview import NodeView
from sparkiq.http.server.loopserver import LoopServer
from sparkiq.http.settings import HttpSettings
from sparkiq.http.tls import TlsConfig


class HttpServer:
    """One node's HTTP API on host:port, served in the running loop."""

    def __init__(
        self,
        view: NodeView,
        host: str,
        port: int,
        settings: HttpSettings | None = None,
        *,
        forwarder: Forwarder | None = None,
        metrics: HttpMetrics | None = None,
        backlog: int = LISTEN_BACKLOG,
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
        s = self.api.settings
        self.app = NodeApp(self.api)
        self._loop_server = LoopServer(
            self.app,
            host,
            port,
            ssl_context=tls.server_context() if tls is not None else None,
            backlog=backlog,
            max_connections=s.max_connections,
            header_timeout_s=s.header_timeout_s,
            idle_timeout_s=s.idle_timeout_s,
            request_timeout_s=s.request_timeout_s,
        )

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        """Start serving; returns once the port accepts connections."""
        try:
            await self._loop_server.start()
        except OSError as exc:
            raise ConfigError(f"cannot serve HTTP on {self.url}: {exc}") from None
        # The connection series are the node's metrics too, while it serves.
        self.api.metrics.registry.register(self._loop_server)

    async def stop(self) -> None:
        """Stop accepting, wait for the server to wind down, close the forwarding pool."""
        if self._loop_server.started:
            self.api.metrics.registry.unregister(self._loop_server)
        await self._loop_server.stop()
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
    auth: AuthConfig | None = None,
    tls: TlsConfig | None = None,
) -> HttpServer:
    """Start the node's HTTP API in the running loop; `await server.stop()` to end it."""
    server = HttpServer(view, host, port, settings, auth=auth, tls=tls)
    await server.start()
    return server
