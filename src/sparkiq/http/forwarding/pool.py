"""A small HTTP/1.1 client with keep-alive pools, for node-to-node forwarding.

Forwarding is on the hot path of every request that lands on the wrong node, and a general
client (aiohttp) spends more time per request than the whole local answer takes. This one
only does what sparkiq nodes need from each other: requests pipelined on keep-alive
connections (answered in order), responses framed by Content-Length (chunked and
close-delimited also understood), idle connections kept per origin and reused. A request that
fails before any byte of its answer arrived is asked again on another connection: all
forwarded requests are reads.

One connection, and the reading of its answers, is `sparkiq.http.forwarding.poolconnection`.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections import deque
from collections.abc import Callable
from contextvars import copy_context

from sparkiq.auth.cluster import ClusterCredential
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.forwarding.poolconnection import (
    Expired,
    ForwardAnswer,
    ForwardConnection,
    Waiting,
    _Broken,
    node_address,
)
from sparkiq.http.messages.requestid import REQUEST_ID
from sparkiq.http.messages.responses import JSON_HEADERS, Response
from sparkiq.http.messages.wire import FORWARD_HEADERS, forward_request

# How often in-flight requests are checked against their deadlines: a request past its
# budget is answered Unreachable up to this much late. One periodic check instead of a timer
# per request: under uvloop `asyncio.timeout()` measured ~16 us per request, a call_at and
# its cancel ~3 us, which is a sizeable share of a forwarded answer.
_SWEEP_S = 0.01


def _settle_future(
    future: asyncio.Future[ForwardAnswer], outcome: ForwardAnswer | Exception
) -> None:
    if future.done():  # a cancelled request's answer is dropped
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _response(answer: ForwardAnswer) -> Response:
    headers = JSON_HEADERS
    if answer.retry_after is not None:
        headers = (*JSON_HEADERS, ("retry-after", answer.retry_after))
    return Response(answer.status, answer.body, headers)


def _pass_on(
    on_answer: Callable[[Response | Unreachable | None], None],
    base_url: str,
    budget_s: float,
    outcome: ForwardAnswer | Exception,
) -> None:
    """Tell a `send_now` caller what became of its request."""
    if isinstance(outcome, ForwardAnswer):
        on_answer(_response(outcome))
    elif isinstance(outcome, _Broken) and not outcome.got_bytes:
        on_answer(None)  # no answer began: e.g. the owner had closed the connection
    elif isinstance(outcome, Expired | _Broken | OSError):
        on_answer(_unreachable(base_url, budget_s, outcome))
    else:  # an error this pool does not expect
        on_answer(None)


def _unreachable(base_url: str, budget_s: float, exc: BaseException) -> Unreachable:
    if isinstance(exc, TimeoutError | Expired):
        return Unreachable(base_url, f"no answer within {budget_s:.3f}s")
    return Unreachable(base_url, f"{type(exc).__name__}: {exc}")


class _Origin:
    """Connections to one origin (host, port), over TLS when `tls` is given."""

    def __init__(self, host: str, port: int, keep: int, tls: ssl.SSLContext | None) -> None:
        self.host = host
        self.port = port
        self.authority = f"{host}:{port}"
        self.keep = keep
        self.tls = tls
        self.idle: deque[ForwardConnection] = deque()
        # The connection this loop iteration's `send_now` requests are pipelined on.
        self.filling: ForwardConnection | None = None

    async def connect(self) -> ForwardConnection:
        loop = asyncio.get_running_loop()
        if self.tls is None:
            _, conn = await loop.create_connection(self._new, self.host, self.port)
        else:
            _, conn = await loop.create_connection(
                self._new, self.host, self.port, ssl=self.tls, server_hostname=self.host
            )
        return conn

    def _new(self) -> ForwardConnection:
        return ForwardConnection(self.release)

    def take_idle(self) -> ForwardConnection | None:
        """The most recently used open idle connection (the least likely to have timed out)."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        return None

    def release(self, conn: ForwardConnection) -> None:
        """Keep `conn`, whose answers have all arrived, for the next requests (or close it)."""
        if conn.closed or conn is self.filling:
            return
        if len(self.idle) < self.keep:
            self.idle.append(conn)
        else:
            conn.close()


