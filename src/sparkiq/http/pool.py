"""A small HTTP/1.1 client with keep-alive pools, for node-to-node forwarding.

Forwarding is on the hot path of every request that lands on the wrong node, and a general
client (aiohttp) spends more time per request than the whole local answer takes. This one
only does what sparkiq nodes need from each other: one request at a time per connection,
responses framed by Content-Length (chunked and close-delimited also understood), idle
connections kept per origin and reused. A request that fails on a reused connection before
any answer byte arrived is retried once on a new connection: all forwarded requests are reads.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from sparkiq.auth.cluster import CLUSTER_HEADER, ClusterCredential
from sparkiq.http.forward import Unreachable
from sparkiq.http.guard import FORWARD_HEADERS
from sparkiq.http.responses import JSON, JSON_HEADERS, Response
from sparkiq.http.settings import BUDGET_HEADER, HOPS_HEADER

_MAX_HEAD = 64 * 1024


# How often in-flight requests are checked against their deadlines: a request past its
# budget is answered Unreachable up to this much late. One periodic check instead of a timer
# per request: under uvloop `asyncio.timeout()` measured ~16 us per request, a call_at and
# its cancel ~3 us, which is a sizeable share of a forwarded answer.
_SWEEP_S = 0.01


class _Broken(Exception):
    """The connection closed or sent something that is not HTTP/1.1; internal to this module."""

    def __init__(self, message: str, *, got_bytes: bool) -> None:
        super().__init__(message)
        self.got_bytes = got_bytes


class _Expired(Exception):
    """No complete answer before the request's deadline; internal to this module."""


