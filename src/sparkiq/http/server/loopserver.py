"""HTTP/1.1 on the node's own event loop: asyncio protocols with httptools' parser.

The server frames requests and writes answers; what a request means is the app's
(`sparkiq.http.seam.App`, the only thing this module knows of the node). Why a server of its
own (docs/benchmark-levers.md, "Why the HTTP path is built as it is"): one that does its
HTTP work in a thread of its own hands every request to the Python thread and back, and on
two cores that hand-over costs more CPU than the lookup. Here one thread does everything:
the loop reads the socket, httptools (the llhttp parser, in C) calls back with the URL and
headers, and a single-key GET whose partition is local is answered before `data_received`
returns -- no task, no thread switch. An answer that comes later (`seam.Later`: a forward, a
wait) holds the requests behind it on its connection, which answers them in the order they
came (HTTP/1.1 pipelining); a streamed one (`seam.Stream`) is sent chunked as it is made,
pausing while the client does not read.

What a connection does:
- keep-alive as HTTP/1.1 says (`Connection: close`, HTTP/1.0 without keep-alive: close after
  the answer); a connection that sends nothing is closed after `header_timeout_s`, one idle
  between requests after `idle_timeout_s`, and a request whose head or body has not arrived
  within `request_timeout_s` gets 408 and the connection closes (one sweep checks them all,
  a few times per shortest timeout: nothing is timed per request);
- the raw request target is kept as sent, so keys may hold any character ("%2F" included);
- a body over the app's `max_body_bytes` (declared or counted) is not kept: the app answers
  the request (413) and the connection closes; a request httptools cannot parse gets 400
  and the connection closes;
- reading pauses while the transport's write buffer is full or too many requests wait.

Past `max_connections` open connections, a new one is answered 503 (`too_many_connections`,
with Retry-After) and closed as it is accepted: its client fails at once instead of waiting
in the listen queue, and the node's descriptors stay bounded (`LoopServer.refuse`). Counting
happens when a connection opens and closes, never per request. With TLS a connection counts
once its handshake is done; the handshake itself must end within `header_timeout_s`.

The plain lane: most lookups arrive as one read holding one `GET <path> HTTP/1.1` whose headers
are only of the kind nothing here reads (Host, User-Agent, Accept...). Such a read is
answered by `_answer_plain` without the parser, its callbacks and the header bookkeeping
(`benchmarks/bench_lane.py` counts what a lookup costs either way). A read with anything
else -- another method or version, a query, more or less than one whole request, a header
that frames the message, changes the connection or is read by the app (`App.read_headers`)
-- takes the parser's way. The node lane: reads of requests forwarded by another node
exactly as `sparkiq.http.forwarding.pool` writes them (`wire.FORWARDED`) are answered
the same way. Every way gives the same answers (tests/unit/http/test_loopserver.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkiq.core.openfiles import LISTEN_BACKLOG, open_file_limit
from sparkiq.http.messages.wire import answer_head
from sparkiq.http.seam import REQUEST_ID, App
from sparkiq.http.server.connection import Connection
from sparkiq.http.server.plainlane import not_plain
from sparkiq.http.settings import connection_limit, default_max_connections

log = logging.getLogger(__name__)

# Refused connections are logged at most once per this many seconds.
_REFUSAL_LOG_EVERY_S = 10.0
# How long `stop` waits for the streamed answers it cancelled to end.
_STREAMS_END_S = 5.0


class LoopServer(Collector):
    """An `App` served by asyncio protocols in the running loop.

    `max_connections` (None: `default_max_connections` of the open-file limit) bounds the
    connections open at once; the timeouts are `HttpSettings`'. While it serves, its
    connection series are in the API's metrics registry (`collect`).
    """

    def __init__(
        self,
        app: App,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = LISTEN_BACKLOG,
        max_connections: int | None = None,
        header_timeout_s: float = 10.0,
        idle_timeout_s: float = 75.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.app = app
        self.not_plain = not_plain(app.read_headers)
        self.host = host
        self.port = port
        self.connections: set[Connection] = set()
        self.max_connections = connection_limit(max_connections, backlog)
        self.refused = 0  # connections refused past `max_connections`
        self.timeouts = {"header": 0, "idle": 0, "request": 0}  # connections each closed
        self._ssl = ssl_context
        self._backlog = backlog
        self._header_s = header_timeout_s
        self._idle_s = idle_timeout_s
        self._request_s = request_timeout_s
        # A few sweeps per shortest timeout, at most one a second.
        shortest = min(header_timeout_s, idle_timeout_s, request_timeout_s)
        self._sweep_s = min(1.0, max(0.05, shortest / 4))
        self._refusal = _refusal(app, self.max_connections)
        self._refused_logged = 0  # `refused` when it was last logged
        self._refusal_logged_at = -_REFUSAL_LOG_EVERY_S
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._flushing: list[Connection] = []

    def to_flush(self, connection: Connection) -> None:
        """Send `connection`'s answers at the end of this loop iteration.

        The loop first answers every request that arrived on every connection, then sends
        the answers in one burst, so that a client woken by the first answer may find the
        rest ready instead of being woken for each; it also lets pipelined answers of one
        connection go out in one write. Writing each answer at once instead cost ~50% more
        CPU per lookup (`benchmarks/bench_http.py`): clients then answered by one write each
        send their next request at once, and each loop turn finds fewer requests.
        """
        if not self._flushing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._flushing.append(connection)

    @property
    def started(self) -> bool:
        """Whether it accepts connections (between `start` and `stop`)."""
        return self._server is not None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self),
            self.host,
            self.port,
            ssl=self._ssl,
            backlog=self._backlog,
            reuse_address=True,
            # An unfinished TLS handshake is a connection that has sent no request yet.
            ssl_handshake_timeout=self._header_s if self._ssl is not None else None,
        )
        self._sweeper = loop.create_task(self._sweep())
        files = open_file_limit()
        log.info(
            "HTTP on %s:%d: at most %d connections (open-file limit %s)",
            self.host,
            self.port,
            self.max_connections,
            files if files >= 0 else "unlimited",
        )
        if self.max_connections > default_max_connections(files, self._backlog):
            log.warning(
                "max_connections %d leaves too few of the %d open files the process may hold "
                "for Kafka, RocksDB and bursts of new connections: raise the limit "
                "(ulimit -n, LimitNOFILE=) or lower max_connections",
                self.max_connections,
                files,
            )

    def refuse(self, transport: asyncio.Transport) -> None:
        """Answer a connection past `max_connections` 503 and close it; count it, and log
        (at most every `_REFUSAL_LOG_EVERY_S`)."""
        transport.write(self._refusal)
        transport.close()
        self.refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= _REFUSAL_LOG_EVERY_S:
            # Not any request's: the id the last request on the loop left must not show.
            token = REQUEST_ID.set(None)
            try:
                log.warning(
                    "HTTP connection limit reached: %d open (max_connections %d); %d new "
                    "connections refused since the last report",
                    len(self.connections),
                    self.max_connections,
                    self.refused - self._refused_logged,
                )
            finally:
                REQUEST_ID.reset(token)
            self._refusal_logged_at = now
            self._refused_logged = self.refused

    async def stop(self) -> None:
        """Stop accepting and close every connection (requests in flight are cancelled);
        returns once the streamed answers (watches) have ended, or after `_STREAMS_END_S`."""
        server, self._server = self._server, None
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if server is not None:
            server.close()
            connections = list(self.connections)
            streams = [task for c in connections if (task := c.end_stream()) is not None]
            for connection in connections:
                connection.close()
            if streams:
                # Cancelled, each ends at its next await; what it started (a watch's relays
                # and replays) ends with it, before the node closes what they read.
                await asyncio.wait(streams, timeout=_STREAMS_END_S)
            await server.wait_closed()

    def _flush(self) -> None:
        connections, self._flushing = self._flushing, []
        now = time.monotonic()
        for connection in connections:
            connection.flush(now)

    async def _sweep(self) -> None:
        timeouts = self.timeouts
        while True:
            await asyncio.sleep(self._sweep_s)
            now = time.monotonic()
            for connection in list(self.connections):
                struck = connection.check_timeouts(
                    now, self._header_s, self._idle_s, self._request_s
                )
                if struck is not None:
                    timeouts[struck] += 1

    def collect(self) -> Iterator[Metric]:
        """The connection series, read when /metrics is fetched."""
        yield GaugeMetricFamily(
            "sparkiq_http_connections", "HTTP connections open.", len(self.connections)
        )
        yield GaugeMetricFamily(
            "sparkiq_http_connections_limit",
            "HTTP connections the node holds open at most (max_connections).",
            self.max_connections,
        )
        yield CounterMetricFamily(
            "sparkiq_http_connections_refused",
            "HTTP connections refused (503, closed at once) past max_connections.",
            self.refused,
        )
        closed = CounterMetricFamily(
            "sparkiq_http_connection_timeouts",
            "HTTP connections closed by a timeout: header (sent nothing), idle (between "
            "requests), request (408: a request that did not arrive in time).",
            labels=("timeout",),
        )
        for timeout, n in self.timeouts.items():
            closed.add_metric((timeout,), n)
        yield closed


def _refusal(app: App, limit: int) -> bytes:
    """What a connection past the limit is sent before it is closed."""
    message = f"this node holds its limit of {limit} connections; retry shortly"
    response = app.refusal(503, message)
    headers = (*response.headers, ("retry-after", "1"))
    head = answer_head(503, headers, None, keep_alive=False)
    return head + b"content-length: %d\r\n\r\n" % len(response.body) + response.body