class PoolForwarder:
    """`Forwarder` over raw keep-alive HTTP/1.1 connections, pooled per owner URL.

    Every request carries the current request's id (`REQUEST_ID`) and caller credentials
    (`wire.FORWARD_HEADERS`) and, when the cluster has a credential, its signature.
    https:// owners are reached over TLS, verified against `ssl_context` (default: the
    system's trust store).

    `send_now` pipelines: the single-key GETs of one loop iteration to one owner share a
    connection, up to `forward_pipeline_depth` of them, and leave in one write; the owner reads them
    in one go and answers them in one write. On loopback the system calls are most of a
    forward's cost, and this saves all but one pair per batch on both nodes. The price: an
    answer the owner holds back (a partition it is restoring) holds back the ones behind it
    on that connection, within the request budget. `send` (multi-gets, range pages, the
    read loop) takes a connection of its own.
    """

    def __init__(
        self,
        pool_per_host: int = 64,
        *,
        pipeline_depth: int = 16,
        cluster: ClusterCredential | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if pipeline_depth < 1:
            raise ValueError(f"pipeline_depth must be >= 1, got {pipeline_depth}")
        self._keep = pool_per_host
        self._depth = pipeline_depth
        self._cluster = cluster
        self._ssl = ssl_context
        self._origins: dict[str, _Origin] = {}
        self._busy: set[ForwardConnection] = set()  # awaiting answers, checked by `_sweep`
        # Connections with requests of this loop iteration, written at its end (`_send_all`).
        self._sending: list[tuple[ForwardConnection, _Origin]] = []
        self._sweeping = False

    def _origin(self, base_url: str) -> _Origin:
        origin = self._origins.get(base_url)
        if origin is None:
            host, port, tls = node_address(base_url, self._ssl)
            origin = _Origin(host, port, self._keep, tls)
            self._origins[base_url] = origin
        return origin

    async def send(
        self,
        base_url: str,
        method: str,
        target: str,
        body: bytes | None,
        *,
        hops: int,
        budget_s: float,
    ) -> Response | Unreachable:
        try:
            origin = self._origin(base_url)
        except ValueError as exc:
            return Unreachable(base_url, str(exc))
        request = self._request(origin, method, target, body, hops, budget_s)
        deadline = asyncio.get_running_loop().time() + budget_s
        try:
            answer = await self._exchange(origin, request, deadline)
        except (TimeoutError, Expired, OSError, _Broken) as exc:
            return _unreachable(base_url, budget_s, exc)
        return _response(answer)

    def send_now(
        self,
        base_url: str,
        target: str,
        *,
        hops: int,
        budget_s: float,
        on_answer: Callable[[Response | Unreachable | None], None],
    ) -> bool:
        """`send` of a GET on a pooled connection, answered through a callback (no task);
        False if there is none to take (then use `send`)."""
        origin = self._origins.get(base_url)
        if origin is None:
            return False
        conn = origin.filling
        if conn is None or conn.closed or conn.in_flight >= self._depth:
            conn = origin.take_idle()
            if conn is None:
                return False
            origin.filling = conn
        # `_request`, written out (every forward's path): one call less.
        signature = None if self._cluster is None else self._cluster.sign("GET", target, hops + 1)
        request = forward_request(
            "GET",
            target,
            origin.authority,
            hops + 1,
            max(1, int(budget_s * 1000)),
            FORWARD_HEADERS.get(),
            REQUEST_ID.get(),
            signature,
            None,
        )
        # Called from the connection as the answer is read: no future, no extra loop turn.
        # (A partial, not a closure: cheaper to make and to drop, at every request.)
        done = functools.partial(_pass_on, on_answer, base_url, budget_s)
        deadline = asyncio.get_running_loop().time() + budget_s
        self._begin(conn, origin, request, Waiting(done, copy_context(), deadline))
        return True

    def _request(
        self,
        origin: _Origin,
        method: str,
        target: str,
        body: bytes | None,
        hops: int,
        budget_s: float,
    ) -> bytes:
        signature = None
        if self._cluster is not None:
            signature = self._cluster.sign(method, target, hops + 1)
        return forward_request(
            method,
            target,
            origin.authority,
            hops + 1,
            max(1, int(budget_s * 1000)),
            FORWARD_HEADERS.get(),
            REQUEST_ID.get(),
            signature,
            body,
        )

    async def _exchange(self, origin: _Origin, request: bytes, deadline: float) -> ForwardAnswer:
        while (conn := origin.take_idle()) is not None:
            try:
                return await self._begin_future(conn, origin, request, deadline)
            except _Broken as exc:
                if exc.got_bytes:
                    raise
                continue  # the owner closed an idle connection: take another one
        async with asyncio.timeout_at(deadline):
            conn = await origin.connect()
        return await self._begin_future(conn, origin, request, deadline)

    def _begin_future(
        self, conn: ForwardConnection, origin: _Origin, request: bytes, deadline: float
    ) -> asyncio.Future[ForwardAnswer]:
        """`_begin` with a future for the answer.

        A request whose caller gives up (cancelled) leaves its connection as it is: its answer
        is dropped when it arrives, and the connection goes back to the pool after it.
        """
        future: asyncio.Future[ForwardAnswer] = asyncio.get_running_loop().create_future()
        notify = functools.partial(_settle_future, future)
        self._begin(conn, origin, request, Waiting(notify, copy_context(), deadline))
        return future

    def _begin(
        self, conn: ForwardConnection, origin: _Origin, request: bytes, waiting: Waiting
    ) -> None:
        """Send `request` on `conn` at the end of this loop iteration; `waiting` gets the answer."""
        loop = asyncio.get_running_loop()
        self._busy.add(conn)
        if not self._sweeping:
            self._sweeping = True
            loop.call_later(_SWEEP_S, self._sweep)
        conn.expect(waiting)
        if not self._sending:
            loop.call_soon(self._send_all)
        if not conn.out:
            self._sending.append((conn, origin))
        conn.out.append(request)

    def _send_all(self) -> None:
        """Write the requests of this loop iteration, each connection's in one write."""
        sending, self._sending = self._sending, []
        for conn, origin in sending:
            out, conn.out = conn.out, []
            if origin.filling is conn:
                origin.filling = None
                if not conn.in_flight:  # answered already (an error, or closed)
                    origin.release(conn)
            if conn.transport is not None and not conn.closed:
                conn.transport.write(out[0] if len(out) == 1 else b"".join(out))
            else:  # closed by the owner before the requests left: try another connection
                conn.broken("connection closed before the request was sent")

    def _sweep(self) -> None:
        """Expire the requests past their deadline; runs every _SWEEP_S while any is out."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn in list(self._busy):
            if conn.closed or not conn.in_flight or conn.expire(now):
                self._busy.discard(conn)
        if self._busy:
            loop.call_later(_SWEEP_S, self._sweep)
        else:
            self._sweeping = False

    async def close(self) -> None:
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop().close()
        self._origins.clear()
        await asyncio.sleep(0)