@dataclass(slots=True)
class _Answer:
    status: int
    retry_after: str | None
    body: bytes
    keep_alive: bool


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time from what arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._waiter: asyncio.Future[_Answer] | None = None
        self._head: tuple[int, str | None, int | None, bool, bool] | None = None
        self._head_len = 0
        self.deadline = 0.0  # loop.time() by which the pending answer must be complete

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._waiter is None or self._waiter.done():
            return
        try:
            answer = self._parse(eof=False)
        except _Broken as exc:
            self._fail(exc)
            return
        if answer is not None:
            self._waiter.set_result(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            try:
                answer = self._parse(eof=True)
            except _Broken as broken:
                self._fail(broken)
                return
            if answer is not None:
                self._waiter.set_result(answer)
            else:
                self._fail(_Broken(f"connection closed: {exc}", got_bytes=bool(self._buf)))

    # -- use ---------------------------------------------------------------------------------

    def expect(self, deadline: float) -> asyncio.Future[_Answer]:
        """Be ready for the answer to a request about to be sent; its future."""
        assert self.transport is not None
        self._buf.clear()
        self._head = None
        self.deadline = deadline
        self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def broken(self, message: str) -> None:
        """Fail the pending answer: nothing was sent or received on this connection."""
        self._fail(_Broken(message, got_bytes=False))

    def expire(self) -> None:
        """Give up on the pending answer (its deadline passed) and drop the connection."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(_Expired())
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: _Broken | _Expired) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()

    def _parse(self, *, eof: bool) -> _Answer | None:
        buf = self._buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise _Broken("response head too large", got_bytes=True)
                return None
            self._head = _parse_head(bytes(buf[:end]))
            self._head_len = end + 4
        status, retry_after, length, chunked, keep_alive = self._head
        start = self._head_len
        if length is not None:
            if len(buf) - start < length:
                return None
            return _Answer(status, retry_after, bytes(buf[start : start + length]), keep_alive)
        if chunked:
            body = _dechunk(buf, start)
            return None if body is None else _Answer(status, retry_after, body, keep_alive)
        if not eof:  # delimited by the end of the connection
            return None
        return _Answer(status, retry_after, bytes(buf[start:]), False)


def _response(answer: _Answer) -> Response:
    headers = JSON_HEADERS
    if answer.retry_after is not None:
        headers = (*JSON_HEADERS, ("retry-after", answer.retry_after))
    return Response(answer.status, answer.body, headers)


def _unreachable(base_url: str, budget_s: float, exc: BaseException) -> Unreachable:
    if isinstance(exc, TimeoutError | _Expired):
        return Unreachable(base_url, f"no answer within {budget_s:.3f}s")
    return Unreachable(base_url, f"{type(exc).__name__}: {exc}")


def _parse_head(head: bytes) -> tuple[int, str | None, int | None, bool, bool]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise _Broken(f"not an HTTP/1.x status line: {lines[0][:80]!r}", got_bytes=True)
    try:
        status = int(parts[1])
    except ValueError:
        raise _Broken(f"bad status {parts[1][:20]!r}", got_bytes=True) from None
    keep_alive = parts[0] == b"HTTP/1.1"
    length: int | None = None
    chunked = False
    retry_after: str | None = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            keep_alive = value.strip().lower() != b"close"
        elif name == b"retry-after":
            retry_after = value.strip().decode("latin-1")
    return status, retry_after, length, chunked, keep_alive


def _dechunk(buf: bytearray, pos: int) -> bytes | None:
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        pos = eol + 2
        if size == 0:
            return bytes(out) if buf.find(b"\r\n", pos) >= 0 else None
        if len(buf) < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        pos += size + 2


class _Origin:
    """Idle connections to one origin (host, port), over TLS when `tls` is given."""

    def __init__(self, host: str, port: int, keep: int, tls: ssl.SSLContext | None) -> None:
        self.host = host
        self.port = port
        self.authority = f"{host}:{port}"
        self.keep = keep
        self.tls = tls
        self.idle: deque[_Connection] = deque()

    async def connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self.tls is None:
            _, conn = await loop.create_connection(_Connection, self.host, self.port)
        else:
            _, conn = await loop.create_connection(
                _Connection, self.host, self.port, ssl=self.tls, server_hostname=self.host
            )
        return conn

    def take_idle(self) -> _Connection | None:
        """The most recently used open idle connection (the least likely to have timed out)."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        return None

    def release(self, conn: _Connection, keep_alive: bool) -> None:
        if keep_alive and not conn.closed and len(self.idle) < self.keep:
            self.idle.append(conn)
        else:
            conn.close()


class PoolForwarder:
    """`Forwarder` over raw keep-alive HTTP/1.1 connections, pooled per owner URL.

    Every request carries the current request's id and caller credentials
    (`guard.FORWARD_HEADERS`) and, when the cluster has a credential, its signature.
    https:// owners are reached over TLS, verified against `ssl_context` (default: the
    system's trust store).
    """

    def __init__(
        self,
        pool_per_host: int = 64,
        *,
        cluster: ClusterCredential | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._keep = pool_per_host
        self._cluster = cluster
        self._ssl = ssl_context
        self._origins: dict[str, _Origin] = {}
        self._busy: set[_Connection] = set()  # awaiting an answer, checked by `_sweep`
        # Requests of this loop iteration, sent together at its end, so that an owner woken
        # by the first may find the others ready (the gain measured within noise; see
        # BENCHMARKS.md).
        self._sending: list[tuple[_Connection, bytes]] = []
        self._sweeping = False

    def _origin(self, base_url: str) -> _Origin:
        origin = self._origins.get(base_url)
        if origin is None:
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"cannot forward to {base_url!r}: only http(s)://host:port")
            tls: ssl.SSLContext | None = None
            if parts.scheme == "https":
                tls = self._ssl if self._ssl is not None else ssl.create_default_context()
            default_port = 443 if tls is not None else 80
            origin = _Origin(parts.hostname, parts.port or default_port, self._keep, tls)
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
        except (TimeoutError, _Expired, OSError, _Broken) as exc:
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
        """`send` of a GET on an idle connection, answered through a callback (no task)."""
        origin = self._origins.get(base_url)
        conn = origin.take_idle() if origin is not None else None
        if origin is None or conn is None:
            return False
        request = self._request(origin, "GET", target, None, hops, budget_s)
        waiter = self._begin(conn, request, asyncio.get_running_loop().time() + budget_s)

        def done(waiter: asyncio.Future[_Answer]) -> None:
            self._busy.discard(conn)
            if not waiter.cancelled() and waiter.exception() is None:
                answer = waiter.result()
                origin.release(conn, answer.keep_alive)
                on_answer(_response(answer))
                return
            conn.close()
            exc = None if waiter.cancelled() else waiter.exception()
            if isinstance(exc, _Broken) and not exc.got_bytes:
                on_answer(None)  # nothing sent or received: e.g. the owner had closed it
            elif isinstance(exc, _Expired | _Broken | OSError):
                on_answer(_unreachable(base_url, budget_s, exc))
            else:  # cancelled, or an error this pool does not expect
                on_answer(None)

        waiter.add_done_callback(done)
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
        head = (
            f"{method} {target} HTTP/1.1\r\nhost: {origin.authority}\r\n"
            f"{HOPS_HEADER}: {hops + 1}\r\n{BUDGET_HEADER}: {max(1, int(budget_s * 1000))}\r\n"
            f"{FORWARD_HEADERS.get()}"
        )
        if self._cluster is not None:
            head += f"{CLUSTER_HEADER}: {self._cluster.sign(method, target, hops + 1)}\r\n"
        if body is not None:
            head += f"content-type: {JSON}\r\ncontent-length: {len(body)}\r\n"
        return (head + "\r\n").encode("latin-1") + (body or b"")

    async def _exchange(self, origin: _Origin, request: bytes, deadline: float) -> _Answer:
        while (conn := origin.take_idle()) is not None:
            try:
                answer = await self._once(origin, conn, request, deadline)
            except _Broken as exc:
                if exc.got_bytes:
                    raise
                continue  # the owner closed an idle connection: take another one
            return answer
        async with asyncio.timeout_at(deadline):
            conn = await origin.connect()
        return await self._once(origin, conn, request, deadline)

    async def _once(
        self, origin: _Origin, conn: _Connection, request: bytes, deadline: float
    ) -> _Answer:
        waiter = self._begin(conn, request, deadline)
        try:
            answer = await waiter
        except BaseException:
            conn.close()  # cancelled or broken mid-answer: the connection's state is unknown
            raise
        finally:
            self._busy.discard(conn)
        origin.release(conn, answer.keep_alive)
        return answer

    def _begin(self, conn: _Connection, request: bytes, deadline: float) -> asyncio.Future[_Answer]:
        """Send `request` on `conn` at the end of this loop iteration; the answer's future.

        The caller takes `conn` out of `_busy` once the future is done.
        """
        loop = asyncio.get_running_loop()
        self._busy.add(conn)
        if not self._sweeping:
            self._sweeping = True
            loop.call_later(_SWEEP_S, self._sweep)
        waiter = conn.expect(deadline)
        if not self._sending:
            loop.call_soon(self._send_all)
        self._sending.append((conn, request))
        return waiter

    def _send_all(self) -> None:
        """Send the requests of this loop iteration in one burst (see `_once`)."""
        sending, self._sending = self._sending, []
        for conn, request in sending:
            if conn.transport is not None and not conn.closed:
                conn.transport.write(request)
            else:  # closed by the owner before the request left: try another connection
                conn.broken("connection closed before the request was sent")

    def _sweep(self) -> None:
        """Expire the requests past their deadline; runs every _SWEEP_S while any is out."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn in [c for c in self._busy if c.deadline <= now]:
            self._busy.discard(conn)
            conn.expire()
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
